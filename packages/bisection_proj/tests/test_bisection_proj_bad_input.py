"""Bad input raises ValueError naming the argument, the value and what was expected."""

from __future__ import annotations

import pytest
import torch

from bisection_proj import BisectionProjector, bisection_project
from bisection_proj.problems import ConvexQP


def box(p):
    return (p.abs() - 1).clamp_min(0)


X = torch.full((4, 2), 2.0, dtype=torch.float64)
IP = torch.zeros(4, 1, 2, dtype=torch.float64)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"ip": torch.zeros(4, 1, 3, dtype=torch.float64)}, r"x of shape \(4, 2\) and ip of shape \(4, 1, 3\)"),
        ({"ip": torch.zeros(3, 1, 2, dtype=torch.float64)}, r"x of shape \(4, 2\) and ip of shape \(3, 1, 2\)"),
        ({"ip": torch.zeros(4, 2, dtype=torch.float64)}, r"ip must have shape \(B, m, d\).*\(4, 2\)"),
        ({"x": torch.zeros(4, dtype=torch.float64)}, r"x must have shape \(B, d\), got \(4,\)"),
        ({"x": X.clone().fill_(float("nan"))}, "x must be finite"),
        ({"ip": IP.clone().fill_(float("inf"))}, "ip must be finite"),
        ({"ip": IP.float()}, "share one floating dtype"),
        ({"ratio": 1.0}, r"ratio must be a float in \(0.0, 1.0\), got 1.0"),
        ({"ratio": 0}, r"ratio must be a float in \(0.0, 1.0\), got 0"),
        ({"steps": -1}, "steps must be a non-negative int, got -1"),
        ({"steps": 2.5}, "steps must be a non-negative int, got 2.5"),
        ({"tol": 0.0}, "tol must be a float > 0"),
        ({"conv_tol": -1e-3}, "conv_tol must be a float in"),
        ({"on_failure": "ignore"}, "on_failure must be one of"),
        ({"violation_fn": lambda p: -box(p)[..., 0] - 1}, "violation_fn must return values >= 0"),
        ({"violation_fn": lambda p: box(p)[:2]}, r"violation_fn must return shape \(4, 3\)"),
        ({"violation_fn": lambda p: box(p).sum()}, "violation_fn must return shape"),
        ({"violation_fn": 3}, "violation_fn must be callable"),
    ],
)
def test_bisection_project_rejects(kw, match):
    args = {"x": X, "ip": IP, "violation_fn": box}
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        bisection_project(args.pop("x"), args.pop("ip"), args.pop("violation_fn"), **args)


def test_projector_rejects_theta_mismatch_and_nan():
    prob = ConvexQP.random(n=10, n_eq=4, n_ineq=3, seed=0, n_subsets=20)
    theta = prob.sample_theta(5)
    z = torch.rand(5, prob.z_dim, dtype=torch.float64)
    ip = torch.rand(5, 1, prob.z_dim, dtype=torch.float64)
    proj = BisectionProjector(prob)
    with pytest.raises(ValueError, match="theta batch size 4 differs from the prediction batch size 5"):
        proj(theta[:4], z, ip)
    with pytest.raises(ValueError, match="theta must be finite"):
        proj(theta.clone().fill_(float("nan")), z, ip)
    with pytest.raises(ValueError, match=r"theta must have shape \(B, 4\)"):
        proj(theta[:, :3], z, ip)
    with pytest.raises(ValueError, match=r"z_pred must have shape \(B, 6\)"):
        proj(theta, z[:, :5], ip[:, :, :5])
    with pytest.raises(ValueError, match="grad must be one of"):
        BisectionProjector(prob, grad="exact")
    with pytest.raises(ValueError, match="ratio must be a float in"):
        BisectionProjector(prob, ratio=1.5)
