"""Joint chance-constrained inventory management (JCCIM): one of the paper's test problems with a
non-convex feasible set.

min pᵀy s.t. A y >= θ + w_s for at least a share q of the S scenarios w_s ~ 0.1·U[0, 1], G y <= h, 0 <= y <= U.
The chance constraint holds exactly when the ⌈qS⌉-th smallest scenario deficit max_i (θ_i + w_si − (Ay)_i) is
<= 0; that order statistic, clamped at 0, is the violation (piecewise linear, so it also gives the IPNN a
gradient). Labels come from the robust LP (all scenarios), so they are conservative, as in the paper.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_float, check_int

__all__ = ["JCCIM"]


class JCCIM(Problem):
    """θ ∈ [-1, 1]^{n_eq} are the demands of the n_eq jointly chance-constrained rows (there are no equalities:
    the network predicts all n variables, normalised by the box)."""

    # buffers (registered in __init__), declared for the type checker
    p: Tensor
    A: Tensor
    G: Tensor
    h: Tensor
    W: Tensor
    theta_low: Tensor
    theta_high: Tensor

    def __init__(self, p: np.ndarray, a: np.ndarray, g: np.ndarray, h: np.ndarray, w: np.ndarray, ub: float,
                 q: float = 0.9, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__()
        q = check_float("q", q, min=0.0, max=1.0, min_open=True)
        n_rows, n = a.shape
        self.theta_dim, self.z_dim, self.y_dim = n_rows, n, n
        self.q, self.ub = float(q), float(ub)
        self.n_scenarios = w.shape[0]
        self.k = math.ceil(self.q * self.n_scenarios - 1e-9)
        self.n_ineq = 1 + g.shape[0] + 2 * n
        t = lambda arr: torch.as_tensor(np.asarray(arr), dtype=dtype)  # noqa: E731
        for name, arr in (("p", p), ("A", a), ("G", g), ("h", h), ("W", w)):
            self.register_buffer(name, t(arr))
        self.register_buffer("theta_low", t(-np.ones(n_rows)))
        self.register_buffer("theta_high", t(np.ones(n_rows)))

    @classmethod
    def random(cls, n: int = 50, n_eq: int = 25, n_ineq: int = 25, seed: int = 2023, n_scenarios: int = 100,
               q: float = 0.9, dtype: torch.dtype = torch.float64) -> JCCIM:  # fmt: skip
        """p, A, G ~ U[0, 1]; the uniform order y = c·1 with c = 1.5 / min_i Σ_j A_ij meets every scenario;
        h = 1.5·G·(c·1) and the box U = 3c keep it strictly inside."""
        n = check_int("n", n, min=1)
        n_eq = check_int("n_eq", n_eq, min=1)
        n_ineq = check_int("n_ineq", n_ineq, min=0)
        n_scenarios = check_int("n_scenarios", n_scenarios, min=1)
        rng = np.random.default_rng(check_int("seed", seed, min=0))
        p = rng.uniform(0, 1, n)
        a = rng.uniform(0, 1, (n_eq, n))
        g = rng.uniform(0, 1, (n_ineq, n))
        w = 0.1 * rng.uniform(0, 1, (n_scenarios, n_eq))
        row = a.sum(1).min()
        if row <= 0:
            raise ValueError("the generated A has an all-zero row: the chance constraint cannot be met")
        c = 1.5 / row
        h = 1.5 * g @ np.full(n, c)
        return cls(p, a, g, h, w, 3 * c, q, dtype)

    def scale(self, theta: Tensor, z: Tensor) -> Tensor:
        return z * self.ub

    def unscale(self, theta: Tensor, x: Tensor) -> Tensor:
        return x / self.ub

    def scenario_deficit(self, theta: Tensor, y: Tensor) -> Tensor:
        """(B, S): max_i (θ_i + w_si − (Ay)_i); scenario s is met when <= 0."""
        ay = y @ self.A.T  # (B, n_eq)
        return (theta.unsqueeze(-2) + self.W - ay.unsqueeze(-2)).amax(-1)

    def satisfied_share(self, theta: Tensor, y: Tensor) -> Tensor:
        """Share of scenarios met (B,)."""
        return (self.scenario_deficit(theta, y) <= 0).to(y.dtype).mean(-1)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        chance = self.scenario_deficit(theta, y).kthvalue(self.k, dim=-1).values.clamp_min(0)
        lin = (y @ self.G.T - self.h).clamp_min(0)
        box = torch.cat([(y - self.ub).clamp_min(0), (-y).clamp_min(0)], dim=-1)
        return torch.cat([chance.unsqueeze(-1), lin, box], dim=-1)

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        return y @ self.p

    def _robust(self, theta: np.ndarray, target: np.ndarray | None) -> np.ndarray:
        import cvxpy as cp

        a, g, h, p, w = (t.detach().cpu().double().numpy() for t in (self.A, self.G, self.h, self.p, self.W))
        y = cp.Variable(self.y_dim)
        cons = [a @ y >= theta + w.max(0), g @ y <= h, y >= 0, y <= self.ub]
        obj = p @ y if target is None else cp.sum_squares(y - target)
        prob = cp.Problem(cp.Minimize(obj), cons)
        prob.solve(solver=cp.CLARABEL)
        if y.value is None:
            raise RuntimeError(f"JCCIM robust LP: solver status {prob.status!r}")
        return np.asarray(y.value)

    def solve(self, theta: Tensor, **kw: Any) -> Tensor:
        """Robust-LP solutions (all scenarios met): feasible, conservative labels."""
        self.check_theta(theta)
        th = theta.detach().cpu().double().numpy()
        return torch.as_tensor(np.stack([self._robust(t, None) for t in th]), dtype=theta.dtype, device=theta.device)

    def project(self, theta: Tensor, y: Tensor, **kw: Any) -> Tensor:
        """Projection onto the robust (convex, inner) set: feasible but not the exact projection onto the
        non-convex chance-constrained set."""
        self.check_theta(theta)
        th, yy = theta.detach().cpu().double().numpy(), y.detach().cpu().double().numpy()
        out = np.stack([self._robust(t, v) for t, v in zip(th, yy)])
        return torch.as_tensor(out, dtype=y.dtype, device=y.device)
