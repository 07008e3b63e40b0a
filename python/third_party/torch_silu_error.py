"""PyTorch's FP32 SiLU (torch.nn.functional.silu on the CPU: aten's
silu_kernel, x / (1 + exp(-x)) with SLEEF's 1-ulp exp) on every finite FP32
input, against the exact value s = x / (1 + e^-x) in double (relative error
~1e-16), and against the bound conform's glu_arith = separate assumes
(docs/diverge.md, "SwiGLU computed in two ops"):

    |s^ - s| <= rho |s| + eta/2,  rho = 4u (1 + 4u), u = 2^-24, eta = 2^-149,
                                  where e^-x (1 + 2u)(1 + u) < FP32's largest value;
    |s^ - s| <= |s|               where it is not (s^ = -0 there).

Prints the largest error in units of u |s| and in ulps of s (normal
results), the largest ratio to each clause of the bound, and what the
function returns where e^-x may overflow.  One thread; about 6 minutes on
one core for all 2^32 - 2^24 inputs (a range of bit patterns: --bits LO HI).

    python3 python/third_party/torch_silu_error.py [--bits LO HI] [--device cuda]
"""
import argparse
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

U, ETA = 2.0 ** -24, 2.0 ** -149
RHO = 4 * U * (1 + 4 * U)
FMAX = float(np.finfo(np.float32).max)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", nargs=2, type=lambda v: int(v, 0), default=(0, 1 << 32))
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)
    worst = {"rel": (0.0, None), "ulp": (0.0, None), "bound": (0.0, None), "overflow_bound": (0.0, None)}

    def keep(key, ratio, xs):
        if len(ratio):
            i = int(np.argmax(ratio))
            if ratio[i] > worst[key][0]:
                worst[key] = (float(ratio[i]), float(xs[i]))

    n = n_over = nonzero_over = 0
    start = time.time()
    chunk = 1 << 25
    for lo in range(args.bits[0], args.bits[1], chunk):
        x = np.arange(lo, min(lo + chunk, args.bits[1]), dtype=np.uint64).astype(np.uint32).view(np.float32)
        x = x[np.isfinite(x)]
        if not len(x):
            continue
        got = torch.nn.functional.silu(torch.from_numpy(x).to(args.device)).cpu().numpy().astype(np.float64)
        xd = x.astype(np.float64)
        with np.errstate(over="ignore"):
            e = np.exp(-xd)
            s = xd / (1 + e)
        err, mag = np.abs(got - s), np.abs(s)
        over = e * (1 + 2 * U) * (1 + U) >= FMAX
        n_over += int(over.sum())
        nonzero_over += int((got[over] != 0).sum())
        keep("overflow_bound", err[over] / np.maximum(mag[over], 1e-300), xd[over])
        k = ~over
        keep("bound", err[k] / (RHO * mag[k] + ETA / 2), xd[k])
        normal = k & (mag >= 2.0 ** -126)
        ulp = 2.0 ** (np.floor(np.log2(mag[normal])) - 23)
        keep("rel", err[normal] / (U * mag[normal]), xd[normal])
        keep("ulp", err[normal] / ulp, xd[normal])
        n += len(x)
    print("torch %s (%s, %s), %d inputs, %.0f s" % (torch.__version__, args.device,
                                                   torch.backends.cpu.get_cpu_capability(), n, time.time() - start))
    print("normal results: max |s^ - s| = %.3g u|s| (x = %r), %.3g ulps of s (x = %r)"
          % (worst["rel"] + worst["ulp"]))
    print("bound rho|s| + eta/2: max ratio %.7g (x = %r)" % worst["bound"])
    print("e^-x may overflow at %d inputs: s^ != 0 at %d; max |s^ - s| / |s| = %.7g (x = %r)"
          % ((n_over, nonzero_over) + worst["overflow_bound"]))
    return 0 if worst["bound"][0] <= 1 and worst["overflow_bound"][0] <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
