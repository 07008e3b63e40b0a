#!/usr/bin/env python3
"""Piecewise polynomials of T(-a) = sigmoid(-2z(a)), 2z(a) = 2 sqrt(2/pi)
(a + 0.044715 a^3), for the 16-lane FP32 gelu_tanh kernel: gelu_tanh(x) =
x T(x), T(x) = T(-a) for x < 0 and 1 - T(-a) for x >= 0 (a = |x|), exactly
the structure of gelu_erf with Phi replaced by T (impls/cpu/simd_math.hpp,
vff::kGeluTanhTable; proof in docs/activation.md §4, "FP32 gelu_tanh and
softplus in 16 lanes").  Intervals, fit, rounding and the printed bounds are
gelu_erf_table.py's (k = round(8a), |u| <= 1/16, degree 6, a < 3.9).
Run: python3 python/fits/gelu_tanh_table.py > table.txt (the bounds go to stderr)
"""
import mpmath as mp

from gelu_erf_table import bounds, interval
from piecewise import Spec, fit_all, print_table

C = 2 * mp.sqrt(2 / mp.pi)


def f(a):
    return 1 / (1 + mp.exp(C * (a + mp.mpf("0.044715") * a ** 3)))


SPEC = Spec(f=f, deg=6, interval=interval)

if __name__ == "__main__":
    print_table("kGeluTanhTable", fit_all(SPEC, bounds), SPEC.deg)
