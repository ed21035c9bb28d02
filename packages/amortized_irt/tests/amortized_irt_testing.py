"""Test helpers: small seeded Rasch / 2PL / 3PL data sets."""

from __future__ import annotations

import numpy as np


def rasch_data(n: int = 300, m: int = 20, seed: int = 0, density: float = 1.0, a=None, c=None):
    """(Y dense with NaN for missing, theta, b, a) drawn from σ(a(θ − b)) (+ c)."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n)
    b = rng.normal(0.0, 1.0, m)
    a = np.ones(m) if a is None else np.asarray(a, dtype=float)
    p = 1.0 / (1.0 + np.exp(-a * (theta[:, None] - b)))
    if c is not None:
        p = c + (1 - c) * p
    Y = (rng.random((n, m)) < p).astype(float)
    if density < 1.0:
        Y[rng.random((n, m)) > density] = np.nan
        Y[np.isnan(Y).all(1), 0] = 1.0
    return Y, theta, b, a
