"""Problem generators, completion, solver labels, baselines and metrics."""

from __future__ import annotations

import pytest
import torch

from bisection_proj import BisectionProjector, baselines, metrics
from bisection_proj.problems import JCCIM, SOCP, ConvexQCQP, ConvexQP, Polytope, Problem, toys


@pytest.mark.parametrize("cls", [ConvexQP, ConvexQCQP, SOCP])
def test_analytic_interior_point_is_feasible_for_every_theta(cls):
    prob = cls.random(n=20, n_eq=8, n_ineq=10, seed=1, n_subsets=100)
    gen = torch.Generator().manual_seed(0)
    theta = torch.cat([prob.sample_theta(256, gen), torch.sign(torch.randn(64, 8, generator=gen, dtype=torch.float64))])
    y = prob.analytic_interior(theta)
    assert prob.max_violation(theta, y).max() < 1e-9
    z = prob.y_to_z(theta, y)
    assert ((z >= 0) & (z <= 1)).all()
    assert torch.allclose(prob.z_to_y(theta, z), y, atol=1e-10)


def test_generators_are_seeded_and_reject_empty_interiors():
    a, b = ConvexQP.random(10, 4, 5, seed=3, n_subsets=20), ConvexQP.random(10, 4, 5, seed=3, n_subsets=20)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(ValueError, match="box=0.01 is too small"):
        ConvexQP.random(10, 4, 5, seed=0, box=0.01)
    with pytest.raises(ValueError, match="n_eq must be smaller than n"):
        ConvexQCQP.random(5, 5, 2)
    with pytest.raises(ValueError, match="r_in < r_out"):
        toys.Ring(r_in=1.0, r_out=0.5)
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        SOCP.random(0, 1, 1)


def test_state_dict_round_trip_and_dtype_move():
    prob = ConvexQCQP.random(12, 5, 4, seed=0, n_subsets=20)
    other = ConvexQCQP.random(12, 5, 4, seed=9, n_subsets=20)
    other.load_state_dict(prob.state_dict())
    theta = prob.sample_theta(4, torch.Generator().manual_seed(0))
    z = torch.rand(4, prob.z_dim, dtype=torch.float64)
    assert torch.equal(prob.z_violation(theta, z), other.z_violation(theta, z))
    p32 = other.float()
    assert p32.A.dtype == torch.float32 and p32.partial_idx.dtype == torch.long
    assert torch.allclose(p32.z_violation(theta.float(), z.float()).double(), prob.z_violation(theta, z), atol=1e-3)


def test_solver_labels_are_feasible_and_optimal_against_feasible_points():
    pytest.importorskip("cvxpy")
    prob = ConvexQP.random(n=12, n_eq=4, n_ineq=6, seed=0, n_subsets=50)
    theta = prob.sample_theta(6, torch.Generator().manual_seed(0))
    y_star = prob.solve(theta)
    assert metrics.feasibility_rate(prob, theta, y_star) == 1.0
    assert (prob.objective(theta, y_star) <= prob.objective(theta, prob.analytic_interior(theta)) + 1e-8).all()
    # projection of a feasible point is itself; projection of an infeasible one is feasible and closer than y*
    y_bad = y_star + 0.5
    proj = baselines.cvxpy_projection(prob, theta, y_bad)
    assert metrics.feasibility_rate(prob, theta, proj, tol=1e-6) == 1.0
    assert (metrics.projection_distance(proj, y_bad) <= metrics.projection_distance(y_star, y_bad) + 1e-7).all()
    ws = baselines.warm_start(prob, theta, y_bad)
    assert torch.allclose(prob.objective(theta, ws), prob.objective(theta, y_star), atol=1e-3)


