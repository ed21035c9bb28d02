"""Final-loss scaling law and exact power-law loss families (paper Sec. 2 and Sec. 3.2).

``fit_scaling_law`` fits ``L(c*) = a·c*^−b + L0`` to the final losses at the compute-optimal horizon: minimise the
mean Huber_δ loss of ``log pred − log L`` by L-BFGS-B with ``a, b, L0 ≥ 0`` and ``L0 < min L``, from the best of a
10×10×10 grid of starts. The irreducible loss L0 is what the normalisation subtracts.

``PowerLawFamily`` is the paper's explanation of collapse (Sec. 3.2): for ``L − L0 = Σ_i A_i t^−μ_i p^−ν_i`` and a
horizon ``t*(p) = k·p^γ``, along ``t = x·t*`` each term scales as ``p^−(μ_i γ + ν_i)``; the normalised curve is
independent of p exactly when the leading terms share that exponent, and then
``ℓ(x) = Σ_i w_i x^−μ_i / Σ_i w_i``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from icml25_shared.validate import check_array, check_choice, check_float, check_int

__all__ = ["ScalingLaw", "fit_scaling_law", "PowerLawFamily", "scaling_law_grid"]


@dataclass(frozen=True)
class ScalingLaw:
    """``L(c) = a·c^−b + L0`` with the fit's R² in log space and its objective value."""

    a: float
    b: float
    L0: float
    r2: float
    objective: float = float("nan")

    def __call__(self, c: float | np.ndarray) -> float | np.ndarray:
        return self.a * np.asarray(c, dtype=np.float64) ** (-self.b) + self.L0


def scaling_law_grid(L: np.ndarray, n: int = 10) -> np.ndarray:
    """The ``n³`` starts (a, b, L0) of the paper's grid, a in the normalised-compute units of the fit:
    a ∈ linspace(0.1, 1)·max L, b ∈ linspace(0.01, 0.3), L0 ∈ linspace(0.1·min L, min L) (the last pulled just
    inside the bound L0 < min L)."""
    lmin, lmax = float(np.min(L)), float(np.max(L))
    a = np.linspace(0.1, 1.0, n) * lmax
    b = np.linspace(0.01, 0.3, n)
    l0 = np.linspace(0.1 * lmin, lmin * (1 - 1e-6), n)
    return np.stack(np.meshgrid(a, b, l0, indexing="ij"), axis=-1).reshape(-1, 3)


def _pred_floor(logL: np.ndarray) -> float:
    """Smallest prediction the fit evaluates: 1e-12 of the smallest loss. L-BFGS-B may probe the bound corner
    a = L0 = 0, where the prediction is 0; a floor this far below the data keeps the objective and its gradient
    finite there (a floor of 1e-300 overflowed the gradient) while any sensible fit stays far above it."""
    return 1e-12 * float(np.exp(logL.min()))


def _objective(theta: np.ndarray, lc: np.ndarray, logL: np.ndarray, loss: str, delta: float) -> np.ndarray:
    """Mean Huber (or squared) loss of log-residuals for a batch of parameter rows ``theta`` (k, 3), scaled by
    1/δ² so that the optimiser sees O(1) values."""
    a, b, l0 = theta[:, :1], theta[:, 1:2], theta[:, 2:3]
    pred = a * np.exp(-b * lc) + l0
    r = np.log(np.maximum(pred, _pred_floor(logL))) - logL
    if loss == "huber_log":
        ar = np.abs(r)
        h = np.where(ar <= delta, 0.5 * r**2, delta * (ar - 0.5 * delta))
    else:
        h = 0.5 * r**2
    return h.mean(axis=1) / delta**2


def _value_and_grad(theta: np.ndarray, lc: np.ndarray, logL: np.ndarray, loss: str, delta: float, fixed: float | None):
    if fixed is not None:
        theta = np.array([theta[0], theta[1], fixed])
    a, b, l0 = theta
    e = np.exp(-b * lc)
    raw = a * e + l0
    floor = _pred_floor(logL)
    pred = np.maximum(raw, floor)
    r = np.log(pred) - logL
    if loss == "huber_log":
        ar = np.abs(r)
        h = np.where(ar <= delta, 0.5 * r**2, delta * (ar - 0.5 * delta))
        dh = np.clip(r, -delta, delta)
    else:
        h, dh = 0.5 * r**2, r
    n = len(r) * delta**2
    w = np.where(raw > floor, dh / pred, 0.0)  # the floor is flat: no gradient through clamped points
    grad = np.array([np.sum(w * e), np.sum(-w * a * e * lc), np.sum(w)]) / n
    return float(h.sum() / n), (grad[:2] if fixed is not None else grad)


