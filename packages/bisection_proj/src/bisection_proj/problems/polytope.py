"""A polytope {y : G y <= h + θ, L <= y <= U} in R^d with the identity scale and completion
(the :class:`Problem` defaults): the simplest θ-parametrised set, with an exact projection by cvxpy for tests and
baselines."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_int

__all__ = ["Polytope"]


class Polytope(Problem):
    """G y <= h + θ (θ ∈ [−theta_range, theta_range]^p shifts the right-hand sides) and a box L <= y <= U."""

    def __init__(self, g: Tensor | np.ndarray, h: Tensor | np.ndarray, lower: float = -1.0, upper: float = 1.0,
                 theta_range: float = 0.0, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__()
        g, h = torch.as_tensor(g, dtype=dtype), torch.as_tensor(h, dtype=dtype)
        if g.dim() != 2 or h.shape != (g.shape[0],):
            raise ValueError(f"g must be (p, d) and h (p,), got {tuple(g.shape)} and {tuple(h.shape)}")
        if not lower < upper:
            raise ValueError(f"lower must be < upper, got {lower} and {upper}")
        self.theta_dim, self.z_dim, self.y_dim = g.shape[0], g.shape[1], g.shape[1]
        self.n_ineq = g.shape[0] + 2 * g.shape[1]
        self.lower, self.upper = float(lower), float(upper)
        self.register_buffer("G", g)
        self.register_buffer("h", h)
        self.register_buffer("theta_low", torch.full((g.shape[0],), -float(theta_range), dtype=dtype))
        self.register_buffer("theta_high", torch.full((g.shape[0],), float(theta_range), dtype=dtype))

    @classmethod
    def random(cls, d: int = 4, n_rows: int = 8, seed: int = 0, margin: tuple[float, float] = (0.2, 1.0),
               dtype: torch.dtype = torch.float64) -> Polytope:  # fmt: skip
        """Rows g_i ~ N(0, I), h_i ~ U[margin]: the origin is interior with distance >= min h_i/‖g_i‖ to every
        face; box [-1, 1]^d."""
        d, n_rows = check_int("d", d, min=1), check_int("n_rows", n_rows, min=0)
        rng = np.random.default_rng(seed)
        return cls(rng.standard_normal((n_rows, d)), rng.uniform(*margin, n_rows), dtype=dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        lin = y @ self.G.T - self.h - theta
        return torch.cat([lin, y - self.upper, self.lower - y], dim=-1).clamp_min(0)

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        return y.sum(-1)

    def project(self, theta: Tensor, y: Tensor, **kw: Any) -> Tensor:
        import cvxpy as cp

        self.check_theta(theta)
        g, h = self.G.detach().cpu().double().numpy(), self.h.detach().cpu().double().numpy()
        var, th, tgt = cp.Variable(self.y_dim), cp.Parameter(self.theta_dim), cp.Parameter(self.y_dim)
        cons = [g @ var <= h + th, var >= self.lower, var <= self.upper]
        prob = cp.Problem(cp.Minimize(cp.sum_squares(var - tgt)), cons)
        out = []
        for t, v in zip(theta.detach().cpu().double().numpy(), y.detach().cpu().double().numpy()):
            th.value, tgt.value = t, v
            prob.solve(solver=kw.get("solver", cp.CLARABEL))
            out.append(np.asarray(var.value))
        return torch.as_tensor(np.stack(out), dtype=y.dtype, device=y.device)