def test_dc3_correction_reduces_violation_without_guarantee():
    prob = ConvexQP.random(n=20, n_eq=8, n_ineq=8, seed=0, n_subsets=50)
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(64, gen)
    z0 = prob.y_to_z(theta, prob.analytic_interior(theta))
    z = (z0 + 0.2 * torch.randn(64, prob.z_dim, generator=gen, dtype=torch.float64)).clamp(0, 1)
    v0 = prob.z_violation(theta, z).sum(-1)
    zc = baselines.dc3_correction(prob, theta, z, steps=30, lr=1e-3)
    v1 = prob.z_violation(theta, zc).sum(-1)
    assert v1.sum() < v0.sum()
    assert torch.equal(zc[v0 == 0], z[v0 == 0])


def test_jccim_violation_matches_scenario_share():
    prob = JCCIM.random(n=10, n_eq=4, n_ineq=3, seed=0, n_scenarios=30, q=0.9)
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(400, gen)
    level = 0.3 + 0.7 * torch.rand(400, 1, generator=gen, dtype=torch.float64)  # around the interior order ub/3
    y = level * prob.ub / 3 * (0.8 + 0.4 * torch.rand(400, 10, generator=gen, dtype=torch.float64))
    chance_ok = prob.ineq_violation(theta, y)[:, 0] <= 0
    assert torch.equal(chance_ok, prob.satisfied_share(theta, y) >= 0.9)
    assert chance_ok.any() and (~chance_ok).any()
    y_int = torch.full((400, 10), prob.ub / 3, dtype=torch.float64)
    assert prob.max_violation(theta, y_int).max() == 0


def test_toys_have_interior_points():
    gen = torch.Generator().manual_seed(0)
    q = toys.QuadraticSet()
    th = q.sample_theta(100, gen)
    assert q.max_violation(th, torch.zeros(100, 2, dtype=torch.float64)).max() == 0
    u = toys.UnionOfBalls()
    th = u.sample_theta(100, gen)
    assert u.max_violation(th, th[:, 2:4]).max() == 0
    assert u.max_violation(th, torch.full((100, 2), 5.0, dtype=torch.float64)).min() > 0
    r = toys.Ring()
    th = r.sample_theta(100, gen)
    assert r.max_violation(th, th).min() > 0  # the centre is in the hole
    assert r.max_violation(th, th + torch.tensor([0.75, 0.0], dtype=torch.float64)).max() == 0


def test_metrics_and_eq_tolerance():
    prob = Polytope.random(d=3, n_rows=4, seed=0)
    theta = torch.zeros(3, 4, dtype=torch.float64)
    y = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert metrics.feasibility_rate(prob, theta, y) == pytest.approx(2 / 3)
    gap = metrics.optimality_gap(prob, theta, y + 1, y + 2)  # objective sum(y): |3| / |sum(y) + 6|
    assert torch.allclose(gap, torch.tensor([0.5, 3 / 8, 0.5], dtype=torch.float64))
    assert metrics.eq_tolerance(torch.float64) == 1e-5 and metrics.eq_tolerance(torch.float32) > 1e-5
    with pytest.raises(ValueError, match="y must have shape"):
        metrics.feasibility_rate(prob, theta, y[:2])


class _Disc(Problem):
    """|y - θ| <= 1 in R², written with only the two required methods: every map takes the identity default."""

    theta_dim, z_dim, y_dim, n_ineq = 2, 2, 2, 1

    def __init__(self):
        super().__init__()
        self.register_buffer("theta_low", torch.full((2,), -1.0, dtype=torch.float64))
        self.register_buffer("theta_high", torch.full((2,), 1.0, dtype=torch.float64))

    def ineq_violation(self, theta, y):
        return ((y - theta).norm(dim=-1, keepdim=True) - 1).clamp_min(0)

    def objective(self, theta, y):
        return y.sum(-1)


