"""Synthetic data with a known discriminative window, for the interpretability check (spec section 6.4)."""

from __future__ import annotations

import numpy as np

from icml25_shared.seed import numpy_rng

__all__ = ["bump_dataset"]


def bump_dataset(
    n_cases: int = 200,
    n_timepoints: int = 128,
    window: tuple[int, int] = (56, 72),
    amplitude: float = 3.0,
    noise: float = 0.3,
    random_state: int | None = 0,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Random walks (step std ``noise``) of two balanced classes; class 1 carries a Gaussian bump of height
    ``amplitude`` centred in ``window`` = [start, end). Returns ``(X (n, 1, T) float32, y (n,) int, window)``."""
    start, end = window
    if not 0 <= start < end <= n_timepoints:
        raise ValueError(f"window must satisfy 0 <= start < end <= n_timepoints={n_timepoints}, got {window}")
    rng = numpy_rng(random_state)
    y = np.arange(n_cases) % 2
    rng.shuffle(y)
    walks = np.cumsum(rng.normal(0.0, noise, size=(n_cases, n_timepoints)), axis=1)
    walks -= walks.mean(axis=1, keepdims=True)
    t = np.arange(n_timepoints)
    centre, width = 0.5 * (start + end - 1), (end - start) / 4.0
    bump = amplitude * np.exp(-0.5 * ((t - centre) / width) ** 2)
    X = walks + y[:, None] * bump[None]
    return X[:, None, :].astype(np.float32), y.astype(np.int64), (start, end)
