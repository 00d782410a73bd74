#!/usr/bin/env python3
"""The polynomial behind the CPU GELU (common/ops/activation.c).

For z >= 0, erfc(z) = t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2): P is
smooth on t in (0, 1] (it tends to -log(2 sqrt(pi)) as z grows), so a
polynomial of degree 9 fitted at Chebyshev nodes of t for z in [0, 10] holds
erfc to about 5e-8 relative. This prints P's coefficients (t^0 first, as the
C code writes them) and the relative error of erfc, first in exact
arithmetic, then evaluated in fp32 as the C code does (with an exactly
rounded exponential). numpy and the standard library only.

    python3 scripts/fit_erfc.py
"""
import math

import numpy as np

DEGREE = 9
Z_MAX = 10.0  # erfc(10) = 2e-45: below it fp32 has nothing left
NODES = 4000


def fit():
    t_min = 1 / (1 + Z_MAX / 2)
    x = np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)  # Chebyshev nodes of [-1, 1]
    t = t_min + (1 - t_min) * (x + 1) / 2
    z = 2 / t - 2
    target = np.array([math.log(math.erfc(zz) / tt) + zz * zz for zz, tt in zip(z, t)])
    series = np.polynomial.chebyshev.Chebyshev.fit(t, target, DEGREE, domain=[t_min, 1])
    return series.convert(kind=np.polynomial.Polynomial, domain=[-1, 1], window=[-1, 1]).coef


def erfc_fp32(z, coef):
    """erfc(z) as activation.c computes it, every step rounded to fp32."""
    f = np.float32
    z = z.astype(f)
    t = (f(1) / (f(1) + f(0.5) * z)).astype(f)
    p = f(coef[-1])
    for c in coef[-2::-1]:
        p = (p * t + f(c)).astype(f)
    return (t * np.exp((p - z * z).astype(np.float64)).astype(f)).astype(f)


def main():
    coef = fit()
    print("P, t^0 first:")
    for c in coef:
        print(f"  {c:.9e}")
    z = np.linspace(0, 9.5, 200001)
    exact = np.array([math.erfc(v) for v in z])
    t = 1 / (1 + z / 2)
    exact_arith = t * np.exp(-z * z + np.polynomial.polynomial.polyval(t, coef))
    print(f"relative error, exact arithmetic: {np.max(np.abs(exact_arith - exact) / exact):.2e}")
    z32 = z.astype(np.float32)
    exact32 = np.array([math.erfc(float(v)) for v in z32])
    rel = np.abs(erfc_fp32(z32, coef) - exact32) / exact32
    for limit in (1, 2, 3, 4, 6, 9.5):
        print(f"relative error in fp32, z <= {limit}: {rel[z32 <= limit].max():.2e}")


if __name__ == "__main__":
    main()
