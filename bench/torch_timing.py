"""What the GPU comparison scripts share (bench/gemm_torch.py, bench/gdn_fla.py):
conform's rows from `conform cuda-bench` JSON, and milliseconds per call by
CUDA events.  Needs only the standard library here; PyTorch is the caller's."""

import argparse
import json
import sys


def arguments(doc):
    """--conform-json (required) and --out, the comparison scripts' command line."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--conform-json", required=True, help="the output of `conform cuda-bench --out`")
    ap.add_argument("--out", help="also write the table (markdown) here")
    return ap.parse_args()


def conform_rows(path, kernels, script):
    """The rows of BENCH.json whose kernel is in `kernels`; exits naming the file when it has none."""
    try:
        rows = [r for r in json.load(open(path)) if r.get("kernel") in kernels]
    except (OSError, ValueError) as e:
        sys.exit(f"{script}: cannot read {path}: {e}")
    if not rows:
        sys.exit(f"{script}: {path} has no rows of {', '.join(sorted(kernels))}")
    return rows


def cuda_torch(script):
    """PyTorch with a GPU, or None after saying why (the caller exits 2: nothing measured)."""
    try:
        import torch
    except ImportError:
        print(f"{script}: PyTorch is not importable here: nothing measured")
        return None
    if not torch.cuda.is_available():
        print(f"{script}: PyTorch sees no GPU: nothing measured")
        return None
    return torch


def time_ms(torch, call, reps=20):
    """Milliseconds per call: 3 warm-up calls, then CUDA events around `reps` (3 when a call passes 50 ms)."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    call()
    b.record()
    torch.cuda.synchronize()
    if a.elapsed_time(b) > 50:
        reps = 3
    a.record()
    for _ in range(reps):
        call()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def write(text, out):
    print(text, end="")
    if out:
        with open(out, "w") as f:
            f.write(text)


def ratio_cells(ours, peer, target):
    """'ours | peer | ratio | target' table cells of a rate and its peer's, and whether the target was missed."""
    ratio = ours / peer
    ok = ratio >= target
    return f"{ours:.1f} | {peer:.1f} | {ratio:.2f} | {'>=' if ok else 'MISSED <'} {target}", not ok
