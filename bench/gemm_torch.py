"""conform's GEMMs beside PyTorch's (cuBLAS, cuBLASLt) on the GPU (docs/cuda.md, "Performance").

    python3 bench/gemm_torch.py --conform-json BENCH.json [--out TABLE.md]

Reads the GEMM rows of `conform cuda-bench` (M = N = K = 4096 and M = 16,
N = K = 8192) and times PyTorch's call for the same product on the same
shapes in the same run:

* cuda.int8_gemm.fp32 beside torch._int_mm (s8 x s8 -> s32, cuBLASLt's INT8
  GEMM); target (issue 29) >= 0.5.  conform's rows include writing y (acc
  times the scales) besides acc.
* cuda.matmul.bf16 beside torch.matmul in BF16 (cuBLAS, FP32 accumulation),
  cuda.matmul.fp32 beside torch.matmul in FP32 with TF32 off (what the
  FP32 contract allows); no target is set for these: the ratio is reported.

Prints TOP/s (TFLOP/s) of each and conform's ratio.  Exits 2 when PyTorch
or a GPU is missing (nothing measured), 1 when a ratio misses its target.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import arguments, conform_rows, cuda_torch, ratio_cells, time_ms, write  # noqa: E402

TARGETS = {"cuda.int8_gemm.fp32": 0.5, "cuda.matmul.bf16": None, "cuda.matmul.fp32": None}


def peer_call(torch, kernel, m, n, k):
    """PyTorch's call computing the same product as `kernel`, and its name."""
    if kernel == "cuda.int8_gemm.fp32":
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-127, 128, (k, n), dtype=torch.int8, device="cuda")
        return (lambda: torch._int_mm(a, b)), "torch._int_mm (cuBLASLt)"
    dtype = torch.bfloat16 if kernel.endswith("bf16") else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(m, k, dtype=dtype, device="cuda")
    b = torch.randn(k, n, dtype=dtype, device="cuda")
    return (lambda: torch.matmul(a, b)), f"torch.matmul {str(dtype).split('.')[-1]} (cuBLAS)"


def main():
    args = arguments(__doc__)
    rows = conform_rows(args.conform_json, set(TARGETS), "gemm_torch.py")
    torch = cuda_torch("gemm_torch.py")
    if torch is None:
        return 2
    lines = [f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}", "",
             "| kernel | shape | conform TOP/s | peer | peer TOP/s | ratio | target |", "|---|---|---|---|---|---|---|"]
    missed = 0
    for r in rows:
        m = re.match(r"M=(\d+) N=(\d+) K=(\d+)$", r.get("shape", ""))
        if not m:
            sys.exit(f"gemm_torch.py: {args.conform_json}: unrecognised GEMM shape '{r.get('shape')}'")
        m, n, k = (int(g) for g in m.groups())
        call, peer = peer_call(torch, r["kernel"], m, n, k)
        try:
            ms = time_ms(torch, call)
        except RuntimeError as e:  # a shape cuBLASLt refuses (torch._int_mm asks M > 16 on some versions)
            lines.append(f"| {r['kernel']} | {r['shape']} | {r['tflop_per_s']:.1f} | {peer} | "
                         f"refused: {str(e).splitlines()[0][:80]} | | |")
            continue
        ours, theirs, target = r["tflop_per_s"], 2.0 * m * n * k / ms / 1e9, TARGETS[r["kernel"]]
        if target is None:
            cells = f"{ours:.1f} | {peer} | {theirs:.1f} | {ours / theirs:.2f} | none"
        else:
            cells, miss = ratio_cells(ours, theirs, target)
            ours_cell, rest = cells.split(" | ", 1)
            cells = f"{ours_cell} | {peer} | {rest}"
            missed += miss
        lines.append(f"| {r['kernel']} | {r['shape']} | {cells} |")
    write("\n".join(lines) + "\n", args.out)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
