"""cuda.attention.bf16 beside PyTorch's scaled_dot_product_attention (docs/cuda.md, "Performance").

    python3 bench/attention_torch.py --conform-json BENCH.json [--out TABLE.md]

Reads the attention rows of `conform cuda-bench` (BENCH.json), times PyTorch's
SDPA on the same shapes in the same run (bf16 on the GPU, the flash backend
where this PyTorch offers it, else its default choice, which the table
names), and prints a table: TFLOP/s of each and conform's ratio to PyTorch.
Target (issue 27): >= 0.5 on every prefill shape, >= 0.8 on decode.  Exits
2 when PyTorch or a GPU is missing (nothing measured), 1 when a ratio misses
its target.  Needs only PyTorch and the standard library.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import time_ms  # noqa: E402


def parse_shape(shape):
    """'BH=512 Lq=1024 Lk=1024 causal' -> (512, 1024, 1024, True)."""
    m = re.match(r"BH=(\d+) Lq=(\d+) Lk=(\d+)( causal)?$", shape)
    if not m:
        raise ValueError(f"unrecognised attention shape '{shape}' in the conform JSON")
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), bool(m.group(4))


def time_sdpa(torch, heads, lq, lk, d, causal):
    """Milliseconds per call of SDPA and the backend used, by CUDA events."""
    from torch.nn import functional as F

    q = torch.randn(1, heads, lq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, heads, lk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, heads, lk, d, device="cuda", dtype=torch.bfloat16)
    backend = "default"
    ctx = None
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        ctx, backend = sdpa_kernel(SDPBackend.FLASH_ATTENTION), "flash"
    except Exception:  # older PyTorch: its own choice
        pass

    def call():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def timed():
        return time_ms(torch, call)

    if ctx is None:
        return timed(), backend
    try:
        with ctx:
            return timed(), backend
    except RuntimeError:  # the flash backend refused this shape
        return timed(), "default"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conform-json", required=True, help="the output of `conform cuda-bench --out`")
    ap.add_argument("--out", help="also write the table (markdown) here")
    args = ap.parse_args()
    try:
        rows = [r for r in json.load(open(args.conform_json)) if r.get("kernel") == "cuda.attention.bf16"]
    except (OSError, ValueError) as e:
        sys.exit(f"attention_torch.py: cannot read {args.conform_json}: {e}")
    if not rows:
        sys.exit(f"attention_torch.py: {args.conform_json} has no cuda.attention.bf16 rows")
    try:
        shapes = [parse_shape(r["shape"]) for r in rows]
    except (KeyError, ValueError) as e:
        sys.exit(f"attention_torch.py: {args.conform_json}: {e}")
    try:
        import torch
    except ImportError:
        print("attention_torch.py: PyTorch is not importable here: nothing measured")
        return 2
    if not torch.cuda.is_available():
        print("attention_torch.py: PyTorch sees no GPU: nothing measured")
        return 2
    lines = [
        f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}",
        "",
        "| shape (D = 128, bf16) | conform TFLOP/s | PyTorch SDPA TFLOP/s (backend) | ratio | target |",
        "|---|---|---|---|---|",
    ]
    missed = 0
    for r, (heads, lq, lk, causal) in zip(rows, shapes):
        ms, backend = time_sdpa(torch, heads, lq, lk, 128, causal)
        torch_tflops = r["flops"] / ms / 1e9
        ratio = r["tflop_per_s"] / torch_tflops
        target = 0.8 if lq <= 16 else 0.5
        missed += ratio < target
        lines.append(f"| {r['shape']} | {r['tflop_per_s']:.1f} | {torch_tflops:.1f} ({backend}) | {ratio:.2f} | "
                     f"{'>=' if ratio >= target else 'MISSED <'} {target} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
