"""cuda.gdn.bf16 and cuda.kda.bf16 beside flash-linear-attention's chunk_gated_delta_rule
and chunk_kda (docs/gdn.md, "CUDA kernels").

    python3 bench/gdn_fla.py --conform-json BENCH.json [--out TABLE.md]

Reads the delta-rule rows of `conform cuda-bench` (one sequence of T = 4k and
32k tokens, H = 16, d_k = d_v = 128, bf16, l2norm in the kernel, no initial
state), times fla's kernels on the same shapes in the same run (the final
state returned, as conform's), and prints tokens/s of each and conform's
ratio.  Target (issue 29): >= 0.5.  Exits 2 when PyTorch, a GPU or fla is
missing (nothing measured), 1 when a ratio misses the target.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import arguments, conform_rows, cuda_torch, ratio_cells, time_ms  # noqa: E402


def main():
    args = arguments(__doc__)
    rows = conform_rows(args.conform_json, {"cuda.gdn.bf16", "cuda.kda.bf16"}, "gdn_fla.py")
    torch = cuda_torch("gdn_fla.py")
    if torch is None:
        return 2
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.kda import chunk_kda
    except ImportError as e:
        print(f"gdn_fla.py: flash-linear-attention is not importable ({e}): nothing measured")
        return 2
    lines = [f"GPU: {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}", "",
             "| kernel | shape | conform tokens/s | fla tokens/s | ratio | target |", "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)  # each row as it is measured: fla's first calls compile for minutes
    missed = 0
    for r in rows:
        m = re.match(r"T=(\d+) H=(\d+) d=(\d+)$", r.get("shape", ""))
        if not m:
            sys.exit(f"gdn_fla.py: {args.conform_json}: unrecognised shape '{r.get('shape')}'")
        t, h, d = (int(g) for g in m.groups())
        kda = r["kernel"] == "cuda.kda.bf16"
        q, k, v = (torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        g = -torch.rand(1, t, h, *([d] if kda else []), device="cuda", dtype=torch.bfloat16) / 10
        beta = torch.rand(1, t, h, device="cuda", dtype=torch.bfloat16)
        fn = chunk_kda if kda else chunk_gated_delta_rule
        ms = time_ms(torch, lambda: fn(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True))
        cells, miss = ratio_cells(r["tokens_per_s"], t / ms * 1e3, 0.5)
        missed += miss
        lines.append(f"| {r['kernel']} | {r['shape']} | {cells} |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