def one_blas_thread() -> contextlib.AbstractContextManager:
    """Limit BLAS to one thread (threadpoolctl, when installed): L-BFGS-B's tiny vector operations slow down
    twenty-fold on a loaded machine when OpenBLAS spins several threads."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _polish(start, lc, logL, loss, delta, bounds, fixed):
    res = minimize(
        _value_and_grad, start, args=(lc, logL, loss, delta, fixed), jac=True, method="L-BFGS-B", bounds=bounds,
        options={"ftol": 1e-20, "gtol": 1e-14, "maxiter": 5000, "maxcor": 20},
    )  # fmt: skip
    return res.x, float(res.fun)


def fit_scaling_law(
    C: Sequence[float] | np.ndarray,
    L: Sequence[float] | np.ndarray,
    loss: Literal["huber_log", "squared_log"] = "huber_log",
    delta: float = 1e-3,
    L0: float | None = None,
    *,
    n_grid: int = 10,
    n_polish: int = 8,
) -> ScalingLaw:
    """Fit ``L = a·C^−b + L0`` (paper Sec. 2, final loss vs compute at the horizon).

    Args:
        C: compute of each point, ≥ 3 points, all > 0.
        L: the (seed-averaged) final loss at each compute, all > 0.
        loss: ``"huber_log"`` (the paper's Huber_δ of log residuals) or ``"squared_log"`` (plain least squares of
            log residuals, for comparison).
        delta: Huber threshold δ.
        L0: a fixed irreducible loss (0 ≤ L0 < min L); ``None`` fits it.
        n_grid: grid points per parameter (``n_grid³`` starts).
        n_polish: the objective is evaluated at every start at once (vectorised) and L-BFGS-B runs only from the
            ``n_polish`` best starts; ``n_polish = n_grid³`` runs it from every start (the exhaustive loop).

    Compute is divided by its minimum before fitting (``a`` is reported back in the caller's units), so the
    grid's ranges do not depend on the compute unit.
    """
    C = np.asarray(check_array("C", C, ndim=1, dtype="numeric", finite=True, nonempty=True), dtype=np.float64)
    L = np.asarray(check_array("L", L, ndim=1, dtype="numeric", finite=True, nonempty=True), dtype=np.float64)
    if C.shape != L.shape:
        raise ValueError(f"C and L must have the same length, got {len(C)} and {len(L)}")
    if len(C) < 3:
        raise ValueError(f"fit_scaling_law needs >= 3 points, got {len(C)}")
    if (C <= 0).any() or (L <= 0).any():
        raise ValueError("C and L must be > 0")
    loss = check_choice("loss", loss, ("huber_log", "squared_log"))
    delta = check_float("delta", delta, min=0, min_open=True)
    n_grid = check_int("n_grid", n_grid, min=1)
    n_polish = check_int("n_polish", n_polish, min=1)
    lmin = float(L.min())
    if L0 is not None:
        L0 = check_float("L0", L0, min=0.0)
        if lmin <= L0:
            raise ValueError(f"L0 must be below every final loss (min {lmin}), got {L0}")
    if np.ptp(L) <= 1e-12 * lmin:
        raise ValueError(f"L is constant ({lmin:.6g} at every compute): there is no power law a·C^−b + L0 to fit")
    if np.ptp(C) == 0:
        raise ValueError(f"C is constant ({C[0]:.6g}): the law needs losses at >= 2 different computes")
    c_ref = float(C.min())
    lc, logL = np.log(C / c_ref), np.log(L)
    starts = scaling_law_grid(L, n_grid)
    upper = lmin * (1 - 1e-12)
    if L0 is not None:
        starts = np.unique(np.column_stack([starts[:, 0], starts[:, 1], np.full(len(starts), L0)]), axis=0)
    values = _objective(starts, lc, logL, loss, delta)
    order = np.argsort(values, kind="stable")[: min(n_polish, len(starts))]
    bounds = [(0.0, None), (0.0, None)] + ([] if L0 is not None else [(0.0, upper)])
    best, best_f = None, np.inf
    with one_blas_thread():
        for i in order:
            x0 = starts[i, :2] if L0 is not None else starts[i]
            x, fval = _polish(x0, lc, logL, loss, delta, bounds, L0)
            if fval < best_f:
                best, best_f = x, fval
    assert best is not None  # at least one start was polished (n_polish >= 1)
    a, b = float(best[0]), float(best[1])
    l0 = float(L0) if L0 is not None else float(best[2])
    if b <= 1e-9 or a <= 0:
        raise ValueError(
            f"the best fit has a = {a:.3g}, b = {b:.3g}: L does not decrease with C (a power law with b > 0 fits no "
            "better than a constant); check that L is the final loss at each compute"
        )
    pred = np.log(np.maximum(a * np.exp(-b * lc) + l0, 1e-300))
    ss_res = float(np.sum((logL - pred) ** 2))
    ss_tot = float(np.sum((logL - logL.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return ScalingLaw(a * c_ref**b, b, l0, r2, best_f * delta**2)


@dataclass(frozen=True)
class PowerLawFamily:
    """An exact loss family ``L(t, p) = L0 + Σ_i A_i t^−μ_i p^−ν_i`` trained to ``t*(p) = k·p^γ`` (paper Sec. 3.2).

    ``terms``: ``(A_i, μ_i, ν_i)`` triples. Compute is ``c = 6·p·t``.
    """

    terms: tuple[tuple[float, float, float], ...]
    gamma: float
    k: float = 1.0
    L0: float = 0.0

    def __post_init__(self) -> None:
        terms = tuple(tuple(float(v) for v in t) for t in self.terms)
        if not terms or any(len(t) != 3 for t in terms):
            raise ValueError(f"terms must be non-empty (A, mu, nu) triples, got {self.terms!r}")
        for A, mu, nu in terms:
            if not (np.isfinite(A) and np.isfinite(mu) and np.isfinite(nu)) or A <= 0 or mu < 0 or nu < 0:
                raise ValueError(f"each term needs finite A > 0, mu >= 0, nu >= 0, got {(A, mu, nu)}")
        object.__setattr__(self, "terms", terms)
        object.__setattr__(self, "gamma", check_float("gamma", self.gamma))
        object.__setattr__(self, "k", check_float("k", self.k, min=0, min_open=True))
        object.__setattr__(self, "L0", check_float("L0", self.L0))

    def loss(self, t: np.ndarray | float, p: np.ndarray | float) -> np.ndarray:
        t, p = np.asarray(t, dtype=np.float64), np.asarray(p, dtype=np.float64)
        return self.L0 + np.sum([A * t ** (-mu) * p ** (-nu) for A, mu, nu in self.terms], axis=0)

    def horizon(self, p: np.ndarray | float) -> np.ndarray:
        """t*(p) = k·p^γ."""
        return self.k * np.asarray(p, dtype=np.float64) ** self.gamma

    def term_exponents(self) -> np.ndarray:
        """The exponent ``μ_i γ + ν_i`` of p in each term along ``t = x·t*(p)``."""
        return np.array([mu * self.gamma + nu for _, mu, nu in self.terms])

    def limit_curve(self, x: np.ndarray) -> np.ndarray:
        """``ℓ(x) = Σ w_i x^−μ_i / Σ w_i`` over the terms with the smallest exponent (the p → ∞ limit), with
        ``w_i = A_i k^−μ_i``."""
        x = np.asarray(x, dtype=np.float64)
        ex = self.term_exponents()
        lead = np.isclose(ex, ex.min(), rtol=0, atol=1e-12)
        num = np.sum([A * self.k ** (-mu) * x ** (-mu) for (A, mu, _), keep in zip(self.terms, lead) if keep], axis=0)
        den = float(sum(A * self.k ** (-mu) for (A, mu, _), keep in zip(self.terms, lead) if keep))
        return num / den

    def runs(self, sizes: Sequence[float], x: Sequence[float] | np.ndarray, schedule: str = "const") -> pd.DataFrame:
        """A Runs-schema frame: one run per size, logged at ``t = x·t*(p)`` (``x`` increasing, ending at 1)."""
        x = check_array("x", x, ndim=1, dtype="floating", finite=True, nonempty=True)
        rows = []
        for p in sizes:
            t = x * self.horizon(p)
            rows.append(
                pd.DataFrame(
                    {"run_id": f"p={p:g}", "size": float(p), "seed": 0, "schedule": schedule,
                     "step": np.arange(len(x)), "compute": 6.0 * p * t, "tokens": t, "loss": self.loss(t, p)}
                )
            )  # fmt: skip
        return pd.concat(rows, ignore_index=True)
