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


def test_ipnn_takes_a_float64_problems_theta():
    """A float64 problem's θ fed to the float32 network: cast to the network's dtype (it raised a torch dtype
    error inside nn.Linear), the same output as the explicit cast."""
    from bisection_proj import IPNN

    qp = ConvexQP.random(n=12, n_eq=6, n_ineq=6, seed=0)
    theta = qp.sample_theta(5)
    net = IPNN(qp.theta_dim, qp.z_dim, n_ip=2, hidden=16).eval()
    out = net(theta)
    assert out.dtype == torch.float32
    assert torch.equal(out, net(theta.float()))
    with pytest.raises(ValueError, match=r"theta must have shape \(B, 6\), got \(5, 3\)"):
        net(theta[:, :3])
    with pytest.raises(ValueError, match="theta must be finite"):
        net(theta.clone().fill_(float("nan")))

    from bisection_proj.experiments import NNSolver

    solver = NNSolver(qp.theta_dim, qp.z_dim, hidden=16).eval()
    assert torch.equal(solver(theta), solver(theta.float()))


@pytest.mark.parametrize("make", ["qp", "jccim", "polytope"])
def test_generators_name_a_bad_seed(make):
    from bisection_proj.problems import JCCIM, Polytope

    gen = {
        "qp": lambda s: ConvexQP.random(n=8, n_eq=4, n_ineq=4, seed=s),
        "jccim": lambda s: JCCIM.random(n=8, n_eq=4, n_ineq=4, seed=s),
        "polytope": lambda s: Polytope.random(seed=s),
    }[make]
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -3"):
        gen(-3)


def test_metrics_name_bad_tolerances_and_shapes():
    from bisection_proj import metrics

    qp = ConvexQP.random(n=12, n_eq=6, n_ineq=6, seed=0)
    theta = qp.sample_theta(3)
    y = qp.analytic_interior(theta)
    assert metrics.feasibility_rate(qp, theta, y) == 1.0
    with pytest.raises(ValueError, match="tol must be a float >= 0.0, got -1.0"):
        metrics.feasibility_rate(qp, theta, y, tol=-1.0)  # was a silent 0.0
    with pytest.raises(ValueError, match="eq_tol must be a float >= 0.0"):
        metrics.feasibility_rate(qp, theta, y, eq_tol=float("nan"))
    ip = qp.y_to_z(theta, y)
    with pytest.raises(ValueError, match=r"ip must have shape \(3, 6\)"):
        metrics.eccentricity(qp, theta, ip.unsqueeze(1))
    with pytest.raises(ValueError, match="n_dirs must be a positive int, got 0"):
        metrics.eccentricity(qp, theta, ip, n_dirs=0)


def test_projector_names_z_pred_and_theta():
    qp = ConvexQP.random(n=12, n_eq=6, n_ineq=6, seed=0)
    theta = qp.sample_theta(3)
    ip = qp.y_to_z(theta, qp.analytic_interior(theta)).unsqueeze(1)
    z = torch.rand(3, qp.z_dim, dtype=torch.float64)
    proj = BisectionProjector(qp)
    with pytest.raises(ValueError, match="z_pred and ip must share one floating dtype"):  # said "x and ip"
        proj(theta, z, ip.float())
    with pytest.raises(ValueError, match="z_pred must be finite"):
        proj(theta, z.clone().fill_(float("nan")), ip)
    with pytest.raises(ValueError, match="theta must be a torch.Tensor"):  # was an AttributeError on .dim()
        proj(theta.tolist(), z, ip)


def test_train_ipnn_names_bad_labels_and_val_thetas():
    from bisection_proj import IPNN, train_ipnn

    qp = ConvexQP.random(n=12, n_eq=6, n_ineq=6, seed=0)
    thetas = qp.sample_theta(20)
    net = IPNN(qp.theta_dim, qp.z_dim, hidden=8)
    bad = torch.rand(20, qp.z_dim + 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"labels must have shape \(20, 6\)"):  # was a broadcasting RuntimeError
        train_ipnn(net, qp, thetas, scheme="eccentricity", labels=bad, iters=2)
    with pytest.raises(ValueError, match=r"val_thetas must have shape \(B, 6\)"):  # named "theta"
        train_ipnn(net, qp, thetas, val_thetas=thetas[:, :3], iters=2)
    with pytest.raises(ValueError, match="lr_gamma must be a float > 0.0, got 0.0"):
        train_ipnn(net, qp, thetas, lr_gamma=0.0, iters=2)
