"""The PID-CVX baseline of Liang et al. (NeurIPS 2023): K-means per modality, a k x k x C histogram, and the BROJA
decomposition solved as a convex program (cvxpy; Clarabel when installed). Dataset level only."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["broja_discrete", "broja_cvx"]


def _mi(p: np.ndarray, axes_x: tuple[int, ...]) -> float:
    """I(X; Y) of a joint array whose last axis is Y and whose other listed axes form X (others summed out)."""
    keep = tuple(sorted(set(axes_x) | {p.ndim - 1}))
    drop = tuple(a for a in range(p.ndim) if a not in keep)
    pj = p.sum(axis=drop) if drop else p
    pj = pj.reshape(-1, p.shape[-1])
    px, py = pj.sum(1, keepdims=True), pj.sum(0, keepdims=True)
    m = pj > 0
    return float((pj[m] * np.log(pj[m] / (px @ py)[m])).sum())


def broja_discrete(P: Any, solver: str | None = None) -> dict[str, float]:
    """BROJA (R, U1, U2, S) in nats of a joint pmf P[x1, x2, y], by maximising H_q(Y | X1, X2) over the q with
    the same (x1, y) and (x2, y) marginals."""
    import cvxpy as cp

    p = np.asarray(P, dtype=np.float64)
    p = p / p.sum()
    n1, n2, c = p.shape
    q = cp.Variable((n1 * n2, c), nonneg=True)
    q12 = cp.sum(q, axis=1, keepdims=True) @ np.ones((1, c))
    cons = []
    rows1 = np.repeat(np.arange(n1), n2)  # row r = (a, b) with a = r // n2
    rows2 = np.tile(np.arange(n2), n1)
    s1 = np.zeros((n1, n1 * n2))
    s1[rows1, np.arange(n1 * n2)] = 1
    s2 = np.zeros((n2, n1 * n2))
    s2[rows2, np.arange(n1 * n2)] = 1
    cons += [s1 @ q == p.sum(1), s2 @ q == p.sum(0)]
    prob = cp.Problem(cp.Maximize(cp.sum(-cp.rel_entr(q, q12))), cons)
    if solver is None:
        solver = "CLARABEL" if "CLARABEL" in cp.installed_solvers() else None
    prob.solve(solver=solver)
    qs = np.clip(np.asarray(q.value), 0, None).reshape(n1, n2, c)
    qs /= qs.sum()
    i1, i2 = _mi(p, (0,)), _mi(p, (1,))
    i12_p, i12_q = _mi(p, (0, 1)), _mi(qs, (0, 1))
    u1 = i12_q - _mi(qs, (1,))  # I_q(X1; Y | X2) = I_q(X1, X2; Y) - I_q(X2; Y), and I_q(X2; Y) = I_p(X2; Y)
    r = i1 - u1
    return {"R": r, "U1": u1, "U2": i2 - r, "S": i12_p - i12_q}


def broja_cvx(
    x1: Any, x2: Any, y: Any, k: int = 10, n_classes: int | None = None, seed: int = 0, solver: str | None = None
) -> dict[str, float]:
    """PID-CVX on continuous features: K-means (k clusters) per modality, histogram, :func:`broja_discrete`."""
    from sklearn.cluster import KMeans

    x1, x2, y = np.asarray(x1), np.asarray(x2), np.asarray(y).astype(int)
    if not (len(x1) == len(x2) == len(y)):
        raise ValueError(f"x1, x2 and y must have the same length, got {len(x1)}, {len(x2)} and {len(y)}")
    c = int(n_classes or y.max() + 1)
    a = KMeans(k, n_init=1, random_state=seed).fit_predict(x1.reshape(len(x1), -1))
    b = KMeans(k, n_init=1, random_state=seed).fit_predict(x2.reshape(len(x2), -1))
    hist = np.zeros((k, k, c))
    np.add.at(hist, (a, b, y), 1.0)
    return broja_discrete(hist, solver)
