"""A polytope {y : G y <= h + θ, L <= y <= U} in R^d with the identity scale and completion
(the :class:`Problem` defaults): the simplest θ-parametrised set, with an exact projection by cvxpy for tests and
baselines.

Bisection projection needs sets with a non-empty interior (paper Sec. 2: compact with an interior point), so the
constructor refuses a polytope whose smallest member (θ = −theta_range on every row, contained in every other)
has none: its Chebyshev ball (the largest inscribed ball, one LP by ``scipy.optimize.linprog``) must have a
positive radius."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_float, check_int

__all__ = ["Polytope"]


class Polytope(Problem):
    """G y <= h + θ (θ ∈ [−theta_range, theta_range]^p shifts the right-hand sides) and a box L <= y <= U."""

    # buffers (registered in __init__), declared for the type checker
    G: Tensor
    h: Tensor
    theta_low: Tensor
    theta_high: Tensor

    def __init__(self, g: Tensor | np.ndarray, h: Tensor | np.ndarray, lower: float = -1.0, upper: float = 1.0,
                 theta_range: float = 0.0, dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__()
        g, h = torch.as_tensor(g, dtype=dtype), torch.as_tensor(h, dtype=dtype)
        if g.dim() != 2 or h.shape != (g.shape[0],):
            raise ValueError(f"g must be (p, d) and h (p,), got {tuple(g.shape)} and {tuple(h.shape)}")
        lower, upper = check_float("lower", lower), check_float("upper", upper)
        theta_range = check_float("theta_range", theta_range, min=0.0)
        if not lower < upper:  # type: ignore[operator]
            raise ValueError(f"lower must be < upper, got {lower} and {upper}")
        if not torch.isfinite(g).all() or not torch.isfinite(h).all():
            raise ValueError("g and h must be finite, got NaN/inf entries")
        self.theta_dim, self.z_dim, self.y_dim = g.shape[0], g.shape[1], g.shape[1]
        self.n_ineq = g.shape[0] + 2 * g.shape[1]
        self.lower, self.upper = float(lower), float(upper)
        self.register_buffer("G", g)
        self.register_buffer("h", h)
        self.register_buffer("theta_low", torch.full((g.shape[0],), -float(theta_range), dtype=dtype))
        self.register_buffer("theta_high", torch.full((g.shape[0],), float(theta_range), dtype=dtype))
        radius = self.inscribed_radius()
        if not radius > 0:
            raise ValueError(
                f"the polytope has no interior at theta = -theta_range = {-float(theta_range) + 0.0} (the smallest "
                f"set of the family): its largest inscribed ball has radius {radius:.3g}; bisection projection needs "
                "an interior point (loosen h, the box or theta_range)"
            )

    def inscribed_radius(self, theta: Tensor | None = None) -> float:
        """Radius of the largest ball inside the set at ``theta`` (p,) (default: θ = −theta_range, the smallest
        set): max s s.t. g_i·y + ‖g_i‖ s <= h_i + θ_i, L + s <= y_j <= U − s. Negative (or -inf) when the set
        is empty."""
        from scipy.optimize import linprog

        g = self.G.detach().cpu().double().numpy()
        th = self.theta_low if theta is None else theta
        b = self.h.detach().cpu().double().numpy() + th.detach().cpu().double().numpy()
        d, eye = self.y_dim, np.eye(self.y_dim)
        norms = np.linalg.norm(g, axis=1, keepdims=True)
        a_ub = np.block([[g, norms], [eye, np.ones((d, 1))], [-eye, np.ones((d, 1))]])
        b_ub = np.concatenate([b, np.full(d, self.upper), np.full(d, -self.lower)])
        c = np.zeros(d + 1)
        c[-1] = -1.0  # maximise s
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * (d + 1), method="highs")
        return float(-res.fun) if res.status == 0 else -math.inf

    @classmethod
    def random(cls, d: int = 4, n_rows: int = 8, seed: int = 0, margin: tuple[float, float] = (0.2, 1.0),
               dtype: torch.dtype = torch.float64) -> Polytope:  # fmt: skip
        """Rows g_i ~ N(0, I), h_i ~ U[margin]: the origin is interior with distance >= min h_i/‖g_i‖ to every
        face; box [-1, 1]^d. ``margin`` = (low, high) with 0 < low <= high."""
        d, n_rows = check_int("d", d, min=1), check_int("n_rows", n_rows, min=0)
        if not (isinstance(margin, (tuple, list)) and len(margin) == 2):
            raise ValueError(f"margin must be a pair (low, high) with 0 < low <= high, got {margin!r}")
        low = check_float("margin[0]", margin[0], min=0.0, min_open=True)
        high = check_float("margin[1]", margin[1], min=low)
        margin = (low, high)  # type: ignore[assignment]
        rng = np.random.default_rng(check_int("seed", seed, min=0))
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
        for i, (t, v) in enumerate(zip(theta.detach().cpu().double().numpy(), y.detach().cpu().double().numpy())):
            th.value, tgt.value = t, v
            prob.solve(solver=kw.get("solver", cp.CLARABEL))
            if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
                raise ValueError(f"the polytope is empty at theta[{i}] = {t.tolist()}: nothing to project onto")
            if prob.status != cp.OPTIMAL or var.value is None:
                raise RuntimeError(f"Polytope.project: the solver stopped with status {prob.status!r} at row {i}")
            out.append(np.asarray(var.value))
        return torch.as_tensor(np.stack(out), dtype=y.dtype, device=y.device)