def test_identity_defaults_of_scale_unscale_complete_partial():
    prob = _Disc()
    theta = prob.sample_theta(16, torch.Generator().manual_seed(0))
    z = torch.randn(16, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3
    assert torch.equal(prob.scale(theta, z), z) and torch.equal(prob.unscale(theta, z), z)
    assert torch.equal(prob.complete(theta, z), z) and torch.equal(prob.partial(z), z)
    assert torch.equal(prob.y_to_z(theta, prob.z_to_y(theta, z)), z)
    # the defaults are enough for the projector: every row is repaired toward the centre θ (a feasible IP)
    y, info = BisectionProjector(prob)(theta, z, theta.unsqueeze(1))
    assert info.feasible.all() and (prob.max_violation(theta, y) <= 1e-5).all()


@pytest.mark.parametrize("make", [toys.Ring, toys.QuadraticSet, lambda: Polytope.random(d=3, n_rows=4)])
def test_problems_using_the_identity_defaults_round_trip(make):
    prob = make()
    theta = prob.sample_theta(8, torch.Generator().manual_seed(0))
    z = torch.rand(8, prob.z_dim, dtype=torch.float64)
    assert torch.equal(prob.z_to_y(theta, z), z) and torch.equal(prob.y_to_z(theta, z), z)


def test_jccim_keeps_its_scale_and_takes_the_identity_completion():
    prob = JCCIM.random(n=6, n_eq=3, n_ineq=2, seed=0, n_scenarios=10)
    theta = prob.sample_theta(5, torch.Generator().manual_seed(0))
    z = torch.rand(5, 6, dtype=torch.float64)
    y = prob.z_to_y(theta, z)
    assert torch.allclose(y, z * prob.ub) and torch.allclose(prob.y_to_z(theta, y), z)


def test_an_overridden_map_without_its_inverse_refuses_the_identity():
    class Scaled(_Disc):
        def scale(self, theta, z):
            return 2 * z

    class Completed(_Disc):
        def complete(self, theta, x):
            return x + 1

    theta = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match=r"overrides scale\(\) but not unscale\(\)"):
        Scaled().y_to_z(theta, theta)
    with pytest.raises(NotImplementedError, match=r"overrides complete\(\) but not partial\(\)"):
        Completed().y_to_z(theta, theta)


def test_polytope_refuses_sets_without_interior():
    pytest.importorskip("scipy")
    with pytest.raises(ValueError, match="no interior.*radius -0.5"):
        Polytope([[1.0, 0.0], [-1.0, 0.0]], [-0.5, -0.5])  # y1 <= -0.5 and y1 >= 0.5: empty
    with pytest.raises(ValueError, match="no interior"):
        Polytope([[1.0, 0.0], [-1.0, 0.0]], [0.0, 0.0])  # the segment y1 = 0: no interior
    with pytest.raises(ValueError, match="no interior"):
        Polytope([[1.0, 0.0]], [0.2], theta_range=1.5)  # at theta = -1.5: y1 <= -1.3, below the box
    with pytest.raises(ValueError, match=r"margin\[0\] must be a float > 0.0, got -0.2"):
        Polytope.random(margin=(-0.2, 1.0))
    with pytest.raises(ValueError, match=r"margin\[1\]"):
        Polytope.random(margin=(0.5, 0.2))
    with pytest.raises(ValueError, match="theta_range"):
        Polytope([[1.0, 0.0]], [0.5], theta_range=-1.0)
    # the Chebyshev radius against a closed form: the square [-1, 1]^2 cut by y1 <= 0.5 has an inscribed ball of 0.75
    assert Polytope([[1.0, 0.0]], [0.5]).inscribed_radius() == pytest.approx(0.75)
    assert Polytope.random(d=4, n_rows=8, seed=0).inscribed_radius() > 0


def test_polytope_project_checks_the_solver_status():
    pytest.importorskip("cvxpy")
    poly = Polytope([[1.0, 0.0], [0.0, 1.0]], [0.5, 0.5], theta_range=0.1)
    y = torch.zeros(2, 2, dtype=torch.float64)
    ok = poly.project(torch.zeros(2, 2, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64))
    assert torch.allclose(ok, torch.full((2, 2), 0.5, dtype=torch.float64), atol=1e-6)
    theta = torch.tensor([[0.0, 0.0], [-5.0, -5.0]], dtype=torch.float64)  # row 1: y <= -4.5 outside the box
    with pytest.raises(ValueError, match=r"empty at theta\[1\]"):
        poly.project(theta, y)
