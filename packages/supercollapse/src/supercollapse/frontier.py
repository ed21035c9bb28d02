"""The compute-optimal frontier and horizon (paper Sec. 2, "compute-optimal training").

Given constant-LR runs of several sizes trained for long, the Pareto frontier is the lowest loss reachable at each
compute c, ``L*(c) = min_p L_p(c)``, reached by ``p*(c)``. Fitting ``c*(p) = (p/κ)^e`` to the frontier points gives
the compute-optimal horizon: a model of size p is trained for ``T(p) = c*(p)/(6p)`` tokens, i.e. tokens ∝ p^γ with
``γ = e − 1``. For ``L_p(c) = A p^−ν + B (c/6p)^−μ`` the exact optimum is ``e = 1 + ν/μ``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml25_shared.validate import check_bool, check_float, check_int
from supercollapse.runs import Runs

__all__ = ["Frontier", "Horizon", "compute_frontier", "fit_horizon"]


@dataclass(frozen=True)
class Frontier:
    """The Pareto frontier on a log grid of compute values.

    ``compute`` (n_grid,), ``loss`` = L*(c), ``size`` = p*(c) (NaN where no run covers c), ``kept``: the grid points
    used for the horizon fit (finite and, with ``drop_edge_sizes``, whose argmin is neither the smallest nor the
    largest size: those are frontier artefacts of a finite size range).
    """

    compute: np.ndarray
    loss: np.ndarray
    size: np.ndarray
    kept: np.ndarray
    sizes: np.ndarray


@dataclass(frozen=True)
class Horizon:
    """The compute-optimal horizon ``c*(p) = (p/κ)^e``; ``flops_per_param_token`` converts compute to tokens
    (6 for FLOPs, ``c = 6·p·t``; give 6e-15 when compute is logged in PFLOPs)."""

    kappa: float
    exponent: float
    flops_per_param_token: float = 6.0

    @property
    def gamma(self) -> float:
        """The data exponent γ = e − 1 (tokens ∝ p^γ)."""
        return self.exponent - 1.0

    def compute(self, p: float | np.ndarray) -> float | np.ndarray:
        """c*(p) = (p/κ)^e."""
        return (np.asarray(p, dtype=np.float64) / self.kappa) ** self.exponent

    def tokens(self, p: float | np.ndarray) -> float | np.ndarray:
        """T(p) = c*(p) / (6p) (in the units that ``flops_per_param_token`` implies)."""
        p = np.asarray(p, dtype=np.float64)
        return self.compute(p) / (self.flops_per_param_token * p)


def _interp_log(c_grid: np.ndarray, c: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """log10 L interpolated linearly in log10 c; +inf outside the run's logged range."""
    lc, ll = np.log10(c), np.log10(loss)
    out = np.interp(np.log10(c_grid), lc, ll)
    out[(c_grid < c[0] * (1 - 1e-12)) | (c_grid > c[-1] * (1 + 1e-12))] = np.inf
    return out


def compute_frontier(runs: Runs, n_grid: int = 1000, drop_edge_sizes: bool = True) -> Frontier:
    """Pareto frontier of constant-LR runs (paper Sec. 2): on ``n_grid`` log-spaced compute values every curve is
    interpolated in log L vs log c (+inf outside its range), seeds of a size are averaged in log L, and the lowest
    size wins. Pass only the constant-LR runs (``runs.where(schedule="const")``)."""
    if not isinstance(runs, Runs):
        raise TypeError(f"runs must be a supercollapse.Runs, got {type(runs).__name__}")
    n_grid = check_int("n_grid", n_grid, min=2)
    drop_edge_sizes = check_bool("drop_edge_sizes", drop_edge_sizes)
    sizes = runs.sizes
    if len(sizes) < 2:
        raise ValueError(f"compute_frontier needs runs of >= 2 sizes, got sizes {sizes.tolist()}")
    if (runs.frame["loss"] <= 0).any():
        raise ValueError("compute_frontier interpolates log L: every loss must be > 0")
    f = runs.frame
    grid = np.logspace(np.log10(f["compute"].min()), np.log10(f["compute"].max()), n_grid)
    per_size = np.full((len(sizes), n_grid), np.inf)
    for i, p in enumerate(sizes):
        curves = [
            _interp_log(grid, np.asarray(g["compute"]), np.asarray(g["loss"]))
            for _, g in f[f["size"] == p].groupby("run_id")
        ]
        with np.errstate(invalid="ignore"):
            per_size[i] = np.mean(curves, axis=0)  # +inf where any seed lacks the point
    best = np.argmin(per_size, axis=0)
    lstar = per_size[best, np.arange(n_grid)]
    covered = np.isfinite(lstar)
    size = np.where(covered, sizes[best], np.nan)
    kept = covered.copy()
    if drop_edge_sizes:
        kept &= (best != 0) & (best != len(sizes) - 1)
    return Frontier(grid, np.where(covered, 10.0**lstar, np.nan), size, kept, sizes)


def fit_horizon(front: Frontier, flops_per_param_token: float = 6.0) -> Horizon:
    """Fit ``c*(p) = (p/κ)^e`` by least squares of log10 c on log10 p*(c) over the kept frontier points."""
    if not isinstance(front, Frontier):
        raise TypeError(f"front must be a Frontier (from compute_frontier), got {type(front).__name__}")
    flops_per_param_token = check_float("flops_per_param_token", flops_per_param_token, min=0, min_open=True)
    lp, lc = np.log10(front.size[front.kept]), np.log10(front.compute[front.kept])
    if len(np.unique(lp)) < 2:
        raise ValueError(
            f"fit_horizon needs frontier points won by >= 2 distinct sizes (after dropping the edge sizes), got "
            f"{np.unique(front.size[front.kept]).tolist()}; add sizes or pass drop_edge_sizes=False"
        )
    e, intercept = np.polyfit(lp, lc, 1)
    # log10 c = e log10 p − e log10 κ
    return Horizon(float(10.0 ** (-intercept / e)), float(e), flops_per_param_token)
