#!/usr/bin/env python3
"""Fits softcap's tanh (runtime/kernels/simd/tanh.hpp): tanh(x) ~ x*P(x^2)/Q(x^2) on [0, X],
P with NP coefficients, Q with NQ (Q(0) = 1), minimising the largest relative error by Lawson's
iteration (weighted least squares on the linearised error, weights grown where the error is).

    python3 tools/fit_tanh.py 8.2 5 5      # the coefficients tanh.hpp uses

Prints the largest relative error in double precision (stderr), then P's and Q's coefficients
from the constant term up (Q's constant 1 omitted). The f32 error, with FMA and the clamp, is what
the microkernel tester checks (tests/kernels/ukernel_tester.hpp, capped_tanh_cases).
"""
import sys

import numpy as np


def fit(limit, n_p, n_q, iterations=2000):
    xs = np.concatenate([np.linspace(1e-4, limit, 40000), np.geomspace(1e-6, 1e-1, 2000)])
    t = np.tanh(xs)
    u = xs * xs
    a = np.hstack([np.stack([xs * u**i for i in range(n_p)], 1), -np.stack([t * u**i for i in range(1, n_q)], 1)])
    w = np.ones_like(xs)
    best = None
    for _ in range(iterations):
        sw = np.sqrt(w) / t
        sol, *_ = np.linalg.lstsq(a * sw[:, None], t * sw, rcond=None)
        p = sum(sol[i] * u**i for i in range(n_p))
        q = 1 + sum(sol[n_p + i - 1] * u**i for i in range(1, n_q))
        err = np.abs(xs * p / q - t) / t
        if best is None or err.max() < best[0]:
            best = (err.max(), sol.copy())
        w = w * err
        w /= w.sum()
    return best


if __name__ == "__main__":
    limit, n_p, n_q = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    err, sol = fit(limit, n_p, n_q)
    print("max relative error %.3e" % err, file=sys.stderr)
    print("P:", " ".join("%.9e" % c for c in sol[:n_p]))
    print("Q:", " ".join("%.9e" % c for c in sol[n_p:]))
