"""The PID-CVX baseline of Liang et al. (NeurIPS 2023): K-means per modality, a k x k x C histogram, and the BROJA
decomposition solved as a convex program (cvxpy; Clarabel when installed). Dataset level only.

Two equivalent formulations of max H_q(Y | X1, X2) s.t. q(x1, y) = p(x1, y), q(x2, y) = p(x2, y):

- ``"aux"`` (default): an auxiliary variable t(x1, x2) = sum_y q(x1, x2, y), objective -sum rel_entr(q, t). Every
  exponential cone touches three scalars, so the KKT system stays sparse.
- ``"direct"``: t written as the expression sum_y q inside ``rel_entr`` (the textbook form of the program). Every cone
  then references all C entries of its row, the KKT system fills in, and Clarabel's cost per iteration explodes
  with C (same optimum; C = 30, k = 20 takes minutes instead of seconds).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from icml25_shared.validate import check_choice, check_float, check_int

__all__ = ["broja_discrete", "broja_cvx", "FORMULATIONS"]

FORMULATIONS = ("aux", "direct")


def _mi(p: np.ndarray, axes_x: tuple[int, ...]) -> float:
    """I(X; Y) of a joint array whose last axis is Y and whose other listed axes form X (others summed out)."""
    keep = tuple(sorted(set(axes_x) | {p.ndim - 1}))
    drop = tuple(a for a in range(p.ndim) if a not in keep)
    pj = p.sum(axis=drop) if drop else p
    pj = pj.reshape(-1, p.shape[-1])
    px, py = pj.sum(1, keepdims=True), pj.sum(0, keepdims=True)
    m = pj > 0
    return float((pj[m] * np.log(pj[m] / (px @ py)[m])).sum())


def broja_discrete(
    P: Any, solver: str | None = None, formulation: str = "aux", time_limit: float | None = None
) -> dict[str, Any]:
    """BROJA (R, U1, U2, S) in nats of a joint pmf P[x1, x2, y], by maximising H_q(Y | X1, X2) over the q with
    the same (x1, y) and (x2, y) marginals.

    Returns ``{"R", "U1", "U2", "S", "status", "solve_s"}``; ``solve_s`` is the wall time of the cvxpy solve. With
    ``time_limit`` (seconds, Clarabel only) a solve that runs out of time returns NaN values and
    ``status="time_limit"`` (its time is then a lower bound on the full solve).
    """
    import cvxpy as cp

    check_choice("formulation", formulation, FORMULATIONS)
    time_limit = check_float("time_limit", time_limit, min=0.0, min_open=True, allow_none=True)
    p = np.asarray(P, dtype=np.float64)
    if p.ndim != 3:
        raise ValueError(f"P must be a 3-D joint pmf P[x1, x2, y], got shape {p.shape}")
    if (p < 0).any() or not p.sum() > 0:
        raise ValueError("P must be non-negative with a positive total")
    p = p / p.sum()
    n1, n2, c = p.shape
    q = cp.Variable((n1 * n2, c), nonneg=True)
    rows1 = np.repeat(np.arange(n1), n2)  # row r = (a, b) with a = r // n2
    rows2 = np.tile(np.arange(n2), n1)
    s1 = np.zeros((n1, n1 * n2))
    s1[rows1, np.arange(n1 * n2)] = 1
    s2 = np.zeros((n2, n1 * n2))
    s2[rows2, np.arange(n1 * n2)] = 1
    cons = [s1 @ q == p.sum(1), s2 @ q == p.sum(0)]
    if formulation == "aux":
        t = cp.Variable((n1 * n2, 1), nonneg=True)
        cons.append(cp.sum(q, axis=1, keepdims=True) == t)
        q12 = t @ np.ones((1, c))
    else:
        q12 = cp.sum(q, axis=1, keepdims=True) @ np.ones((1, c))
    prob = cp.Problem(cp.Maximize(cp.sum(-cp.rel_entr(q, q12))), cons)
    if solver is None:
        solver = "CLARABEL" if "CLARABEL" in cp.installed_solvers() else None
    opts: dict[str, Any] = {}
    if time_limit is not None:
        if solver != "CLARABEL":
            raise ValueError(f"time_limit needs the CLARABEL solver, got solver={solver!r}")
        opts["time_limit"] = float(time_limit)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():  # reported through the returned "status" instead
            warnings.filterwarnings("ignore", "Solution may be inaccurate", UserWarning)
            prob.solve(solver=solver, **opts)
    except cp.error.SolverError:
        if time_limit is None:
            raise
    solve_s = time.perf_counter() - t0
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or q.value is None:
        if time_limit is not None and solve_s >= 0.9 * time_limit:
            nan = math.nan
            return {"R": nan, "U1": nan, "U2": nan, "S": nan, "status": "time_limit", "solve_s": solve_s}
        raise RuntimeError(f"BROJA solve failed with status {prob.status!r}")
    qs = np.clip(np.asarray(q.value), 0, None).reshape(n1, n2, c)
    qs /= qs.sum()
    i1, i2 = _mi(p, (0,)), _mi(p, (1,))
    i12_p, i12_q = _mi(p, (0, 1)), _mi(qs, (0, 1))
    u1 = i12_q - _mi(qs, (1,))  # I_q(X1; Y | X2) = I_q(X1, X2; Y) - I_q(X2; Y), and I_q(X2; Y) = I_p(X2; Y)
    r = i1 - u1
    return {"R": r, "U1": u1, "U2": i2 - r, "S": i12_p - i12_q, "status": str(prob.status), "solve_s": solve_s}


def broja_cvx(
    x1: Any,
    x2: Any,
    y: Any,
    k: int = 10,
    n_classes: int | None = None,
    seed: int = 0,
    solver: str | None = None,
    formulation: str = "aux",
    time_limit: float | None = None,
) -> dict[str, Any]:
    """PID-CVX on continuous features: K-means (k clusters) per modality, histogram, :func:`broja_discrete`
    (whose ``formulation`` and ``time_limit`` are passed on)."""
    from sklearn.cluster import KMeans

    x1, x2, y = np.asarray(x1), np.asarray(x2), np.asarray(y).astype(int)
    if not (len(x1) == len(x2) == len(y)):
        raise ValueError(f"x1, x2 and y must have the same length, got {len(x1)}, {len(x2)} and {len(y)}")
    k = check_int("k", k, min=1, max=len(x1))
    c = int(n_classes or y.max() + 1)
    a = KMeans(k, n_init=1, random_state=seed).fit_predict(x1.reshape(len(x1), -1))
    b = KMeans(k, n_init=1, random_state=seed).fit_predict(x2.reshape(len(x2), -1))
    hist = np.zeros((k, k, c))
    np.add.at(hist, (a, b, y), 1.0)
    return broja_discrete(hist, solver, formulation, time_limit)
