"""The post-processing peers the paper compares with: ``Proj`` (exact orthogonal projection) and ``WS`` (a solver
warm-started at the prediction) by cvxpy (``[baselines]`` extra), and ``D-Proj``, DC3's gradient correction on the
violation (Donti et al., 2021)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_finite, check_float, check_int

__all__ = ["cvxpy_projection", "warm_start", "dc3_correction"]


def cvxpy_projection(problem: Problem, theta: Tensor, y: Tensor, **solver_kw: Any) -> Tensor:
    """``Proj``: argmin ‖y' − y‖² over the feasible set of each θ, solved one instance at a time by cvxpy
    (Clarabel by default; the model is compiled once with θ and y as parameters)."""
    if y.dim() != 2 or y.shape[0] != theta.shape[0]:
        raise ValueError(f"y must have shape ({theta.shape[0]}, n), got {tuple(y.shape)}")
    check_finite("y", y)
    return problem.project(theta, y, **solver_kw)


def warm_start(problem: Problem, theta: Tensor, y: Tensor, solver: str = "OSQP", **solver_kw: Any) -> Tensor:
    """``WS``: solve the problem from the prediction as initial point (cvxpy ``warm_start``; OSQP by default,
    which uses it; Clarabel, an interior-point method, ignores it)."""
    if y.dim() != 2 or y.shape[0] != theta.shape[0]:
        raise ValueError(f"y must have shape ({theta.shape[0]}, n), got {tuple(y.shape)}")
    if not hasattr(problem, "_cvx_model"):
        return problem.solve(theta)
    import numpy as np

    prob, var, params = cast(Any, problem)._cvx_model("solve")  # the convex problems define it (checked above)
    out = []
    for t, v in zip(theta.detach().cpu().double().numpy(), y.detach().cpu().double().numpy()):
        params[0].value = t
        var.value = v
        prob.solve(solver=solver, warm_start=True, **solver_kw)
        if var.value is None:
            raise RuntimeError(f"warm_start: solver status {prob.status!r}")
        out.append(np.asarray(var.value))
    return torch.as_tensor(np.stack(out), dtype=y.dtype, device=y.device)


def dc3_correction(problem: Problem, theta: Tensor, z: Tensor, steps: int = 30, lr: float = 1e-3,
                   momentum: float = 0.5, tol: float = 1e-5) -> Tensor:  # fmt: skip
    """``D-Proj``: DC3's correction, gradient descent with momentum on ½‖ineq_violation(θ, complete(θ, scale(z)))‖²
    over the normalised partial variables z (B, d); equalities stay exact through completion. No feasibility
    guarantee. Rows stop moving once feasible. Returns the corrected z."""
    steps = check_int("steps", steps, min=0)
    lr = check_float("lr", lr, min=0.0, min_open=True)
    momentum = check_float("momentum", momentum, min=0.0, max=1.0, max_open=True)
    problem.check_theta(theta)
    check_finite("z", z)
    theta = theta.to(z.dtype)
    z = z.detach().clone()
    vel = torch.zeros_like(z)
    for _ in range(steps):
        zz = z.requires_grad_(True)
        with torch.enable_grad():
            v = problem.z_violation(theta, zz)
            g = torch.autograd.grad(0.5 * (v**2).sum(), zz)[0]
        with torch.no_grad():
            active = (v.detach().amax(-1) > tol).unsqueeze(-1).to(z.dtype)
            vel = momentum * vel + g * active
            z = (z - lr * vel).detach()
    return z.detach()
