"""Normalised loss curves, the collapse deviation Δ and the seed-noise floor σ (paper Sec. 2–3, Fig. 1).

Normalisation (paper eq. (1)): for a run of size p and seed ω trained to the horizon c*(p),

    x = c / c*(p) ∈ (0, 1],    ℓ(x; p, ω) = (L(x·c*(p); p, ω) − L0) / (L(c*(p); p, ω) − L0),

so ℓ(1) = 1. Curves are resampled on a common x grid by linear interpolation of L in log x.

Collapse deviation and noise floor. The paper plots both but releases no code for them; this is our
reconstruction (every reducer is an option). With n_ω seeds per size and n_p sizes, at each x, ddof = 1 throughout:

    σ(x) = sqrt( mean_p Var_ω ℓ(x; p, ω) )         (pool="rms";  pool="mean": mean_p Std_ω ℓ)
    Δ(x) = Std_p [ mean_ω ℓ(x; p, ω) ]             (center="median": the seed median)
    E(x) = Δ²(x) − mean_p Var_ω ℓ / n_ω(p)          noise-corrected excess: E[E] = 0 when sizes differ only by
                                                     seed noise (exact for the mean center)

Supercollapse is Δ(x) < σ(x) over most of (0, 1) (paper Fig. 1c).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from icml25_shared.validate import check_array, check_choice, check_float
from supercollapse.frontier import Horizon
from supercollapse.laws import ScalingLaw
from supercollapse.runs import Runs

__all__ = [
    "Normalized",
    "CollapseReport",
    "normalize",
    "collapse_report",
    "collapse_deviation",
    "l0_sweep",
    "DEFAULT_X_GRID",
]

DEFAULT_X_GRID = np.linspace(0.05, 1.0, 96)
_END_RTOL = 1e-9


@dataclass
class Normalized:
    """Normalised curves: ``ell[i, j, :]`` is ℓ of seed j of ``sizes[i]`` on ``x`` (NaN outside a run's logged
    range, or where size i has fewer seeds than the largest count). ``frame``: the same as a tidy frame."""

    x: np.ndarray
    ell: np.ndarray
    sizes: np.ndarray
    seeds: list[list[Any]] = field(default_factory=list)
    frame: pd.DataFrame | None = None
    L0: float = float("nan")
    c_star: dict[float, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.x = check_array("x", self.x, ndim=1, dtype="floating", nonempty=True)
        self.ell = np.asarray(self.ell, dtype=np.float64)
        self.sizes = np.asarray(self.sizes, dtype=np.float64)
        if self.ell.ndim != 3 or self.ell.shape[0] != len(self.sizes) or self.ell.shape[2] != len(self.x):
            raise ValueError(
                f"ell must have shape (n_sizes={len(self.sizes)}, n_seeds, n_x={len(self.x)}), got {self.ell.shape}"
            )


def _resolve_c_star(runs: Runs, horizon: Horizon | None, c_star: Mapping[float, float] | None) -> dict[float, float]:
    sizes = [float(s) for s in runs.sizes]
    if horizon is not None and c_star is not None:
        raise ValueError("give either horizon or c_star, not both")
    if horizon is not None:
        if not isinstance(horizon, Horizon):
            raise TypeError(f"horizon must be a Horizon (from fit_horizon), got {type(horizon).__name__}")
        return {p: float(horizon.compute(p)) for p in sizes}
    if c_star is not None:
        given = {float(k): check_float(f"c_star[{k}]", v, min=0, min_open=True) for k, v in dict(c_star).items()}
        missing = [p for p in sizes if p not in given]
        if missing:
            raise ValueError(f"c_star has no entry for size(s) {missing} of the runs; it has {sorted(given)}")
        return {p: given[p] for p in sizes}
    return {}


def normalize(
    runs: Runs,
    L0: float | ScalingLaw,
    horizon: Horizon | None = None,
    c_star: Mapping[float, float] | None = None,
    x_grid: Sequence[float] | np.ndarray = DEFAULT_X_GRID,
    outside: Literal["raise", "nan"] = "raise",
) -> Normalized:
    """Normalise every run of one schedule (paper eq. (1)).

    Args:
        runs: runs of a single schedule (``runs.where(schedule=...)``).
        L0: the irreducible loss (a number or a fitted :class:`ScalingLaw`); must be below every L(c*).
        horizon: the horizon c*(p) per size from a fitted :class:`Horizon` (or give ``c_star``; with neither,
            each run's last logged compute is its own horizon: runs trained exactly to it).
        c_star: the horizon as a mapping size → c* (instead of ``horizon``).
        x_grid: increasing values in (0, 1] at which ℓ is resampled.
        outside: a point of ``x_grid`` below a run's first logged x raises (``"raise"``) or gives ℓ = NaN there
            (``"nan"``: at each x, Δ uses the seeds that cover it and is NaN where fewer than 2 sizes have one; σ is
            NaN where a size has fewer than 2 seeds; ``CollapseReport.mean`` skips NaN points).

    Raises ``ValueError`` when a run ends before its horizon, when L0 ≥ a run's L(c*), when ``x_grid`` leaves
    (0, 1], or (``outside="raise"``) when ``x_grid`` starts before a run's first logged point.
    """
    if not isinstance(runs, Runs):
        raise TypeError(f"runs must be a supercollapse.Runs, got {type(runs).__name__}")
    if len(runs.schedules) != 1:
        raise ValueError(f"normalize takes runs of one schedule, got {runs.schedules}; select with runs.where()")
    l0 = L0.L0 if isinstance(L0, ScalingLaw) else check_float("L0", L0)
    x = check_array("x_grid", x_grid, ndim=1, dtype="numeric", finite=True, nonempty=True).astype(np.float64)
    if x.min() <= 0 or x.max() > 1:
        raise ValueError(f"x_grid must lie in (0, 1], got values in [{x.min()}, {x.max()}]")
    if len(x) > 1 and (np.diff(x) <= 0).any():
        raise ValueError("x_grid must be strictly increasing")
    outside = check_choice("outside", outside, ("raise", "nan"))
    cs = _resolve_c_star(runs, horizon, c_star)
    sizes = runs.sizes.astype(np.float64)
    seeds: list[list[Any]] = [[] for _ in sizes]
    curves: list[list[np.ndarray]] = [[] for _ in sizes]
    rows = []
    for rid, g in runs.groups():
        p = float(g["size"].iloc[0])
        c, L = g["compute"].to_numpy(), g["loss"].to_numpy()
        cstar = cs[p] if p in cs else float(c[-1])
        if c[-1] < cstar * (1 - _END_RTOL):
            raise ValueError(
                f"run_id {rid!r} (size {p:g}) ends at compute {c[-1]:.6g}, before its horizon c* = {cstar:.6g}"
            )
        xr = c / cstar
        if abs(xr[-1] - 1.0) <= _END_RTOL:
            xr[-1] = 1.0
        lx = np.log(xr)
        L_end = float(L[-1]) if xr[-1] == 1.0 else float(np.interp(0.0, lx, L))
        if L_end <= l0:
            raise ValueError(f"L0 = {l0} must be below run_id {rid!r}'s final loss L(c*) = {L_end}")
        if outside == "raise" and x[0] < xr[0] * (1 - 1e-12):
            raise ValueError(
                f"x_grid starts at x = {x[0]:.4g}, below run_id {rid!r}'s first logged point x = {xr[0]:.4g} "
                f"(size {p:g}); start x_grid at >= {xr[0]:.4g} or pass outside='nan' (ℓ = NaN there)"
            )
        Lx = np.interp(np.log(x), lx, L)
        Lx[(x < xr[0] * (1 - 1e-12)) | (x > xr[-1] * (1 + 1e-12))] = np.nan
        ell = (Lx - l0) / (L_end - l0)
        i = int(np.searchsorted(sizes, p))
        seeds[i].append(g["seed"].iloc[0])
        curves[i].append(ell)
        rows.append(pd.DataFrame({"run_id": rid, "size": p, "seed": g["seed"].iloc[0], "x": x, "ell": ell}))
    n_seeds = max(len(c) for c in curves)
    arr = np.full((len(sizes), n_seeds, len(x)), np.nan)
    for i, cv in enumerate(curves):
        order = np.argsort(np.asarray(seeds[i], dtype=object).astype(str), kind="stable")
        seeds[i] = [seeds[i][j] for j in order]
        for j, k in enumerate(order):
            arr[i, j] = cv[k]
    frame = pd.concat(rows, ignore_index=True)
    frame["schedule"] = runs.schedules[0]
    finals = runs.meta().groupby("size")["final_compute"].max()
    full_cs = cs or {float(p): float(m) for p, m in zip(finals.index, finals.to_numpy(), strict=True)}
    return Normalized(x, arr, sizes, seeds, frame, l0, full_cs)


def _nan_stats(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, mean, variance with ddof = 1) ignoring NaN, without warnings: NaN where count < 1 / < 2."""
    ok = ~np.isnan(a)
    n = ok.sum(axis=axis)
    s = np.where(ok, a, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, s / np.maximum(n, 1), np.nan)
        dev = np.where(ok, a - np.expand_dims(mean, axis), 0.0)
        var = np.where(n > 1, (dev**2).sum(axis=axis) / np.maximum(n - 1, 1), np.nan)
    return n, mean, var


@dataclass
class CollapseReport:
    """Δ(x), σ(x), Δ/σ and the excess E(x) on the grid ``x`` (see the module docstring), plus the per-size seed
    means ``curves`` (n_p, n_x) and 5 / 95 % seed quantiles used by :meth:`plot`."""

    x: np.ndarray
    delta: np.ndarray
    sigma: np.ndarray
    ratio: np.ndarray
    excess: np.ndarray
    sizes: np.ndarray
    n_seeds: np.ndarray
    curves: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pool: str = "rms"

    def mean(self, name: str = "ratio", lo: float = 0.0, hi: float = 1.0) -> float:
        """Mean of ``delta``/``sigma``/``ratio``/``excess`` over the grid points with lo ≤ x ≤ hi (NaN skipped)."""
        v = getattr(self, check_choice("name", name, ("delta", "sigma", "ratio", "excess")))
        lo, hi = check_float("lo", lo), check_float("hi", hi)
        if lo > hi:
            raise ValueError(f"lo must be <= hi, got lo={lo}, hi={hi}")
        sel = (self.x >= lo) & (self.x <= hi) & np.isfinite(v)
        return float(v[sel].mean()) if sel.any() else float("nan")

    def to_frame(self) -> pd.DataFrame:
        """One row per grid point: ``x, delta, sigma, ratio, excess``."""
        return pd.DataFrame(
            {"x": self.x, "delta": self.delta, "sigma": self.sigma, "ratio": self.ratio, "excess": self.excess}
        )

    def plot(self, ax: Sequence[Any] | None = None, title: str = "") -> Any:
        """Two panels: seed-mean ℓ per size with its 5–95 % seed band (log x), and Δ, σ vs x. Returns the figure."""
        import matplotlib.pyplot as plt

        axes: Any
        if ax is None:
            fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        else:
            axes = ax
            fig = axes[0].figure
        cmap = plt.get_cmap("viridis")
        for i, p in enumerate(self.sizes):
            col = cmap(i / max(1, len(self.sizes) - 1))
            axes[0].plot(self.x, self.curves[i], color=col, label=f"p={p:.3g}")
            axes[0].fill_between(self.x, self.lo[i], self.hi[i], color=col, alpha=0.2, linewidth=0)
        axes[0].set(xscale="log", yscale="log", xlabel="x = c / c*(p)", ylabel="normalised loss ℓ(x)", title=title)
        axes[0].legend(fontsize=7)
        axes[1].plot(self.x, self.delta, label="Δ(x) collapse deviation")
        axes[1].plot(self.x, self.sigma, label="σ(x) seed-noise floor")
        axes[1].set(yscale="log", xlabel="x", title=f"Δ/σ mean over x≥0.2: {self.mean('ratio', 0.2):.2f}")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        return fig


def collapse_report(
    norm: Normalized,
    pool: Literal["rms", "mean"] = "rms",
    sizes: Sequence[float] | None = None,
    center: Literal["mean", "median"] = "mean",
) -> CollapseReport:
    """Collapse deviation Δ(x), noise floor σ(x), their ratio and the noise-corrected excess (module docstring).

    ``sizes``: a subset of the sizes to use (the paper drops the smallest). Needs ≥ 2 sizes (for Δ) with ≥ 2
    seeds each (for σ).
    """
    if not isinstance(norm, Normalized):
        raise TypeError(f"norm must be a Normalized (from normalize), got {type(norm).__name__}")
    pool = check_choice("pool", pool, ("rms", "mean"))
    center = check_choice("center", center, ("mean", "median"))
    ell, all_sizes = norm.ell, norm.sizes
    if sizes is not None:
        ell, all_sizes = _select_sizes(ell, all_sizes, sizes)
    if len(all_sizes) < 2:
        raise ValueError(f"Δ needs >= 2 sizes, got {len(all_sizes)} ({all_sizes.tolist()})")
    n_seed = (~np.isnan(ell)).any(axis=2).sum(axis=1)
    if (n_seed < 2).any():
        few = {float(p): int(n) for p, n in zip(all_sizes, n_seed) if n < 2}
        raise ValueError(f"σ needs >= 2 seeds per size, got {few} (size: seeds)")
    n, m, v = _nan_stats(ell, axis=1)  # over seeds: (n_p, n_x)
    if center == "median":
        have_any = (n > 0)[:, None, :]
        m = np.where(n > 0, np.nanmedian(np.where(have_any, ell, 0.0), axis=1), np.nan)
    sigma = np.sqrt(v.mean(axis=0)) if pool == "rms" else np.sqrt(v).mean(axis=0)
    _, _, var_p = _nan_stats(m, axis=0)
    delta = np.sqrt(var_p)
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = var_p - (v / n).mean(axis=0)
        ratio = delta / sigma
    if not np.isnan(ell).any():
        lo, hi = np.quantile(ell, [0.05, 0.95], axis=1)
    else:  # columns without any seed stay NaN (and never reach nanquantile, which would warn)
        have = (n > 0)[:, None, :]
        lo, hi = np.nanquantile(np.where(have, ell, 0.0), [0.05, 0.95], axis=1)
        lo, hi = np.where(n > 0, lo, np.nan), np.where(n > 0, hi, np.nan)
    return CollapseReport(norm.x.copy(), delta, sigma, ratio, excess, all_sizes, n_seed, m, lo, hi, pool)


def _select_sizes(ell: np.ndarray, all_sizes: np.ndarray, sizes: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    want = [float(s) for s in sizes]
    unknown = [s for s in want if s not in all_sizes.tolist()]
    if unknown:
        raise ValueError(f"sizes {unknown} are not among the normalised sizes {all_sizes.tolist()}")
    idx = [int(np.flatnonzero(all_sizes == s)[0]) for s in sorted(want)]
    return ell[idx], all_sizes[idx]


def collapse_deviation(norm: Normalized, sizes: Sequence[float] | None = None) -> np.ndarray:
    """Δ(x) = Std_p [mean_ω ℓ] alone (ddof = 1): needs ≥ 2 sizes but any number of seeds (one seed: no σ)."""
    if not isinstance(norm, Normalized):
        raise TypeError(f"norm must be a Normalized (from normalize), got {type(norm).__name__}")
    ell = norm.ell
    if sizes is not None:
        ell, _ = _select_sizes(ell, norm.sizes, sizes)
    if ell.shape[0] < 2:
        raise ValueError(f"Δ needs >= 2 sizes, got {ell.shape[0]}")
    _, m, _ = _nan_stats(ell, axis=1)
    return np.sqrt(_nan_stats(m, axis=0)[2])


def l0_sweep(runs: Runs, L0s: Sequence[float], **kwargs: Any) -> pd.DataFrame:
    """The report's dependence on L0 (the normalisation is very sensitive to it): mean Δ, σ and Δ/σ over
    x ∈ [0.2, 1] for each L0. ``kwargs`` go to :func:`normalize` (``horizon``, ``c_star``, ``x_grid``)."""
    L0s = check_array("L0s", L0s, ndim=1, dtype="numeric", finite=True, nonempty=True)
    rows = []
    for l0 in L0s:
        rep = collapse_report(normalize(runs, l0, **kwargs))
        rows.append(
            {"L0": float(l0), "delta": rep.mean("delta", 0.2), "sigma": rep.mean("sigma", 0.2),
             "ratio": rep.mean("ratio", 0.2)}
        )  # fmt: skip
    return pd.DataFrame(rows)
