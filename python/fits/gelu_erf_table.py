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
on 4097 points per interval (ends included).
Run: python3 python/fits/gelu_erf_table.py > table.txt (the bounds go to stderr)
"""
import re
import sys
import numpy as np
import mpmath as mp

mp.mp.dps = 60
DEG = 6
N_INT = 32
H = mp.mpf(1) / 16


def f(a):
    return mp.erfc(a / mp.sqrt(2)) / 2


def f32(v):
    return float(np.float32(float(v)))


def interval(k):
    c = mp.mpf(k) / 8
    return c, (mp.mpf(0) if k == 0 else -H), H


def fit_rest(k, fixed):
    """Least-squares fit of p_j, j >= len(fixed), with p_0.. given."""
    c, lo, hi = interval(k)
    m, j0 = 64, len(fixed)
    us = [lo + (hi - lo) * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / m)) / 2 for i in range(m)]
    A = mp.matrix(m, DEG + 1 - j0)
    b = mp.matrix(m, 1)
    for i, u in enumerate(us):
        w = 1 / f(c + u)
        for j in range(j0, DEG + 1):
            A[i, j - j0] = u ** j * w
        b[i] = 1 - sum(fixed[j] * u ** j for j in range(j0)) * w
    p = mp.lu_solve(A.T * A, A.T * b)  # normal equations at 60 digits
    return [p[j] for j in range(DEG + 1 - j0)]


def fitted(k):
    """p0 and p1 as float pairs; then p2..p7 rounded to float one at a time,
    the later ones refitted after each rounding."""
    p = fit_rest(k, [])
    h0 = f32(p[0]); l0 = f32(p[0] - h0)
    h1 = f32(p[1]); l1 = f32(p[1] - h1)
    fixed = [mp.mpf(h0) + l0, mp.mpf(h1) + l1]
    out = [h0, l0, h1, l1]
    while len(fixed) <= DEG:
        v = f32(fit_rest(k, fixed)[0])
        fixed.append(mp.mpf(v))
        out.append(v)
    return out


def hexf(v):
    h = float(v).hex()
    m = re.match(r"(-?0x1\.)([0-9a-f]*?)0*(p[-+]\d+)", h)
    return (m.group(1) + (m.group(2) or "0") + m.group(3) if m else h) + "f"


def measure(k, r):
    c, lo, hi = interval(k)
    p = [mp.mpf(r[0]) + r[1], mp.mpf(r[2]) + r[3]] + [mp.mpf(v) for v in r[4:]]
    approx = tail = lin = tabs = horner = ratio = fmax = mp.mpf(0)
    n = 4096
    for i in range(n + 1):
        u = lo + (hi - lo) * i / n
        fu = f(c + u)
        val = sum(p[j] * u ** j for j in range(DEG + 1))
        approx = max(approx, abs(val / fu - 1))
        tail = max(tail, abs(val - p[0] - p[1] * u) / fu)
        lin = max(lin, abs(p[1] * u) / fu)
        tabs = max(tabs, sum(abs(p[j] * u ** j) for j in range(2, DEG + 1)) / fu)
        horner = max(horner, sum((j - 1) * abs(p[j] * u ** j) for j in range(2, DEG + 1)) / fu)
        ratio = max(ratio, abs(p[1] * u) / p[0])
        fmax = max(fmax, fu)
    return approx, tail, lin, tabs, horner, ratio, fmax


U = mp.mpf(2) ** -24


def bounds(approx, tabs, horner, fmax):
    """The relative error bounds of docs/activation.md §4 ("FP32 gelu_erf in
    float-float") for one interval: Phi(-a) as hi + lo, then y = x (hi + lo)
    for x < 0 and x (1 - hi - lo) for x >= 0, each before the final rounding."""
    phi = approx + U * (horner + 3 * tabs) + mp.mpf(2) ** -44
    neg = phi + U * (tabs + mp.mpf(2) ** -22)
    c = fmax / (1 - fmax)  # F / (1 - F) is increasing in F
    pos = phi * c + 2 * U * (mp.mpf(2) ** -24 / (1 - fmax) + (tabs + mp.mpf(2) ** -22) * c)
    return phi, neg, pos


def main():
    rows, worst = [], [0] * 10
    lg = lambda v: float(mp.log(v, 2))
    for k in range(N_INT):
        r = fitted(k)
        a, t, l, ta, h, ratio, fmax = measure(k, r)
        phi, neg, pos = bounds(a, ta, h, fmax)
        worst = [max(w, v) for w, v in zip(worst, (a, t, l, ta, h, ratio, phi, neg, pos))] + [0]
        rows.append(r)
        print(f"// k={k:2d} approx 2^{lg(a):.2f} tail {float(t):.4f} lin {float(l):.4f} abs {float(ta):.4f} "
              f"horner {float(h):.4f} |p1 u|/p0 {float(ratio):.4f}; bounds: Phi 2^{lg(phi):.2f}, "
              f"x<0 2^{lg(neg):.2f}, x>=0 2^{lg(pos):.2f}", file=sys.stderr)
    print(f"// worst: approx 2^{lg(worst[0]):.2f}, tail {float(worst[1]):.4f}, lin {float(worst[2]):.4f}, "
          f"abs {float(worst[3]):.4f}, horner {float(worst[4]):.4f}, |p1 u|/p0 {float(worst[5]):.4f}; "
          f"bounds: Phi 2^{lg(worst[6]):.2f}, x<0 2^{lg(worst[7]):.2f}, x>=0 2^{lg(worst[8]):.2f}",
          file=sys.stderr)
    names = ["p0h", "p0l", "p1h", "p1l"] + [f"p{j}" for j in range(2, DEG + 1)]
    print("inline constexpr float kPhiTable[%d][%d] = {  // [row][k]" % (len(names), N_INT))
    for j, name in enumerate(names):
        print(f"    // {name}")
        for k0 in range(0, N_INT, 8):
            vals = ", ".join(hexf(rows[k][j]) for k in range(k0, k0 + 8))
            print(("    {" if k0 == 0 else "     ") + vals + ("}," if k0 + 8 == N_INT else ","))
    print("};")


if __name__ == "__main__":
    main()
