"""Shared pieces of the table fits (gelu_erf_table.py, situ_glu_table.py):
piecewise polynomials on 32 intervals, fitted to the relative error and
rounded for the 16-lane FP32 kernels' float-float evaluation
(impls/cpu/simd_math.hpp; proofs in docs/activation.md §4 and
docs/gated.md §4).

A spec gives f (the function, mpmath), deg, and interval(k) -> (c, lo, hi):
interval k is c + [lo, hi] in u.  p0 and p1 become float pairs (hi = RN(p),
lo = RN(p - hi)), p2..p_deg floats, rounded one at a time with the later
ones refitted after each rounding (weighted least squares on Chebyshev
points, mpmath at 60 digits).
"""
import re
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import mpmath as mp

mp.mp.dps = 60
N_INT = 32
U = mp.mpf(2) ** -24  # float's unit roundoff


@dataclass
class Spec:
    f: Callable
    deg: int
    interval: Callable


def f32(v):
    return float(np.float32(float(v)))


def fit_rest(spec, k, fixed, weight=None):
    """Least-squares fit of p_j, j >= len(fixed), with p_0.. given, to the
    error relative to weight(x) (default f)."""
    c, lo, hi = spec.interval(k)
    weight = weight or spec.f
    m, j0 = 64, len(fixed)
    us = [lo + (hi - lo) * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / m)) / 2 for i in range(m)]
    A = mp.matrix(m, spec.deg + 1 - j0)
    b = mp.matrix(m, 1)
    for i, u in enumerate(us):
        w = 1 / weight(c + u)
        for j in range(j0, spec.deg + 1):
            A[i, j - j0] = u ** j * w
        b[i] = (spec.f(c + u) - sum(fixed[j] * u ** j for j in range(j0))) * w
    p = mp.lu_solve(A.T * A, A.T * b)  # normal equations at 60 digits
    return [p[j] for j in range(spec.deg + 1 - j0)]


def fitted(spec, k, pairs=2, weight=None):
    """The first `pairs` coefficients of the fit as float pairs, then the
    rest as floats, each refitted after the earlier ones were rounded."""
    p = fit_rest(spec, k, [], weight)
    fixed, out = [], []
    for v in p[:pairs]:
        h = f32(v)
        l = f32(v - h)
        fixed.append(mp.mpf(h) + l)
        out += [h, l]
    while len(fixed) <= spec.deg:
        v = f32(fit_rest(spec, k, fixed, weight)[0])
        fixed.append(mp.mpf(v))
        out.append(v)
    return out


def coefficients(r, pairs=2):
    """The exact values of a fitted row (pairs summed)."""
    return [mp.mpf(r[2 * j]) + r[2 * j + 1] for j in range(pairs)] + [mp.mpf(v) for v in r[2 * pairs:]]


def measure(spec, k, r, n=4096):
    """On n + 1 points of interval k, relative to f: approx (the rounded
    polynomial in exact arithmetic), tail (P - p0 - p1 u), lin (p1 u), abs
    (sum_{j>=2} |p_j u^j|), horner (sum_{j>=2} (j-1) |p_j u^j|: p_j meets
    j - 1 roundings in Horner's scheme), ratio (|p1 u| / p0: < 1 makes
    p0h + u p1h a Fast2Sum) and fmax / fmin (f itself)."""
    c, lo, hi = spec.interval(k)
    p = coefficients(r)
    q = dict(approx=0, tail=0, lin=0, abs=0, horner=0, ratio=0, fmax=0, fmin=mp.inf)
    for i in range(n + 1):
        u = lo + (hi - lo) * i / n
        fu = spec.f(c + u)
        val = sum(p[j] * u ** j for j in range(spec.deg + 1))
        q["approx"] = max(q["approx"], abs(val / fu - 1))
        q["tail"] = max(q["tail"], abs(val - p[0] - p[1] * u) / fu)
        q["lin"] = max(q["lin"], abs(p[1] * u) / fu)
        q["abs"] = max(q["abs"], sum(abs(p[j] * u ** j) for j in range(2, spec.deg + 1)) / fu)
        q["horner"] = max(q["horner"], sum((j - 1) * abs(p[j] * u ** j) for j in range(2, spec.deg + 1)) / fu)
        q["ratio"] = max(q["ratio"], abs(p[1] * u / p[0]))
        q["fmax"] = max(q["fmax"], fu)
        q["fmin"] = min(q["fmin"], fu)
    return q


def lg(v):
    return float(mp.log(v, 2))


def hexf(v):
    h = float(v).hex()
    m = re.match(r"(-?0x1\.)([0-9a-f]*?)0*(p[-+]\d+)", h)
    return (m.group(1) + (m.group(2) or "0") + m.group(3) if m else h) + "f"


def print_table(name, rows, deg):
    names = ["p0h", "p0l", "p1h", "p1l"] + [f"p{j}" for j in range(2, deg + 1)]
    print("inline constexpr float %s[%d][%d] = {  // [row][k]" % (name, len(names), N_INT))
    for j, row in enumerate(names):
        print(f"    // {row}")
        for k0 in range(0, N_INT, 8):
            vals = ", ".join(hexf(rows[k][j]) for k in range(k0, k0 + 8))
            print(("    {" if k0 == 0 else "     ") + vals + ("}," if k0 + 8 == N_INT else ","))
    print("};")


def describe(q):
    """One stderr line's worth of a measure() dict: powers of 2 for the
    errors ('approx' and the bounds), plain numbers for the ratios."""
    ratios = ("tail", "lin", "abs", "horner", "ratio")
    parts = [f"approx 2^{lg(q['approx']):.2f}"] + [f"{k} {float(q[k]):.4f}" for k in ratios if k in q]
    parts += [f"{k} 2^{lg(v):.2f}" for k, v in q.items() if k not in ratios + ("approx", "fmax", "fmin")]
    return ", ".join(parts)


def fit_all(spec, bounds):
    """Fit, round and measure every interval; bounds(q) -> dict of error
    bounds (added to q).  Prints one line per interval and the worst of
    each figure to stderr; returns the rows for print_table."""
    rows, worst = [], {}
    for k in range(N_INT):
        r = fitted(spec, k)
        q = measure(spec, k, r)
        q.update(bounds(q))
        for key, v in q.items():
            if key not in ("fmin", "fmax"):
                worst[key] = max(worst.get(key, 0), v)
        rows.append(r)
        print(f"// k={k:2d} " + describe(q), file=sys.stderr)
    print("// worst: " + describe(worst), file=sys.stderr)
    return rows
