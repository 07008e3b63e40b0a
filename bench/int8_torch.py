"""cuda.int8_gemm.fp32 beside cuBLASLt's INT8 GEMM through torch._int_mm (docs/cuda.md, "Performance").

    python3 bench/int8_torch.py --conform-json BENCH.json [--out TABLE.md]

Reads the INT8 GEMM rows of `conform cuda-bench` (M = N = K = 4096 and
M = 16, N = K = 8192), times torch._int_mm (s8 x s8 -> s32, which PyTorch
runs through cuBLASLt) on the same shapes in the same run, and prints TOP/s
of each and conform's ratio.  Target (issue 29): >= 0.5.  Exits 2 when
PyTorch or a GPU is missing (nothing measured), 1 when a ratio misses the
target.  conform's rows include writing y (acc times the scales) besides acc.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import arguments, conform_rows, cuda_torch, ratio_cells, time_ms, write  # noqa: E402


def main():
    args = arguments(__doc__)
    rows = conform_rows(args.conform_json, {"cuda.int8_gemm.fp32"}, "int8_torch.py")
    shapes = []
    for r in rows:
        m = re.match(r"M=(\d+) N=(\d+) K=(\d+)$", r.get("shape", ""))
        if not m:
            sys.exit(f"int8_torch.py: {args.conform_json}: unrecognised INT8 GEMM shape '{r.get('shape')}'")
        shapes.append(tuple(int(g) for g in m.groups()))
    torch = cuda_torch("int8_torch.py")
    if torch is None:
        return 2
    lines = [f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}", "",
             "| shape | conform TOP/s | torch._int_mm (cuBLASLt) TOP/s | ratio | target |", "|---|---|---|---|---|"]
    missed = 0
    for r, (m, n, k) in zip(rows, shapes):
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-127, 128, (k, n), dtype=torch.int8, device="cuda")
        try:
            ms = time_ms(torch, lambda: torch._int_mm(a, b))
        except RuntimeError as e:  # a shape cuBLASLt refuses (torch._int_mm asks M > 16 on some versions)
            lines.append(f"| {r['shape']} | {r['tflop_per_s']:.1f} | refused: {str(e).splitlines()[0][:80]} | | |")
            continue
        cells, miss = ratio_cells(r["tflop_per_s"], 2.0 * m * n * k / ms / 1e9, 0.5)
        missed += miss
        lines.append(f"| {r['shape']} | {cells} |")
    write("\n".join(lines) + "\n", args.out)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
