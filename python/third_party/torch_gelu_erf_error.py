"""PyTorch's erf GELU (torch.nn.functional.gelu, approximate='none', on the
CPU: (0.5 x)(1 + erf(x / sqrt 2)) in FP32 with aten's vectorized erf) on every
finite FP32 input and every BF16 one, against the bound conform's
glu_arith = separate assumes for it (docs/diverge.md, "GeGLU with the erf
GELU"; model/step_bound.cpp, erf_gelu_error):

    |s^ - s| <= 1/2 |x| dw (1 + u) + u |s| + 2 eta,
    dw = d (1 + u) + u (1 + erf z),   z = |x| / sqrt 2,
    d  = 2/sqrt(pi) e^(-m^2) dz + 2^-20,  dz = z 2u (1 + u) + eta/2,  m = max(0, z - dz),

u = 2^-24, eta = 2^-149: an erf within 2^-20 of erf (the declared class),
its argument x alpha^ rounded, 1 + erf^ and the product rounded once each.
A BF16 input's result is that FP32 value stored in BF16: + 1/2 ulp_bf16.
The exact s = x/2 erfc(-x / sqrt 2) in double.

Prints, per format, the largest ratio to the bound and where, the largest
error of the (1 + erf) factor, |s^ - s| / (|x| / 2), in units of 2^-24, and
the inputs whose finite result came back +inf (PyTorch forms x (1 + erf)
before halving it: it overflows from |x| = 2^127 on) or whose subnormal
result came back 0 (its BF16 path flushes them): those are counted, not
judged.  Exit status 1 when any other ratio exceeds 1.  About 10 minutes on two
cores for all 2^32 - 2^24 FP32 inputs (a range of bit patterns: --bits LO HI).

    python3 python/third_party/torch_gelu_erf_error.py [--bits LO HI] [--device cuda]
"""
import argparse
import math
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

U, ETA, ERF_ABS = 2.0 ** -24, 2.0 ** -149, 2.0 ** -20


def bound(x, s):
    """erf_gelu_error of model/step_bound.cpp, in float64 tensors."""
    ax = x.abs()
    z = ax * math.sqrt(0.5)
    dz = z * 2 * U * (1 + U) + ETA / 2
    m = (z - dz).clamp(min=0)
    d = 2 / math.sqrt(math.pi) * torch.exp(-m * m) * dz + ERF_ABS
    dw = d * (1 + U) + U * torch.special.erfc(-x * math.sqrt(0.5))
    return 0.5 * ax * dw * (1 + U) + U * s.abs() + 2 * ETA


def ulp_bf16(v):
    """The BF16 ulp at |v| (the subnormal step below 2^-126): frexp's
    exponent, exact where log2 may round up just below a power of two."""
    _, e = torch.frexp(v.abs().clamp(min=2.0 ** -126))
    return torch.pow(2.0, (e - 1 - 7).double())


def judge(x32, got, store_bf16, worst):
    x = x32.double()
    s = 0.5 * x * torch.special.erfc(-x * math.sqrt(0.5))
    e = bound(x, s)
    if store_bf16:
        e = e + 0.5 * ulp_bf16(s.abs() + e)
    over = torch.isinf(got) & torch.isfinite(s)  # x (1 + erf) past FP32's largest value before the halving
    worst["overflow"] += int(over.sum())
    if over.any():
        worst["overflow_from"] = min(worst["overflow_from"], float(x[over].abs().min()))
    flushed = (got == 0) & (s != 0) & (s.abs() < 2.0 ** -126) & (e < s.abs())  # a subnormal result returned as 0
    worst["flushed"] += int(flushed.sum())
    err = torch.where(over | flushed, torch.zeros_like(s), (got.double() - s).abs())
    ratio = err / e
    i = int(torch.argmax(ratio))
    if ratio[i] > worst["bound"][0]:
        worst["bound"] = (float(ratio[i]), float(x[i]))
    big = x.abs() >= 2.0 ** -20  # the factor's error, where x/2 is not tiny
    if big.any():
        fac = torch.where(big, err / (x.abs() / 2), torch.zeros_like(err))
        j = int(torch.argmax(fac))
        if fac[j] / U > worst["factor"][0]:
            worst["factor"] = (float(fac[j] / U), float(x[j]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", nargs=2, type=lambda v: int(v, 0), default=(0, 1 << 32))
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    start, failed = time.time(), False
    print("torch %s (%s, %s)" % (torch.__version__, args.device, torch.backends.cpu.get_cpu_capability()))
    for name in ("bf16", "fp32"):
        worst, n = {"bound": (0.0, None), "factor": (0.0, None), "overflow": 0, "overflow_from": math.inf, "flushed": 0}, 0
        if name == "bf16":
            chunks = [np.arange(0, 1 << 16, dtype=np.uint32) << 16]
        else:
            chunks = (np.arange(lo, min(lo + (1 << 24), args.bits[1]), dtype=np.uint64).astype(np.uint32)
                      for lo in range(args.bits[0], args.bits[1], 1 << 24))
        for bits in chunks:
            x = bits.view(np.float32)
            x = torch.from_numpy(x[np.isfinite(x)].copy())
            if not len(x):
                continue
            xin = x.to(torch.bfloat16) if name == "bf16" else x
            got = torch.nn.functional.gelu(xin.to(args.device)).cpu().float()
            judge(xin.float(), got, name == "bf16", worst)
            n += len(x)
        print("%s: %d inputs; max ratio to the bound %.4g (x = %r)" % ((name, n) + worst["bound"]))
        if name == "fp32":  # in bf16 the store's half ulp hides the factor's error
            print("  max |s^ - s| / (|x|/2) = %.3g * 2^-24 (x = %r)" % worst["factor"])
        if worst["overflow"]:
            print("  +inf for a finite result at %d inputs, from |x| = %r on (outside the bound: a defect)"
                  % (worst["overflow"], worst["overflow_from"]))
        if worst["flushed"]:
            print("  a subnormal result returned as 0 at %d inputs (flushed: outside the bound, a defect)" % worst["flushed"])
        failed = failed or worst["bound"][0] > 1
    print("%.0f s" % (time.time() - start))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
