"""Bisection projection (paper Algorithm 1): B·m independent line searches between interior points and a prediction.

For sample b and interior point (IP) k, the search keeps ``lo`` (largest α checked feasible, 0 = the IP) and ``hi``
(smallest α checked infeasible, 1 = the prediction) on the segment ``ŷ_bk + α·(x̃_b − ŷ_bk)``. ``lo`` only ever
takes values that were checked feasible, so the output is feasible for any set (convex or not) whenever a
candidate was verified; rows without such a candidate are flagged in ``info.feasible``, never returned silently.

Corrections to the official ``ip_bisection`` (the reference implementation of Alg. 1): per-row convergence masks
and a step count fixed in advance (no host sync per step), the nearest candidate among *verified* ones only (the
official code also picks interior points that were themselves infeasible), failures flagged instead of returned
silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from bisection_proj.config import GRAD_MODES, BisectionConfig, GradMode, OnFailure
from icml25_shared.validate import check_choice, check_finite, check_tensor

if TYPE_CHECKING:
    from bisection_proj.problems.base import Problem

__all__ = ["BisectionInfo", "ProjectionFailure", "bisection_project", "BisectionProjector"]

ViolationFn = Callable[[Tensor], Tensor]


class ProjectionFailure(RuntimeError):
    """Raised with ``on_failure="raise"`` when a row has no verified-feasible candidate."""


@dataclass
class BisectionInfo:
    """What happened to each row of a projected batch."""

    feasible: Tensor
    """(B,) bool: True exactly when the returned point was checked feasible (violation ``<= tol``)."""
    alpha: Tensor
    """(B,): the returned point is ``ip[b, ip_index[b]] + alpha[b]·(x[b] − ip[b, ip_index[b]])``; 1 for rows
    returned unchanged."""
    ip_index: Tensor
    """(B,) long: the interior point whose segment gave the output; -1 for rows returned unchanged."""
    steps: int
    """Bisection steps run (the same for every row; rows that converged earlier stop updating): the requested
    ``max_steps`` capped by ``conv_tol`` (:attr:`~bisection_proj.config.BisectionConfig.effective_steps`)."""
    violation: Tensor
    """(B,): the largest inequality violation of the returned point."""
    projected: Tensor
    """(B,) bool: rows whose input was infeasible (only these are moved)."""
    z: Tensor | None = None
    """(B, d): the returned point in the normalised space (set by :class:`BisectionProjector`)."""
    max_steps: int | None = None
    """K as requested (``steps``); ``steps`` < ``max_steps`` when ``conv_tol`` stopped the search earlier."""

    @property
    def feasibility_rate(self) -> float:
        """Share of rows whose output was checked feasible."""
        return float(self.feasible.float().mean()) if self.feasible.numel() else float("nan")


def _check_points(x: Tensor, ip: Tensor, name: str = "x") -> None:
    """Shapes, dtype, device and finiteness of the points ``x`` (B, d) (called ``name`` in messages) and ``ip``."""
    if not isinstance(x, Tensor) or not isinstance(ip, Tensor):
        raise ValueError(f"{name} and ip must be torch tensors, got {type(x).__name__} and {type(ip).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, d), got {tuple(x.shape)}")
    if ip.dim() != 3:
        raise ValueError(f"ip must have shape (B, m, d) (m interior points per sample), got {tuple(ip.shape)}")
    if ip.shape[0] != x.shape[0] or ip.shape[2] != x.shape[1]:
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} and ip of shape {tuple(ip.shape)} disagree: expected ip of shape "
            f"({x.shape[0]}, m, {x.shape[1]})"
        )
    if ip.shape[1] < 1:
        raise ValueError(f"ip must hold at least one interior point per sample, got shape {tuple(ip.shape)}")
    if not x.is_floating_point() or x.dtype != ip.dtype:
        raise ValueError(f"{name} and ip must share one floating dtype, got {x.dtype} and {ip.dtype}")
    if x.device != ip.device:
        raise ValueError(f"{name} and ip must be on one device, got {x.device} and {ip.device}")
    check_finite(name, x)
    check_finite("ip", ip)


def _max_violation(v: Tensor, batch: int, m: int) -> Tensor:
    """Reduce a ``violation_fn`` output of shape (B, m) or (B, m, n_c) to (B, m)."""
    if not isinstance(v, Tensor):
        raise ValueError(f"violation_fn must return a tensor, got {type(v).__name__}")
    if v.dim() not in (2, 3) or v.shape[0] != batch or v.shape[1] != m:
        raise ValueError(
            f"violation_fn must return shape ({batch}, {m}) or ({batch}, {m}, n_c) for points of shape "
            f"({batch}, {m}, d), got {tuple(v.shape)}"
        )
    if v.dim() == 3:
        v = v.amax(-1) if v.shape[-1] > 0 else v.new_zeros(batch, m)
    return v


@torch.no_grad()
def bisection_project(
    x: Tensor,
    ip: Tensor,
    violation_fn: ViolationFn,
    steps: int = 30,
    ratio: float = 0.5,
    tol: float = 1e-5,
    conv_tol: float = 1e-5,
    on_failure: OnFailure = "input",
) -> tuple[Tensor, BisectionInfo]:
    """Project predictions ``x`` (B, d) onto a set known only through ``violation_fn``, by bisection toward the
    interior points ``ip`` (B, m, d) (paper Alg. 1).

    ``violation_fn(points)`` takes points of shape (B, m', d) (row b belongs to sample b) and returns their
    non-negative violations, (B, m') or (B, m', n_c); NaN counts as infeasible. Rows of ``x`` that are already
    feasible come back unchanged (bitwise). The first oracle call checks the predictions, the interior points
    and the first trial points together; then one call per step.

    ``steps`` is the maximum K: the search stops once every interval is shorter than ``conv_tol``, after
    ``ceil(log(conv_tol) / log(max(ratio, 1 - ratio)))`` steps (17 at the defaults), whichever comes first;
    ``info.steps`` reports the count run and ``info.max_steps`` the K asked for. ``conv_tol=0`` runs all K.

    Returns the projected points (B, d) and a :class:`BisectionInfo`.
    """
    cfg = BisectionConfig(steps=steps, ratio=ratio, tol=tol, conv_tol=conv_tol, on_failure=on_failure)
    _check_points(x, ip)
    if not callable(violation_fn):
        raise ValueError(f"violation_fn must be callable, got {type(violation_fn).__name__}")
    batch, m, _ = ip.shape
    rho, eps = cfg.ratio, cfg.tol
    n_steps = cfg.effective_steps
    x3 = x.unsqueeze(1)
    direction = x3 - ip  # (B, m, d)

    # first call: prediction, interior points and (when K >= 1) the step-1 trial points α = ρ
    pts = [x3, ip] + ([ip + rho * direction] if n_steps >= 1 else [])
    pts_all = torch.cat(pts, dim=1)
    v0 = _max_violation(violation_fn(pts_all), batch, pts_all.shape[1])
    if (v0 < 0).any():
        raise ValueError(f"violation_fn must return values >= 0, got a minimum of {float(v0.nan_to_num().min()):.3g}")
    v_x, v_ip = v0[:, 0], v0[:, 1 : 1 + m]
    x_feasible = v_x <= eps
    ip_feasible = v_ip <= eps

    lo = x.new_zeros(batch, m)
    hi = x.new_ones(batch, m)
    v_lo = v_ip.clone()
    for k in range(n_steps):
        if k == 0:
            alpha = torch.full_like(lo, rho)
            v_k = v0[:, 1 + m :]
        else:
            alpha = (1.0 - rho) * lo + rho * hi
            v_k = _max_violation(violation_fn(ip + alpha.unsqueeze(-1) * direction), batch, m)
        active = (hi - lo) >= cfg.conv_tol  # per-row early stop, no host sync
        ok = v_k <= eps
        up_lo, up_hi = active & ok, active & ~ok
        lo = torch.where(up_lo, alpha, lo)
        v_lo = torch.where(up_lo, v_k, v_lo)
        hi = torch.where(up_hi, alpha, hi)

    # candidates verified feasible: a feasible point found on the segment, or the IP itself checked feasible
    verified = (lo > 0) | ip_feasible
    seg_len = direction.norm(dim=-1)  # (B, m)
    dist = torch.where(verified, (1.0 - lo) * seg_len, torch.full_like(lo, float("inf")))
    best = dist.argmin(dim=1)
    any_ok = verified.any(dim=1)
    rows = torch.arange(batch, device=x.device)
    a_best = lo[rows, best]
    out = ip[rows, best] + a_best.unsqueeze(-1) * direction[rows, best]
    viol = v_lo[rows, best]
    alpha_out, index_out = a_best, best

    failed = ~x_feasible & ~any_ok
    if cfg.on_failure == "raise" and bool(failed.any()):
        raise ProjectionFailure(
            f"{int(failed.sum())} of {batch} rows have no interior point or segment point checked feasible "
            f"(tol={eps}); pass on_failure='input' or 'ip' to get them flagged instead"
        )
    if cfg.on_failure == "ip":
        near = seg_len.argmin(dim=1)
        out = torch.where(failed.unsqueeze(-1), ip[rows, near], out)
        viol = torch.where(failed, v_ip[rows, near], viol)
        alpha_out = torch.where(failed, torch.zeros_like(alpha_out), alpha_out)
        index_out = torch.where(failed, near, index_out)
        keep = x_feasible
    else:
        keep = x_feasible | failed
    out = torch.where(keep.unsqueeze(-1), x, out)
    viol = torch.where(keep, v_x, viol)
    alpha_out = torch.where(keep, torch.ones_like(alpha_out), alpha_out)
    index_out = torch.where(keep, torch.full_like(index_out, -1), index_out)
    info = BisectionInfo(
        feasible=viol <= eps,
        alpha=alpha_out,
        ip_index=index_out,
        steps=n_steps,
        violation=viol,
        projected=~x_feasible,
        max_steps=cfg.steps,
    )
    return out, info


class BisectionProjector(nn.Module):
    """Bisection projection for a :class:`~bisection_proj.problems.Problem`: bisection in the normalised
    z-space, then ``scale`` and ``complete`` to the full variable y.

    ``forward(theta, z_pred, ip) -> (y, info)`` with ``theta`` (B, θ_dim), ``z_pred`` (B, d) and ``ip`` (B, m, d)
    (an :class:`~bisection_proj.ipnn.IPNN` output). Only infeasible predictions are searched. The problem and
    the points may differ in dtype (a float32 network on a float64 problem): the search runs on points of
    ``z_pred``'s dtype and checks each in the wider of the two dtypes (``Problem.violation_fn``), so the returned
    z (``info.z``, ``z_pred``'s dtype) is exactly a point checked feasible; ``y`` comes back in that wider dtype.
    ``grad``: ``"none"`` returns a result detached from ``z_pred``; ``"straight_through"`` passes the gradient of the
    projected z to ``z_pred`` unchanged (identity Jacobian), for training a solver through the projection.
    """

    def __init__(
        self,
        problem: Problem,
        steps: int = 30,
        ratio: float = 0.5,
        tol: float = 1e-5,
        conv_tol: float = 1e-5,
        on_failure: OnFailure = "input",
        grad: GradMode = "none",
    ) -> None:
        super().__init__()
        self.config = BisectionConfig(steps=steps, ratio=ratio, tol=tol, conv_tol=conv_tol, on_failure=on_failure)
        self.grad = check_choice("grad", grad, GRAD_MODES)
        self.problem = problem

    def extra_repr(self) -> str:
        c = self.config
        return f"steps={c.steps}, ratio={c.ratio}, tol={c.tol}, conv_tol={c.conv_tol}, on_failure={c.on_failure!r}"

    def project_z(self, theta: Tensor, z_pred: Tensor, ip: Tensor) -> tuple[Tensor, BisectionInfo]:
        """The projected point in the normalised space (B, d) and its info (no completion)."""
        prob = self.problem
        _check_points(z_pred, ip, "z_pred")
        check_tensor("theta", theta)
        if theta.dim() != 2 or theta.shape[1] != prob.theta_dim:
            raise ValueError(f"theta must have shape (B, {prob.theta_dim}), got {tuple(theta.shape)}")
        if theta.shape[0] != z_pred.shape[0]:
            raise ValueError(
                f"theta batch size {theta.shape[0]} differs from the prediction batch size {z_pred.shape[0]}"
            )
        if z_pred.shape[1] != prob.z_dim:
            raise ValueError(f"z_pred must have shape (B, {prob.z_dim}), got {tuple(z_pred.shape)}")
        check_finite("theta", theta)
        c = self.config
        zd = z_pred.detach()
        with torch.no_grad():
            v = prob.z_violation(theta, zd).amax(-1) if prob.n_ineq else zd.new_zeros(zd.shape[0])
            todo = torch.nonzero(~(v <= c.tol)).squeeze(1)  # one host sync: search only infeasible rows
        batch = zd.shape[0]
        out = zd.clone()
        info = BisectionInfo(
            feasible=v <= c.tol,
            alpha=zd.new_ones(batch),
            ip_index=torch.full((batch,), -1, dtype=torch.long, device=zd.device),
            steps=0,
            violation=v,
            projected=~(v <= c.tol),
            max_steps=c.steps,
        )
        if todo.numel():
            th = theta[todo]
            zs, sub = bisection_project(
                zd[todo], ip.detach()[todo], prob.violation_fn(th), c.steps, c.ratio, c.tol, c.conv_tol, c.on_failure
            )
            out[todo] = zs
            info.feasible[todo] = sub.feasible
            info.alpha[todo] = sub.alpha
            info.ip_index[todo] = sub.ip_index
            info.violation[todo] = sub.violation
            info.steps = sub.steps
        if self.grad == "straight_through" and z_pred.requires_grad:
            out = z_pred + (out - z_pred).detach()
        info.z = out
        return out, info

    def forward(self, theta: Tensor, z_pred: Tensor, ip: Tensor) -> tuple[Tensor, BisectionInfo]:
        z, info = self.project_z(theta, z_pred, ip)
        ctx = torch.enable_grad() if self.grad == "straight_through" else torch.no_grad()
        with ctx:
            y = self.problem.z_to_y(theta, z)  # in the dtype its feasibility was checked in
        return y, info
