#!/usr/bin/env python3
"""Piecewise polynomials of S(-a) = sigmoid(-a) = 1/(1 + e^a) for the
16-lane FP32 sigmoid and silu kernels: sigmoid(x) = S(-a) for x < 0 and
1 - S(-a) for x >= 0 (a = |x|), silu(x) = x sigmoid(x) -- gelu_erf's
structure (impls/cpu/simd_math.hpp, vff::kSigmoidTable; proof in
docs/activation.md §4, "FP32 sigmoid and silu in 16 lanes").  Intervals as
softplus_table.py (k = round(4a), |u| <= 1/8, a < 7.875), degree 6; the
printed bounds are gelu_erf_table.py's (phi: S as hi + lo; neg: x (hi + lo)
for x < 0; pos: 1 - S, with x (.) for silu).
Run: python3 python/fits/sigmoid_table.py > table.txt (the bounds go to stderr)
"""
import mpmath as mp

from gelu_erf_table import bounds
from piecewise import Spec, fit_all, print_table
from softplus_table import interval


def f(a):
    return 1 / (1 + mp.exp(a))


SPEC = Spec(f=f, deg=6, interval=interval)

if __name__ == "__main__":
    print_table("kSigmoidTable", fit_all(SPEC, bounds), SPEC.deg)
