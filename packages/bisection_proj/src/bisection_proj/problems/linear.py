"""Problems with linear equalities A y = θ (the paper's convex test problems): convex QP, convex QCQP and SOCP.

Generators follow the official ones (seeded numpy, entries ~ U[-1, 1], θ ~ U[-1, 1]^{n_eq}); the inequality
right-hand sides are chosen so that the analytic point y = pinv(A)·θ is feasible for every θ in the cube.
Equality completion (DC3): the network predicts the partial variables x = y_partial; the others follow from
y_other = A_other⁻¹ (θ − A_partial·x). Everything is precomputed as one affine map y = x·P_x + θ·P_θ.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_float, check_int

__all__ = ["LinearEqualityProblem", "ConvexQP", "ConvexQCQP", "SOCP", "choose_partial_variables"]

log = logging.getLogger(__name__)


def choose_partial_variables(a: np.ndarray, rng: np.random.Generator, n_subsets: int = 1000) -> np.ndarray:
    """Indices of the n_eq "other" variables: among ``n_subsets`` random subsets keep the one whose A_other has
    the largest log|det| (official generator), so that the completion is well conditioned."""
    n_eq, n = a.shape
    best, best_val = None, -np.inf
    for _ in range(n_subsets):
        idx = np.sort(rng.choice(n, n_eq, replace=False))
        sign, logdet = np.linalg.slogdet(a[:, idx])
        if sign != 0 and logdet > best_val:
            best, best_val = idx, logdet
    if best is None:
        raise ValueError("no invertible square sub-matrix of A was found: the equalities cannot be completed")
    return best


def _check_sizes(n: Any, n_eq: Any, n_ineq: Any) -> tuple[int, int, int]:
    n = check_int("n", n, min=1)
    n_eq = check_int("n_eq", n_eq, min=1)
    n_ineq = check_int("n_ineq", n_ineq, min=0)
    if n_eq >= n:
        raise ValueError(f"n_eq must be smaller than n (there must be partial variables), got n_eq={n_eq}, n={n}")
    return n, n_eq, n_ineq


class LinearEqualityProblem(Problem):
    """Shared part of the problems with ``A y = θ``, a box ``L <= y <= U`` and θ ∈ [-1, 1]^{n_eq}."""

    # buffers (registered in __init__), declared for the type checker
    A: Tensor
    P_x: Tensor
    P_theta: Tensor
    partial_idx: Tensor
    other_idx: Tensor
    L: Tensor
    U: Tensor
    theta_low: Tensor
    theta_high: Tensor

    def __init__(self, a: np.ndarray, box: float, other: np.ndarray, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        n_eq, n = a.shape
        partial = np.setdiff1d(np.arange(n), other)
        a_o_inv = np.linalg.inv(a[:, other])
        p_x = np.zeros((n - n_eq, n))
        p_x[np.arange(n - n_eq), partial] = 1.0
        p_x[:, other] = -(a_o_inv @ a[:, partial]).T
        p_theta = np.zeros((n_eq, n))
        p_theta[:, other] = a_o_inv.T
        self.theta_dim, self.z_dim, self.y_dim, self.n_eq = n_eq, n - n_eq, n, n_eq
        self.box = float(box)
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=dtype)  # noqa: E731
        self.register_buffer("A", t(a))
        self.register_buffer("P_x", t(p_x))
        self.register_buffer("P_theta", t(p_theta))
        self.register_buffer("partial_idx", torch.as_tensor(partial, dtype=torch.long))
        self.register_buffer("other_idx", torch.as_tensor(np.asarray(other), dtype=torch.long))
        self.register_buffer("L", t(np.full(n, -box)))
        self.register_buffer("U", t(np.full(n, box)))
        self.register_buffer("theta_low", t(-np.ones(n_eq)))
        self.register_buffer("theta_high", t(np.ones(n_eq)))
        self._cvx: dict[str, Any] = {}

    # affine scale and completion ----------------------------------------------------------------------------------
    def scale(self, theta: Tensor, z: Tensor) -> Tensor:
        lo, hi = self.L[self.partial_idx], self.U[self.partial_idx]
        return z * (hi - lo) + lo

    def unscale(self, theta: Tensor, x: Tensor) -> Tensor:
        lo, hi = self.L[self.partial_idx], self.U[self.partial_idx]
        return (x - lo) / (hi - lo)

    def complete(self, theta: Tensor, x: Tensor) -> Tensor:
        return x @ self.P_x + theta @ self.P_theta

    def partial(self, y: Tensor) -> Tensor:
        return y[..., self.partial_idx]

    def eq_residual(self, theta: Tensor, y: Tensor) -> Tensor:
        return y @ self.A.T - theta

    def box_violation(self, y: Tensor) -> Tensor:
        return torch.cat([(y - self.U).clamp_min(0), (self.L - y).clamp_min(0)], dim=-1)

    def analytic_interior(self, theta: Tensor) -> Tensor:
        """The full point y = pinv(A)·θ, feasible for every θ in the cube by construction of the generator."""
        return theta @ torch.linalg.pinv(self.A).T

    # cvxpy models (built once, DPP-parametrised in θ and the point to project) ----------------------------------------
    def _cvx_constraints(self, y: Any) -> list[Any]:
        raise NotImplementedError

    def _cvx_objective(self, y: Any) -> Any:
        raise NotImplementedError

    def _cvx_model(self, kind: str) -> Any:
        if kind in self._cvx:
            return self._cvx[kind]
        import cvxpy as cp

        y = cp.Variable(self.y_dim)
        theta = cp.Parameter(self.theta_dim)
        a = self.A.detach().cpu().double().numpy()
        cons = [a @ y == theta, y >= -self.box, y <= self.box, *self._cvx_constraints(y)]
        if kind == "solve":
            prob = cp.Problem(cp.Minimize(self._cvx_objective(y)), cons)
            params = (theta,)
        else:
            target = cp.Parameter(self.y_dim)
            prob = cp.Problem(cp.Minimize(cp.sum_squares(y - target)), cons)
            params = (theta, target)
        self._cvx[kind] = (prob, y, params)
        return self._cvx[kind]

    def _cvx_run(self, kind: str, values: list[np.ndarray], solver: str | None = None, **kw: Any) -> np.ndarray:
        import cvxpy as cp

        prob, y, params = self._cvx_model(kind)
        for p, v in zip(params, values):
            p.value = v
        prob.solve(solver=solver or cp.CLARABEL, **kw)
        if y.value is None or prob.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"{type(self).__name__}.{kind}: the solver returned status {prob.status!r}")
        return np.asarray(y.value)

    def solve(self, theta: Tensor, solver: str | None = None, **kw: Any) -> Tensor:
        """Optimal y* (B, n) by cvxpy (Clarabel by default), one instance at a time."""
        self.check_theta(theta)
        th = theta.detach().cpu().double().numpy()
        out = np.stack([self._cvx_run("solve", [t], solver, **kw) for t in th])
        return torch.as_tensor(out, dtype=theta.dtype, device=theta.device)

    def project(self, theta: Tensor, y: Tensor, solver: str | None = None, **kw: Any) -> Tensor:
        """Orthogonal projection argmin ‖y' − y‖² over the feasible set (B, n), one instance at a time."""
        self.check_theta(theta)
        th = theta.detach().cpu().double().numpy()
        yy = y.detach().cpu().double().numpy()
        out = np.stack([self._cvx_run("project", [t, v], solver, **kw) for t, v in zip(th, yy)])
        return torch.as_tensor(out, dtype=y.dtype, device=y.device)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cvx"] = {}
        return state


