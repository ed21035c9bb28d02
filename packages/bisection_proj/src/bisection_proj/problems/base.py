"""The problem interface: a parametric problem min_y f(y, θ) s.t. g(y, θ) <= 0, h(y, θ) = 0 for θ in a compact Θ.

Networks predict only the partial variables in the normalised box, z ∈ [0, 1]^d; ``scale`` maps them to their
bounds and ``complete`` recovers the full y so that the equalities hold by construction. "Feasible" then means
that the clamped inequality residuals ``ineq_violation(θ, complete(θ, scale(θ, z)))`` are all ``<= tol``.
Equality completion is the DC3 device the paper adopts; with affine ``scale`` and ``complete``, segments in z stay
segments in y, so bisection in z is bisection in y.

Problems are ``nn.Module``s whose data are buffers, so ``problem.to(device, dtype)`` and ``state_dict`` work.

Dtypes: a problem and the points it is asked about may differ (a float64 problem, the default, and a float32
network). The helpers that take network outputs (``z_to_y``, ``z_violation``, ``violation_fn``) work in the wider
of the two dtypes: the points are cast up (exactly) and, when the problem is the narrower one, a cast copy of the
problem is used (:meth:`Problem.in_dtype`), so a point's feasibility is always checked in at least its own
precision. The trainers instead cast the problem once to the network's dtype (training runs in the network's
precision).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["Problem"]


def _require_override(problem: Problem, forward: str, inverse: str) -> None:
    """The identity is the inverse of ``forward`` only while ``forward`` is the default identity too."""
    if getattr(type(problem), forward) is not getattr(Problem, forward):
        raise NotImplementedError(
            f"{type(problem).__name__} overrides {forward}() but not {inverse}(): the default {inverse}() is the "
            f"identity, the inverse of the default {forward}() only"
        )


class Problem(nn.Module):
    """Base class of parametric problems; subclasses set ``theta_dim``, ``z_dim``, ``y_dim``, ``n_ineq``,
    ``n_eq`` and implement ``ineq_violation`` and ``objective``, and optionally ``solve``/``project`` for labels
    and baselines.

    The maps between the network's output and the full variable default to the identity: ``scale``/``unscale``
    (the network predicts the variables themselves, not a normalised version) and ``complete``/``partial`` (no
    equalities: every variable is predicted); ``eq_residual`` defaults to none. A subclass that overrides one map
    of a pair must override its inverse too (the default inverse then raises ``NotImplementedError`` instead of
    silently returning its input)."""

    theta_dim: int
    z_dim: int
    y_dim: int
    n_ineq: int
    n_eq: int = 0
    theta_low: Tensor
    theta_high: Tensor

    # --- the interface ------------------------------------------------------------------------------------------
    def scale(self, theta: Tensor, z: Tensor) -> Tensor:
        """Normalised partial variables z (..., d) -> partial variables x (..., d); the identity by default."""
        return z

    def unscale(self, theta: Tensor, x: Tensor) -> Tensor:
        """Inverse of :meth:`scale`; the identity by default (the inverse of the default ``scale``)."""
        _require_override(self, "scale", "unscale")
        return x

    def complete(self, theta: Tensor, x: Tensor) -> Tensor:
        """Partial variables x (B, d) -> full variables y (B, n) satisfying the equalities; the identity by
        default (no equalities, ``z_dim == y_dim``)."""
        return x

    def partial(self, y: Tensor) -> Tensor:
        """The partial variables of a full y (B, n) -> (B, d); the identity by default (the inverse of the
        default ``complete``)."""
        _require_override(self, "complete", "partial")
        return y

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        """Clamped inequality residuals (B, n_ineq) >= 0."""
        raise NotImplementedError

    def eq_residual(self, theta: Tensor, y: Tensor) -> Tensor:
        """Equality residuals (B, n_eq) (signed)."""
        return y.new_zeros(y.shape[0], 0)

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        """Objective value per sample (B,)."""
        raise NotImplementedError

    def solve(self, theta: Tensor) -> Tensor:
        """Optimal full solutions y* (B, n) by a solver (cvxpy + Clarabel); needs the ``[baselines]`` extra."""
        raise NotImplementedError(f"{type(self).__name__} has no solver")

    def project(self, theta: Tensor, y: Tensor) -> Tensor:
        """Exact orthogonal projections of y onto the feasible sets (B, n) by a solver."""
        raise NotImplementedError(f"{type(self).__name__} has no exact projection")

    # --- derived helpers ----------------------------------------------------------------------------------------
    def sample_theta(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` parameters drawn uniformly in the box Θ = [theta_low, theta_high]."""
        lo, hi = self.theta_low, self.theta_high
        u = torch.rand(n, self.theta_dim, generator=generator, dtype=lo.dtype, device="cpu").to(lo.device)
        return lo + u * (hi - lo)

    def in_dtype(self, dtype: torch.dtype) -> Problem:
        """This problem when it is already in ``dtype``; else a copy with its floating buffers cast to ``dtype``
        (``self`` is left as it is)."""
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        return self if self.dtype == dtype else copy.deepcopy(self).to(dtype)

    def promote(self, theta: Tensor, points: Tensor) -> tuple[Problem, Tensor, Tensor]:
        """(problem, θ, points) in the wider of the problem's and the points' floating dtypes (the points and θ
        cast up exactly; the problem as :meth:`in_dtype`)."""
        dtype = torch.promote_types(self.dtype, points.dtype) if points.is_floating_point() else self.dtype
        return self.in_dtype(dtype), theta.to(dtype), points.to(dtype)

    def z_to_y(self, theta: Tensor, z: Tensor) -> Tensor:
        """``complete(θ, scale(θ, z))``, in the wider of the problem's and ``z``'s dtypes."""
        prob, theta, z = self.promote(theta, z)
        return prob.complete(theta, prob.scale(theta, z))

    def y_to_z(self, theta: Tensor, y: Tensor) -> Tensor:
        """The normalised partial variables of a full y."""
        return self.unscale(theta, self.partial(y))

    def z_violation(self, theta: Tensor, z: Tensor) -> Tensor:
        """Inequality violations (B, n_ineq) of normalised points z (B, d), in the wider of the problem's and
        ``z``'s dtypes."""
        prob, theta, z = self.promote(theta, z)
        return prob.ineq_violation(theta, prob.complete(theta, prob.scale(theta, z)))

    def violation_fn(self, theta: Tensor) -> Callable[[Tensor], Tensor]:
        """The oracle for :func:`~bisection_proj.bisection.bisection_project`: points (B, m, d) in the
        normalised space -> violations (B, m, n_ineq), row b evaluated at ``theta[b]``, in the wider of the
        problem's and the points' dtypes (a cast copy of the problem is made once per dtype of this oracle)."""
        copies: dict[torch.dtype, Problem] = {}

        def fn(points: Tensor) -> Tensor:
            b, m, d = points.shape
            dtype = torch.promote_types(self.dtype, points.dtype)
            if dtype not in copies:
                copies[dtype] = self.in_dtype(dtype)
            prob = copies[dtype]
            th = theta.to(dtype).unsqueeze(1).expand(b, m, theta.shape[-1]).reshape(b * m, -1)
            return prob.z_violation(th, points.reshape(b * m, d)).reshape(b, m, -1)

        return fn

    def max_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        """max(|ineq|, |eq|) per sample (B,)."""
        parts = [self.ineq_violation(theta, y), self.eq_residual(theta, y).abs()]
        parts = [p for p in parts if p.shape[-1] > 0]
        if not parts:
            return y.new_zeros(y.shape[0])
        return torch.cat(parts, dim=-1).amax(-1)

    def check_theta(self, theta: Tensor, name: str = "theta") -> None:
        """``ValueError`` for a θ of the wrong shape or with NaN/inf."""
        if not isinstance(theta, Tensor) or theta.dim() != 2 or theta.shape[1] != self.theta_dim:
            shape = tuple(theta.shape) if isinstance(theta, Tensor) else type(theta).__name__
            raise ValueError(f"{name} must have shape (B, {self.theta_dim}), got {shape}")
        if not torch.isfinite(theta).all():
            raise ValueError(f"{name} must be finite, got NaN/inf entries")

    @property
    def dtype(self) -> torch.dtype:
        return self.theta_low.dtype

    @property
    def device(self) -> torch.device:
        return self.theta_low.device
