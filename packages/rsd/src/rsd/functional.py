"""The mixture RSD samples from, on an enumerable step space (Sec. 3).

P_RSD(y | z) = ω(r(y|z)) · P_m(y | z) + ν(z) · P_M(y | z),   ν(z) = 1 − E_{y∼P_m}[ω(r(y|z))]      (eq. (1)-(2))

ν is the probability that the draft step is rejected and the target rewrites it (the target-call rate). The
expected reward is E_{P_RSD}[r] = R_M + E_{P_m}[ω(r)(r − R_M)] with R_M = E_{P_M}[r]; under a cap ν ≤ γ it is
maximised by a threshold ω*(r) = 1[r ≥ δ] (the paper's optimality theorem; ties at δ are split to meet the cap
exactly, the fractional-knapsack solution), see :func:`optimal_weights`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from icml25_shared.validate import check_array, check_float

__all__ = ["expected_reward", "mixture_distribution", "optimal_weights", "rejection_probability"]


def _inputs(p_draft: Any, rewards: Any, weighting: Any, p_target: Any = None):
    pm = check_array("p_draft", p_draft, ndim=1).astype(np.float64)
    r = check_array("rewards", rewards, ndim=1).astype(np.float64)
    if r.shape != pm.shape:
        raise ValueError(f"rewards must have the shape of p_draft {pm.shape}, got {r.shape}")
    for name, p in (("p_draft", pm), ("p_target", p_target)):
        if p is None:
            continue
        p = np.asarray(p, dtype=np.float64)
        if p.shape != pm.shape or np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-9):
            raise ValueError(f"{name} must be a probability vector of shape {pm.shape}, got {p!r}")
    if np.any((r < 0) | (r > 1)) or not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must lie in [0, 1], got {r!r}")
    if callable(weighting):
        w = np.array([weighting(float(x)) for x in r], dtype=np.float64)
    else:
        w = check_array("weighting", weighting, ndim=1).astype(np.float64)
        if w.shape != pm.shape:
            raise ValueError(f"per-outcome weights must have the shape of p_draft {pm.shape}, got {w.shape}")
    if np.any((w < 0) | (w > 1)) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights ω(r) must lie in [0, 1], got {w!r}")
    return pm, r, w


def rejection_probability(p_draft: Any, rewards: Any, weighting: Callable[[float], float] | Any) -> float:
    """ν = 1 − E_{P_m}[ω(r)] (eq. (2)): the probability that a step is written by the target."""
    pm, _, w = _inputs(p_draft, rewards, weighting)
    return float(1.0 - np.dot(pm, w))


def mixture_distribution(p_draft: Any, p_target: Any, rewards: Any, weighting: Any) -> np.ndarray:
    """P_RSD = ω(r)·P_m + ν·P_M over an enumerable step space (eq. (1)), float64.

    ``weighting`` is a callable ω (e.g. :func:`rsd.weighting.binary`) or a vector of per-outcome acceptance
    probabilities (randomised thresholds).
    """
    if p_target is None:
        raise ValueError("p_target must be a probability vector of the shape of p_draft, got None")
    pm, _, w = _inputs(p_draft, rewards, weighting, p_target)
    pt = np.asarray(p_target, dtype=np.float64)
    nu = 1.0 - np.dot(pm, w)
    return w * pm + nu * pt


def expected_reward(p_draft: Any, p_target: Any, rewards: Any, weighting: Any) -> float:
    """E_{P_RSD}[r] = Σ_y P_RSD(y) r(y) (eq. (3); equal to R_M + E_{P_m}[ω(r)(r − R_M)])."""
    p = mixture_distribution(p_draft, p_target, rewards, weighting)
    return float(np.dot(p, np.asarray(rewards, dtype=np.float64)))


def optimal_weights(p_draft: Any, rewards: Any, max_rejection: float) -> np.ndarray:
    """The reward-maximising acceptance probabilities under ν ≤ γ (the optimality theorem, Sec. 3).

    Accept the highest-reward outcomes first until E_{P_m}[ω] = 1 − γ: ω*(r) = 1[r > δ], with the outcomes at
    r = δ accepted with the probability that meets the cap exactly (a fractional knapsack). Returns one ω per
    outcome. (When the draft is better than the target on average the unconstrained optimum may accept more;
    the theorem's setting is the cap being active, E_{P_m}[ω] = 1 − γ.)
    """
    gamma = check_float("max_rejection", max_rejection, min=0.0, max=1.0)
    pm, r, _ = _inputs(p_draft, rewards, np.zeros_like(np.asarray(p_draft, dtype=np.float64)))
    budget = 1.0 - gamma  # acceptance mass E_{P_m}[ω]
    w = np.zeros_like(pm)
    # sort by reward, descending; equal rewards form one tie group accepted with one common probability
    for value in np.unique(r)[::-1]:
        group = r == value
        mass = pm[group].sum()
        if budget <= 0:
            break
        take = 1.0 if mass <= budget else budget / mass
        w[group] = take
        budget -= take * mass
    return w
