#!/usr/bin/env python3
"""Piecewise polynomials of Phi(-a) = erfc(a/sqrt2)/2 for the 16-lane FP32
gelu_erf kernel (impls/cpu/simd_math.hpp, vff::kPhiTable; proof in
docs/activation.md §4, "FP32 gelu_erf in float-float").

Interval k = 0..31 is centred at c = k/8 (k = round(8a)), u = a - c in
[-1/16, 1/16] ([0, 1/16] for k = 0).  On each, P(u) = sum p_j u^j of degree 6
is fitted to the *relative* error (weighted least squares on Chebyshev
points, mpmath at 60 digits), then rounded: p0 and p1 as float pairs
(hi = RN(p), lo = RN(p - hi)), p2..p6 as floats one at a time, the later
ones refitted after each rounding.  The script prints the C++
table and, per interval, the measured bounds the proof uses:
  approx  max |P^(u) / f(c+u) - 1| with the rounded coefficients, exact arithmetic
  tail    max |P^(u) - p0 - p1 u| / f(c+u)   (what the float Horner part carries)
  lin     max |p1 u| / f(c+u)
  abs     max sum_{j>=2} |p_j u^j| / f(c+u)  (the Horner part without cancellation)
  horner  max sum_{j>=2} (j-1) |p_j u^j| / f(c+u)  (p_j meets j-1 roundings in Horner)
  |p1 u|/p0  (< 1: p0h + u p1h is a Fast2Sum)
and the bounds that follow from them (bounds()).
on 4097 points per interval (ends included).  Shared code: piecewise.py.
Run: python3 python/fits/gelu_erf_table.py > table.txt (the bounds go to stderr)
"""
import mpmath as mp

from piecewise import U, Spec, fit_all, print_table

H = mp.mpf(1) / 16


def f(a):
    return mp.erfc(a / mp.sqrt(2)) / 2


def interval(k):
    return mp.mpf(k) / 8, (mp.mpf(0) if k == 0 else -H), H


SPEC = Spec(f=f, deg=6, interval=interval)


def bounds(q):
    """The relative error bounds of docs/activation.md §4 ("FP32 gelu_erf in
    float-float") for one interval: Phi(-a) as hi + lo, then y = x (hi + lo)
    for x < 0 and x (1 - hi - lo) for x >= 0, each before the final rounding."""
    phi = q["approx"] + U * (q["horner"] + 3 * q["abs"]) + mp.mpf(2) ** -44
    neg = phi + U * (q["abs"] + mp.mpf(2) ** -22)
    c = q["fmax"] / (1 - q["fmax"])  # F / (1 - F) is increasing in F
    pos = phi * c + 2 * U * (mp.mpf(2) ** -24 / (1 - q["fmax"]) + (q["abs"] + mp.mpf(2) ** -22) * c)
    return dict(phi=phi, neg=neg, pos=pos)


def main():
    print_table("kPhiTable", fit_all(SPEC, bounds), SPEC.deg)


if __name__ == "__main__":
    main()
