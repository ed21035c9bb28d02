"""The paper's evaluation metrics (feasibility rate, optimality gap, projection distance) and the eccentricity of
interior points (paper Def. 4.1)."""

from __future__ import annotations

import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_float, check_int, check_tensor

__all__ = ["feasibility_rate", "feasible_mask", "optimality_gap", "projection_distance", "eccentricity", "eq_tolerance"]


def eq_tolerance(dtype: torch.dtype, tol: float = 1e-5) -> float:
    """Tolerance on equality residuals: ``tol`` in float64, at least 1000 machine epsilons otherwise (completion
    by a float32 GEMM leaves residuals of ~1e-6)."""
    return max(tol, 1000 * torch.finfo(dtype).eps)


def feasible_mask(problem: Problem, theta: Tensor, y: Tensor, tol: float = 1e-5, eq_tol: float | None = None) -> Tensor:
    """(B,) bool: inequality violations <= tol and |equality residuals| <= eq_tol (dtype-aware default)."""
    problem.check_theta(theta)
    tol = check_float("tol", tol, min=0.0)
    eq_tol = check_float("eq_tol", eq_tol, min=0.0, allow_none=True)
    check_tensor("y", y, dtype="floating")
    if y.dim() != 2 or y.shape[0] != theta.shape[0] or y.shape[1] != problem.y_dim:
        raise ValueError(f"y must have shape ({theta.shape[0]}, {problem.y_dim}), got {tuple(y.shape)}")
    eq_tol = eq_tolerance(y.dtype, tol) if eq_tol is None else eq_tol
    problem, theta, y = problem.promote(theta, y)  # checked in the wider of the two dtypes
    v = problem.ineq_violation(theta, y)
    ok = v.amax(-1) <= tol if v.shape[-1] else torch.ones_like(y[:, 0], dtype=torch.bool)
    eq = problem.eq_residual(theta, y)
    if eq.shape[-1]:
        ok = ok & (eq.abs().amax(-1) <= eq_tol)
    return ok


def feasibility_rate(
    problem: Problem, theta: Tensor, y: Tensor, tol: float = 1e-5, eq_tol: float | None = None
) -> float:
    """Share of samples with max inequality violation <= tol and max |equality residual| <= eq_tol."""
    return float(feasible_mask(problem, theta, y, tol, eq_tol).float().mean())


def optimality_gap(problem: Problem, theta: Tensor, y: Tensor, y_star: Tensor) -> Tensor:
    """|f(y) − f(y*)| / |f(y*)| per sample (B,)."""
    problem, theta, y = problem.promote(theta, y)
    f, f_star = problem.objective(theta, y), problem.objective(theta, y_star.to(y.dtype))
    return (f - f_star).abs() / f_star.abs().clamp_min(torch.finfo(y.dtype).tiny)


def projection_distance(y_proj: Tensor, y_raw: Tensor) -> Tensor:
    """‖y_proj − y_raw‖₂ per sample (B,)."""
    if y_proj.shape != y_raw.shape:
        raise ValueError(f"y_proj and y_raw must have one shape, got {tuple(y_proj.shape)} and {tuple(y_raw.shape)}")
    return (y_proj - y_raw).norm(dim=-1)


@torch.no_grad()
def eccentricity(problem: Problem, theta: Tensor, ip: Tensor, n_dirs: int = 64, steps: int = 30,
                 tol: float = 1e-5, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Eccentricity of interior points ``ip`` (B, d) (normalised space): along ``n_dirs`` random unit directions
    find a boundary point (grow the step by doubling until infeasible, then bisect between the last feasible
    and the first infeasible length), and return the ratio R/r and the difference R − r of the largest and
    smallest boundary distances, each (B,). An infeasible IP gets inf and nan. For non-convex sets the
    boundary found on a ray is *a* crossing, not necessarily the first."""
    problem.check_theta(theta)
    n_dirs = check_int("n_dirs", n_dirs, min=1)
    steps = check_int("steps", steps, min=0)
    tol = check_float("tol", tol, min=0.0, min_open=True)
    check_tensor("ip", ip, shape=(theta.shape[0], problem.z_dim), dtype="floating", finite=True)
    b, d = ip.shape
    fn = problem.violation_fn(theta)
    u = torch.randn(b, n_dirs, d, generator=generator, dtype=ip.dtype, device="cpu").to(ip.device)
    u = u / u.norm(dim=-1, keepdim=True)
    centre = ip.unsqueeze(1)
    feasible_ip = fn(centre).amax(-1)[:, 0] <= tol
    lo = ip.new_zeros(b, n_dirs)
    hi = ip.new_full((b, n_dirs), 1e-3)
    grown = torch.zeros_like(lo, dtype=torch.bool)
    for _ in range(40):  # doubling phase: the set is compact, so some length is infeasible
        ok = fn(centre + hi.unsqueeze(-1) * u).amax(-1) <= tol
        lo = torch.where(ok & ~grown, hi, lo)
        grown = grown | ~ok
        hi = torch.where(grown, hi, 2 * hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = fn(centre + mid.unsqueeze(-1) * u).amax(-1) <= tol
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    r_max, r_min = lo.amax(1), lo.amin(1)
    ratio = torch.where(
        feasible_ip, r_max / r_min.clamp_min(torch.finfo(ip.dtype).tiny), torch.full_like(r_max, float("inf"))
    )
    diff = torch.where(feasible_ip, r_max - r_min, torch.full_like(r_max, float("nan")))
    return ratio, diff
