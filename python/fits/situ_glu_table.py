#!/usr/bin/env python3
"""Tables for the 16-lane FP32 situ_glu kernel at its default caps
beta1 = 4, beta2 = 25 (impls/cpu/gated.cpp, SituGluFn; proof in
docs/gated.md §4, "FP32 situ_glu in float-float").

h = g u H(g) (1 + m(u^2)), with
  H(g) = beta1 tanh(g/beta1) sigmoid(g) / g   (H(0) = 1/2; H > 0)
  m(s) = beta2 tanh(sqrt(s)/beta2) / sqrt(s) - 1   (the up cap: u (1 + m))
H: interval j = round(4g) (-16..15, stored at j mod 32), centred at j/4,
u = g - j/4 in [-1/8, 1/8]; a degree-6 polynomial fitted to the relative
error, p0 and p1 as float pairs (piecewise.py).  Lanes: -4.125 <= g < 3.875.
m: s Q(s) for s = u^2 in [0, 8.75^2] (|u/beta2| < 0.35), Q of degree 4,
float coefficients rounded one at a time (the later ones refitted), fitted
to the error relative to 1 + m.
Run: python3 python/fits/situ_glu_table.py > tables.txt (the bounds go to stderr)
"""
import sys

import mpmath as mp

from piecewise import U, Spec, f32, fit_all, hexf, lg, print_table

B1, B2 = 4, 25
S_MAX = mp.mpf("8.75") ** 2
Q_DEG = 4


def gate(g):
    if g == 0:
        return mp.mpf(1) / 2
    return B1 * mp.tanh(g / B1) / (1 + mp.exp(-g)) / g


def interval(k):  # k = storage index 0..31
    j = k if k < 16 else k - 32
    return mp.mpf(j) / 4, -mp.mpf(1) / 8, mp.mpf(1) / 8


SPEC = Spec(f=gate, deg=6, interval=interval)


def m_exact(s):
    if s == 0:
        return mp.mpf(0)
    w = mp.sqrt(s) / B2
    return mp.tanh(w) / w - 1


def fit_q():
    """Q with s Q(s) ~ m(s), to the error relative to 1 + m; coefficients
    rounded to float one at a time, the later ones refitted."""
    n = 64
    ss = [S_MAX * (1 - mp.cos(mp.pi * (i + mp.mpf(1) / 2) / n)) / 2 for i in range(n)]
    fixed = []
    while len(fixed) <= Q_DEG:
        j0 = len(fixed)
        A = mp.matrix(n, Q_DEG + 1 - j0)
        b = mp.matrix(n, 1)
        for i, s in enumerate(ss):
            w = 1 / (1 + m_exact(s))
            for j in range(j0, Q_DEG + 1):
                A[i, j - j0] = s ** (j + 1) * w
            b[i] = (m_exact(s) - sum(fixed[j] * s ** (j + 1) for j in range(j0))) * w
        fixed.append(mp.mpf(f32(mp.lu_solve(A.T * A, A.T * b)[0])))
    return fixed


def measure_q(q, n=20000):
    """approx: max |s Q(s) - m(s)| / (1 + m); mmax: max |m|; horner: max
    sum_j (j + 1) |q_j s^(j+1)| / (1 + m) (q_j meets j + 1 roundings: Horner
    and the product by s); onem: min 1 + m."""
    r = dict(approx=0, mmax=0, horner=0, onem=mp.inf)
    for i in range(n + 1):
        s = S_MAX * i / n
        me = m_exact(s)
        r["approx"] = max(r["approx"], abs(sum(q[j] * s ** (j + 1) for j in range(Q_DEG + 1)) - me) / (1 + me))
        r["mmax"] = max(r["mmax"], abs(me))
        r["horner"] = max(r["horner"], sum((j + 1) * abs(q[j] * s ** (j + 1)) for j in range(Q_DEG + 1)) / (1 + me))
        r["onem"] = min(r["onem"], 1 + me)
    return r


def bounds(qh, qm):
    """docs/gated.md §4: the relative error of g u H (1 + m) before the one
    final rounding, for one interval of H."""
    e_h = qh["approx"] + U * (qh["horner"] + 3 * qh["abs"]) + mp.mpf(2) ** -44  # H as hi + lo
    # m: Horner's roundings (horner), the final FMA's (mmax), and the part of
    # sl's share the code drops, sl (Q + s Q' - q0) < 2^-24 0.02 |m|.
    e_m = qm["approx"] + U * qm["horner"] + U * qm["mmax"] * (1 + mp.mpf("0.02")) / qm["onem"]
    lo = (qh["abs"] + mp.mpf(2) ** -22) / qm["onem"]  # |lo (1 + m)| / F: the inner FMA of fl
    fl = (qh["abs"] + mp.mpf(2) ** -22 + qm["mmax"] * (1 + U)) / qm["onem"]  # |fl| / F
    return e_h + e_m + U * lo + 2 * U * fl + mp.mpf(2) ** -44


def main():
    q = fit_q()
    qm = measure_q(q)
    print(f"// up: approx 2^{lg(qm['approx']):.2f}, |m| <= {float(qm['mmax']):.4f}, "
          f"horner {float(qm['horner']):.4f}, 1 + m >= {float(qm['onem']):.4f}", file=sys.stderr)
    rows = fit_all(SPEC, lambda qh: dict(bound=bounds(qh, qm)))
    print_table("kSituGateTable", rows, SPEC.deg)
    print("inline constexpr float kSituUpQ[%d] = {%s};" % (Q_DEG + 1, ", ".join(hexf(v) for v in q)))


if __name__ == "__main__":
    main()
