"""The pure core of LSMI: pointwise redundancy from the I+/- split (Finn & Lizier 2018), the dataset-level mean
shift, and the exact discrete version for a joint pmf. Values are in nats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from icml25_shared.validate import check_array, check_tensor

__all__ = ["lsmi_from_terms", "mean_shift", "lsmi_discrete", "DiscreteLSMI", "pmi"]


def pmi(log_posterior: torch.Tensor, y: torch.Tensor, log_prior: torch.Tensor) -> torch.Tensor:
    """i(x; y) = log p(y|x) - log p(y) for each sample, from (N, C) log posteriors and (C,) log priors."""
    return log_posterior.gather(1, y.view(-1, 1)).squeeze(1) - log_prior[y]


def lsmi_from_terms(i1: Any, i2: Any, i12: Any, h1: Any, h2: Any) -> tuple[Any, Any, Any, Any]:
    """Per-sample (r, u1, u2, s) from pointwise MIs i1 = i(x1;y), i2, i12 = i(x1,x2;y) and surprisals h1, h2.

    r = min(h1, h2) - min(h1 - i1, h2 - i2) (specificity minus ambiguity); u_m = i_m - r; s = i12 - i1 - i2 + r.
    Works elementwise on torch tensors (all five) or array-likes (numpy); the five must have the same shape.
    """
    names = ("i1", "i2", "i12", "h1", "h2")
    terms = (i1, i2, i12, h1, h2)
    if isinstance(i1, torch.Tensor):
        xp = torch
        for name, t in zip(names, terms):  # equal shapes: (3,) against (4, 1) must not broadcast to (4, 3)
            check_tensor(name, t, shape=tuple(i1.shape))
    else:
        xp = np
        i1, i2, i12, h1, h2 = (check_array(n, t, shape=np.shape(i1)) for n, t in zip(names, terms))
    r = xp.minimum(h1, h2) - xp.minimum(h1 - i1, h2 - i2)
    return r, i1 - r, i2 - r, i12 - i1 - i2 + r


def mean_shift(r: Any, u1: Any, u2: Any, s: Any, weights: Any = None) -> tuple[Any, Any, Any, Any, float]:
    """The dataset-level shift of the paper (``RUS_adjustment``); returns (r, u1, u2, s, delta).

    With the (weighted) means R, U1, U2, S: if R < 0 or S < 0, delta = -min(R, S); elif U1 < 0 or U2 < 0,
    delta = min(U1, U2); else 0. Then r += delta, s += delta, u1 -= delta, u2 -= delta for every sample, which keeps
    r + u1, r + u2 and r + u1 + u2 + s.
    """

    def mean(v: Any) -> float:
        if weights is None:
            return float(v.mean())
        w = weights
        return float((v * w).sum() / w.sum())

    rm, u1m, u2m, sm = mean(r), mean(u1), mean(u2), mean(s)
    if rm < 0 or sm < 0:
        delta = -min(rm, sm)
    elif u1m < 0 or u2m < 0:
        delta = min(u1m, u2m)
    else:
        delta = 0.0
    return r + delta, u1 - delta, u2 - delta, s + delta, delta


@dataclass
class DiscreteLSMI:
    """Exact LSMI of a joint pmf: per-outcome values over the support and their P-weighted means."""

    outcomes: np.ndarray  # (M, 3) indices (x1, x2, y) with P > 0
    weights: np.ndarray  # (M,) probabilities
    r: np.ndarray
    u1: np.ndarray
    u2: np.ndarray
    s: np.ndarray
    raw_means: tuple[float, float, float, float]
    means: tuple[float, float, float, float]  # after the mean shift
    delta: float


def lsmi_discrete(P: Any) -> DiscreteLSMI:
    """Exact LSMI for a joint pmf ``P[x1, x2, y]`` of shape (n1, n2, C) (normalised here); the per-outcome values
    (over outcomes with P > 0) are the shifted ones; ``raw_means`` are before the shift."""
    p = np.asarray(P, dtype=np.float64)
    if p.ndim != 3:
        raise ValueError(f"P must be a 3-D array (n1, n2, C), got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("P must be finite and non-negative")
    total = p.sum()
    if total <= 0:
        raise ValueError("P must have a positive total")
    p = p / total
    p1, p2, py = p.sum((1, 2)), p.sum((0, 2)), p.sum((0, 1))
    p1y, p2y, p12 = p.sum(1), p.sum(0), p.sum(2)
    a, b, c = np.nonzero(p > 0)
    w = p[a, b, c]
    i1 = np.log(p1y[a, c] / (p1[a] * py[c]))
    i2 = np.log(p2y[b, c] / (p2[b] * py[c]))
    i12 = np.log(w / (p12[a, b] * py[c]))
    r, u1, u2, s = lsmi_from_terms(i1, i2, i12, -np.log(p1[a]), -np.log(p2[b]))
    raw = cast("tuple[float, float, float, float]", tuple(float(np.dot(w, v)) for v in (r, u1, u2, s)))
    r, u1, u2, s, delta = mean_shift(r, u1, u2, s, weights=w)
    means = cast("tuple[float, float, float, float]", tuple(float(np.dot(w, v)) for v in (r, u1, u2, s)))
    return DiscreteLSMI(np.stack([a, b, c], 1), w, r, u1, u2, s, raw, means, delta)
