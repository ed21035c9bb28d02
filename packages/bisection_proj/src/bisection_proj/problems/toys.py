"""Two-dimensional θ-parametrised sets (the paper's toy examples, official ``toy_utils.py``): a non-convex
quadratic set, a union of four balls (possibly disconnected) and a ring (not simply connected, out of reach of
homeomorphic projection).

The toys live directly in R²: ``scale`` and ``complete`` are the identity (the :class:`Problem` defaults) and the
IPNN is used without sigmoid.
The objective is the distance to a θ-independent target point (only needed for completeness).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bisection_proj.problems.base import Problem

__all__ = ["ToyProblem", "QuadraticSet", "UnionOfBalls", "Ring"]


class ToyProblem(Problem):
    """Identity scale and completion in R² (the :class:`Problem` defaults), no equalities."""

    # buffers (registered in __init__), declared for the type checker
    theta_low: Tensor
    theta_high: Tensor
    target: Tensor

    z_dim = 2
    y_dim = 2

    def __init__(self, theta_low: list[float], theta_high: list[float], dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.theta_dim = len(theta_low)
        self.register_buffer("theta_low", torch.tensor(theta_low, dtype=dtype))
        self.register_buffer("theta_high", torch.tensor(theta_high, dtype=dtype))
        self.register_buffer("target", torch.tensor([2.0, 2.0], dtype=dtype))

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        return ((y - self.target) ** 2).sum(-1)


class QuadraticSet(ToyProblem):
    """±x ± y <= θ_{2..5}, y <= θ_6·x² + θ_0, y >= −θ_7·x² − θ_1 with θ ∈ [0.2, 2]^8 (non-convex; 0 is interior)."""

    n_ineq = 6

    def __init__(self, dtype: torch.dtype = torch.float64) -> None:
        super().__init__([0.2] * 8, [2.0] * 8, dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        u, v = y[..., 0], y[..., 1]
        t = theta
        g = torch.stack(
            [
                u + v - t[..., 2],
                u - v - t[..., 3],
                -u + v - t[..., 4],
                -u - v - t[..., 5],
                v - t[..., 6] * u**2 - t[..., 0],
                -v - t[..., 7] * u**2 - t[..., 1],
            ],
            dim=-1,
        )
        return g.clamp_min(0)


class UnionOfBalls(ToyProblem):
    """The union of four balls: θ = (c_1, ..., c_4 ∈ [-1, 1]², r_1, ..., r_4 ∈ [0.5, 0.7]); one constraint,
    min_k (‖y − c_k‖ − r_k) <= 0. The union may be disconnected."""

    n_ineq = 1
    n_balls = 4

    def __init__(self, dtype: torch.dtype = torch.float64) -> None:
        super().__init__([-1.0] * 8 + [0.5] * 4, [1.0] * 8 + [0.7] * 4, dtype)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        centres = theta[..., :8].reshape(*theta.shape[:-1], 4, 2)
        radii = theta[..., 8:]
        gap = (y.unsqueeze(-2) - centres).norm(dim=-1) - radii
        return gap.amin(-1, keepdim=True).clamp_min(0)


class Ring(ToyProblem):
    """r_in <= ‖y − c‖ <= r_out with centre θ = c ∈ [-0.5, 0.5]² (defaults r_in = 0.5, r_out = 1)."""

    n_ineq = 2

    def __init__(self, r_in: float = 0.5, r_out: float = 1.0, dtype: torch.dtype = torch.float64) -> None:
        if not 0 <= r_in < r_out:
            raise ValueError(f"Ring needs 0 <= r_in < r_out (a non-empty interior), got r_in={r_in}, r_out={r_out}")
        super().__init__([-0.5, -0.5], [0.5, 0.5], dtype)
        self.r_in, self.r_out = float(r_in), float(r_out)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        r = (y - theta).norm(dim=-1)
        return torch.stack([(self.r_in - r).clamp_min(0), (r - self.r_out).clamp_min(0)], dim=-1)
