"""flash-linear-attention's chunkwise Gated DeltaNet and KDA kernels (Triton,
on a GPU) checked through conform case sets (docs/third_party.md,
"flash-linear-attention on a GPU"): fla.ops.gated_delta_rule.chunk_gated_delta_rule
and fla.ops.kda.chunk_kda, in BF16 and FP32, with initial and final states,
the l2norm of q and k in the kernel, and packed sequences (cu_seqlens).

The kernels run on the GPU (fill), conform validate judges their outputs.
Nothing is computed by the harness but the layout: conform's [T, H, d]
tensors become fla's [1, T, H, d], the states are [N, H, d_k, d_v] in FP32 on
both sides, g is the log-decay on both sides.  fla's chunk is 64 tokens, so
the cases' `chunk` (the tokens the bound's chunks cover) is 64; Triton's
dot products need head sizes of at least 16.

scripts/gpu-check runs it where fla (fla-core, brought along by
scripts/gpu-bundle: the GPU machine has no package index) and PyTorch with
CUDA are importable; elsewhere it exits 77.

    python3 python/third_party/fla_check.py --conform build/conform [--json out.json]
"""
import os
import sys

try:
    import numpy as np
    import torch
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.kda import chunk_kda
    import fla
except ImportError as e:
    print("SKIP: %s (the GPU bundle brings fla-core and einops: scripts/gpu-bundle)" % e)
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device (fla's kernels are Triton kernels for the GPU)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Check, run_checks  # noqa: E402
from conform_cases import Unsupported  # noqa: E402

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def tensor(a, dtype):
    """A case input on the GPU in the case's format (bf16 arrives as ml_dtypes or float32 values: exact)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float32)).cuda().to(TORCH[dtype])


def delta(fla_fn, dtype):
    def fn(inputs, params):
        if abs(float(params.get("l2_eps", 1e-6)) - 1e-6) > 0:
            raise Unsupported("fla's in-kernel l2norm has eps 1e-6")
        q, k, v, g, beta = (tensor(inputs[n], dtype)[None] for n in ("q", "k", "v", "g", "beta"))
        s0 = inputs.get("initial_state")
        s0 = None if s0 is None or np.asarray(s0).size == 0 else torch.from_numpy(
            np.asarray(s0, dtype=np.float32)).cuda()
        cu = inputs.get("cu_seqlens")
        cu = None if cu is None or np.asarray(cu).size == 0 else torch.from_numpy(
            np.asarray(cu, dtype=np.float64).astype(np.int64)).cuda()
        if s0 is not None and s0.dim() == 3:
            s0 = s0[None]  # [H, d_k, d_v] -> [1, H, d_k, d_v]
        scale = float(params["scale"])
        try:
            o, state = fla_fn(q, k, v, g, beta, scale=None if scale == 0 else scale, initial_state=s0,
                              output_final_state=True, use_qk_l2norm_in_kernel=bool(params.get("l2norm", 0)),
                              cu_seqlens=cu)
        except (RuntimeError, ValueError, AssertionError) as e:  # a shape or packing fla refuses
            raise Unsupported("fla refused the call: %s" % str(e).splitlines()[0][:200])
        torch.cuda.synchronize()
        state = state.float()
        return {"y": o[0], "state": state if cu is not None else state[0]}
    return fn


# fla's chunk is 64 tokens; Triton's dot products need head sizes of 16 or more;
# one head size (each new one compiles fla's Triton kernels again: minutes on
# the GPU machine) and tokens capped for the GPU script's time (the MPFR
# oracle costs T d_k d_v per head).
DOMAIN = {"chunk": [64], "key_dim": [32], "value_dim": [32], "tokens": {"max": 200}}
CHECKS = []
for dt in ("bf16", "fp32"):
    CHECKS += [
        Check("fla chunk_gated_delta_rule", "gdn", dt, delta(chunk_gated_delta_rule, dt), domain=DOMAIN, cases=12,
              note="chunk 64, head sizes 32, at most 200 tokens"),
        Check("fla chunk_kda", "kda", dt, delta(chunk_kda, dt), domain=DOMAIN, cases=12,
              note="chunk 64, head sizes 32, at most 200 tokens"),
    ]

EXPECTED = {}  # never run on a GPU: nothing recorded (docs/third_party.md)

if __name__ == "__main__":
    sys.exit(run_checks(CHECKS, EXPECTED, "fla " + getattr(fla, "__version__", "?") + ", torch " + torch.__version__))