def _generate_linear(n: int, n_eq: int, seed: int, box: float, n_subsets: int):
    seed = check_int("seed", seed, min=0)
    box = check_float("box", box, min=0.0, min_open=True)
    check_int("n_subsets", n_subsets, min=1)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n_eq, n))
    pinv = np.linalg.pinv(a)
    reach = np.abs(pinv).sum(axis=1)  # max |y_i| of pinv(A)θ over the cube
    if not box > reach.max():
        raise ValueError(
            f"box={box} is too small: the analytic interior point pinv(A)·θ reaches |y_i| = {reach.max():.3g} for "
            f"θ in the cube, so the feasible set may be empty for some θ; use box > {reach.max():.3g}"
        )
    return rng, a, pinv


class ConvexQP(LinearEqualityProblem):
    """min ½ yᵀQy + pᵀy s.t. A y = θ, G y <= h, L <= y <= U (Q diagonal)."""

    # buffers (registered in __init__), declared for the type checker
    Q: Tensor
    p: Tensor
    G: Tensor
    h: Tensor

    def __init__(self, q: np.ndarray, p: np.ndarray, a: np.ndarray, g: np.ndarray, h: np.ndarray, box: float,
                 other: np.ndarray, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__(a, box, other, dtype)
        self.register_buffer("Q", torch.as_tensor(q, dtype=dtype))
        self.register_buffer("p", torch.as_tensor(p, dtype=dtype))
        self.register_buffer("G", torch.as_tensor(g, dtype=dtype))
        self.register_buffer("h", torch.as_tensor(h, dtype=dtype))
        self.n_ineq = g.shape[0] + 2 * self.y_dim

    @classmethod
    def random(cls, n: int = 100, n_eq: int = 50, n_ineq: int = 50, seed: int = 2023, box: float = 3.0,
               n_subsets: int = 1000, dtype: torch.dtype = torch.float64) -> ConvexQP:  # fmt: skip
        """The official generator: Q = diag(U[0,1])·0.5, p, A, G ~ U[-1,1], h_i = Σ_j |(G·pinv(A))_ij|."""
        n, n_eq, n_ineq = _check_sizes(n, n_eq, n_ineq)
        rng, a, pinv = _generate_linear(n, n_eq, seed, box, n_subsets)
        q = rng.uniform(0, 1, n) * 0.5
        p = rng.uniform(-1, 1, n)
        g = rng.uniform(-1, 1, (n_ineq, n))
        h = np.abs(g @ pinv).sum(axis=1)
        other = choose_partial_variables(a, rng, n_subsets)
        return cls(q, p, a, g, h, box, other, dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        return torch.cat([(y @ self.G.T - self.h).clamp_min(0), self.box_violation(y)], dim=-1)

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        return 0.5 * (y * y * self.Q).sum(-1) + y @ self.p

    def _cvx_constraints(self, y: Any) -> list[Any]:
        return [self.G.detach().cpu().double().numpy() @ y <= self.h.detach().cpu().double().numpy()]

    def _cvx_objective(self, y: Any) -> Any:
        import cvxpy as cp

        q = self.Q.detach().cpu().double().numpy()
        return 0.5 * cp.sum(cp.multiply(q, cp.square(y))) + self.p.detach().cpu().double().numpy() @ y


class ConvexQCQP(ConvexQP):
    """The QP with Gy <= h replaced by ½ yᵀH_i y + G_iᵀy <= h_i, H_i = diag(U[0, 0.1])."""

    # buffers (registered in __init__), declared for the type checker
    H: Tensor

    def __init__(self, q: np.ndarray, p: np.ndarray, a: np.ndarray, g: np.ndarray, h: np.ndarray, hq: np.ndarray,
                 box: float, other: np.ndarray, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__(q, p, a, g, h, box, other, dtype)
        self.register_buffer("H", torch.as_tensor(hq, dtype=dtype))  # (n_ineq, n): the diagonals of H_i

    @classmethod
    def random(cls, n: int = 100, n_eq: int = 50, n_ineq: int = 50, seed: int = 2023, box: float = 3.0,
               n_subsets: int = 1000, dtype: torch.dtype = torch.float64) -> ConvexQCQP:  # fmt: skip
        """h_i = Σ_j |(G·pinv(A))_ij| + ½ Σ_k H_ik (Σ_j |pinv(A)_kj|)², so that pinv(A)·θ is feasible."""
        n, n_eq, n_ineq = _check_sizes(n, n_eq, n_ineq)
        rng, a, pinv = _generate_linear(n, n_eq, seed, box, n_subsets)
        q = rng.uniform(0, 1, n) * 0.5
        p = rng.uniform(-1, 1, n)
        g = rng.uniform(-1, 1, (n_ineq, n))
        hq = rng.uniform(0, 0.1, (n_ineq, n))
        reach = np.abs(pinv).sum(axis=1)
        h = np.abs(g @ pinv).sum(axis=1) + 0.5 * hq @ reach**2
        other = choose_partial_variables(a, rng, n_subsets)
        return cls(q, p, a, g, h, hq, box, other, dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        quad = 0.5 * (y * y) @ self.H.T + y @ self.G.T - self.h
        return torch.cat([quad.clamp_min(0), self.box_violation(y)], dim=-1)

    def _cvx_constraints(self, y: Any) -> list[Any]:
        import cvxpy as cp

        hq, g, h = (t.detach().cpu().double().numpy() for t in (self.H, self.G, self.h))
        return [0.5 * (hq @ cp.square(y)) + g @ y <= h]


class SOCP(ConvexQP):
    """The QP objective with second-order cones ‖G_i y + h_i‖₂ <= c_iᵀy + d_i (G_i of shape (cone_dim, n))."""

    # buffers (registered in __init__), declared for the type checker
    c: Tensor
    d: Tensor

    def __init__(self, q: np.ndarray, p: np.ndarray, a: np.ndarray, g: np.ndarray, h: np.ndarray, c: np.ndarray,
                 d: np.ndarray, box: float, other: np.ndarray, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__(q, p, a, g.reshape(-1, a.shape[1]), h.reshape(-1), box, other, dtype)
        self.G = torch.as_tensor(g, dtype=dtype)  # (n_ineq, cone_dim, n)
        self.h = torch.as_tensor(h, dtype=dtype)  # (n_ineq, cone_dim)
        self.register_buffer("c", torch.as_tensor(c, dtype=dtype))
        self.register_buffer("d", torch.as_tensor(d, dtype=dtype))
        self.n_ineq = g.shape[0] + 2 * self.y_dim

    @classmethod
    def random(cls, n: int = 100, n_eq: int = 50, n_ineq: int = 50, seed: int = 2023, box: float = 3.0,
               cone_dim: int = 4, n_subsets: int = 1000, dtype: torch.dtype = torch.float64) -> SOCP:  # fmt: skip
        """G_i, h_i, c_i ~ U[-1, 1]; d_i = ‖h_i‖ + Σ_j ‖(G_i·pinv(A))_:j‖ + Σ_j |(c_iᵀ·pinv(A))_j| bounds the
        cone residual of pinv(A)·θ over the cube, so that point is feasible for every θ (the official generator
        instead puts one random point on the boundary, which gives no guarantee for a parametric θ)."""
        n, n_eq, n_ineq = _check_sizes(n, n_eq, n_ineq)
        cone_dim = check_int("cone_dim", cone_dim, min=1)
        rng, a, pinv = _generate_linear(n, n_eq, seed, box, n_subsets)
        q = rng.uniform(0, 1, n) * 0.5
        p = rng.uniform(-1, 1, n)
        g = rng.uniform(-1, 1, (n_ineq, cone_dim, n))
        h = rng.uniform(-1, 1, (n_ineq, cone_dim))
        c = rng.uniform(-1, 1, (n_ineq, n))
        gp = g @ pinv  # (n_ineq, cone_dim, n_eq)
        d = np.linalg.norm(h, axis=1) + np.linalg.norm(gp, axis=1).sum(1) + np.abs(c @ pinv).sum(1)
        other = choose_partial_variables(a, rng, n_subsets)
        return cls(q, p, a, g, h, c, d, box, other, dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        lhs = (torch.einsum("ikn,bn->bik", self.G, y) + self.h).norm(dim=-1)
        cone = (lhs - y @ self.c.T - self.d).clamp_min(0)
        return torch.cat([cone, self.box_violation(y)], dim=-1)

    def _cvx_constraints(self, y: Any) -> list[Any]:
        import cvxpy as cp

        g, h, c, d = (t.detach().cpu().double().numpy() for t in (self.G, self.h, self.c, self.d))
        return [cp.SOC(c[i] @ y + d[i], g[i] @ y + h[i]) for i in range(g.shape[0])]
