#!/usr/bin/env python3
"""Piecewise polynomials of L(a) = log1p(e^-a) for the 16-lane FP32
softplus kernel: softplus(x) = max(x, 0) + L(|x|) (impls/cpu/simd_math.hpp,
vff::kSoftplusTable; proof in docs/activation.md §4, "FP32 gelu_tanh and
softplus in 16 lanes").  Interval k = round(4a) (0..31, a < 7.875), centred at k/4,
|u| <= 1/8 ([0, 1/8] for k = 0); degree 6, p0 and p1 as float pairs
(piecewise.py).  Bound printed per interval: L as hi + lo (relative), the
same formula as gelu_erf_table.py's Phi.
Run: python3 python/fits/softplus_table.py > table.txt (the bounds go to stderr)
"""
import mpmath as mp

from piecewise import U, Spec, fit_all, print_table

H = mp.mpf(1) / 8


def f(a):
    return mp.log1p(mp.exp(-a))


def interval(k):
    return mp.mpf(k) / 4, (mp.mpf(0) if k == 0 else -H), H


SPEC = Spec(f=f, deg=6, interval=interval)


def bounds(q):
    return dict(l=q["approx"] + U * (q["horner"] + 3 * q["abs"]) + mp.mpf(2) ** -44)


if __name__ == "__main__":
    print_table("kSoftplusTable", fit_all(SPEC, bounds), SPEC.deg)
