"""Bisection projection against closed forms, a sequential reference and the convex bound (for convex sets)."""

from __future__ import annotations

import math

import pytest
import torch

from bisection_proj import BisectionProjector, ProjectionFailure, bisection_project
from bisection_proj.problems import ConvexQCQP, ConvexQP, Polytope, toys

K = 30
TINY = 1e-12


def ball_fn(c: torch.Tensor, r: torch.Tensor):
    return lambda p: ((p - c.unsqueeze(1)).norm(dim=-1) - r.unsqueeze(1)).clamp_min(0)


def box_fn(p: torch.Tensor) -> torch.Tensor:
    return (p.abs() - 1).clamp_min(0)  # (B, m, d)


def outside_ball(gen, b, d, c, r):
    u = torch.randn(b, d, generator=gen, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    scale = r * (1.2 + 2 * torch.rand(b, generator=gen, dtype=torch.float64))
    return c + scale.unsqueeze(-1) * u


def test_ball_closed_form():
    gen = torch.Generator().manual_seed(0)
    b, d = 64, 3
    c = torch.randn(b, d, generator=gen, dtype=torch.float64)
    r = 0.5 + torch.rand(b, generator=gen, dtype=torch.float64)
    x = outside_ball(gen, b, d, c, r)
    out, info = bisection_project(x, c.unsqueeze(1), ball_fn(c, r), steps=K, tol=TINY, conv_tol=0.0)
    exact = c + r.unsqueeze(-1) * (x - c) / (x - c).norm(dim=-1, keepdim=True)
    err = (out - exact).norm(dim=-1)
    assert (err <= 2.0**-K * (x - c).norm(dim=-1) + 1e-12).all()
    assert info.feasible.all() and info.projected.all() and info.steps == K
    assert (info.ip_index == 0).all()


def test_box_closed_form_and_convex_bound():
    gen = torch.Generator().manual_seed(1)
    b, d = 128, 5
    x = 3 * torch.randn(b, d, generator=gen, dtype=torch.float64)
    x = x[x.abs().amax(-1) > 1]
    ip = torch.zeros(x.shape[0], 1, d, dtype=torch.float64)
    out, info = bisection_project(x, ip, box_fn, steps=K, tol=TINY, conv_tol=0.0)
    exact = x / x.abs().amax(-1, keepdim=True)
    assert ((out - exact).norm(dim=-1) <= 2.0**-K * x.norm(dim=-1) + 1e-12).all()
    # convex bound: for B(0, r) ⊆ C ⊆ B(0, R) and x outside C at distance d_proj, the exit point b of [0, x]
    # obeys d_proj <= ||x - b|| <= d_proj (R + d_proj) / (r + d_proj); here r = 1, R = sqrt(d)
    dist = (x - x.clamp(-1, 1)).norm(dim=-1)
    moved = (x - out).norm(dim=-1)
    slack = 2.0**-K * x.norm(dim=-1)
    assert (moved >= dist - slack).all()
    assert (moved <= dist * (math.sqrt(d) + dist) / (1 + dist) + slack).all()
    assert info.feasible.all()


def test_polytope_exit_alpha_closed_form():
    gen = torch.Generator().manual_seed(2)
    b, d, p = 50, 4, 10
    g = torch.randn(b, p, d, generator=gen, dtype=torch.float64)
    h = 0.5 + torch.rand(b, p, generator=gen, dtype=torch.float64)
    y0 = 0.1 * torch.randn(b, d, generator=gen, dtype=torch.float64)
    h = h + torch.einsum("bpd,bd->bp", g, y0).clamp_min(0)  # keep y0 interior
    x = y0 + 4 * torch.randn(b, d, generator=gen, dtype=torch.float64)

    def fn(pts):
        return (torch.einsum("bpd,bmd->bmp", g, pts) - h.unsqueeze(1)).clamp_min(0)

    out, info = bisection_project(x, y0.unsqueeze(1), fn, steps=K, tol=TINY, conv_tol=0.0)
    gd = torch.einsum("bpd,bd->bp", g, x - y0)
    slack = h - torch.einsum("bpd,bd->bp", g, y0)
    ratio = torch.where(gd > 0, slack / gd, torch.full_like(gd, math.inf))
    alpha_star = ratio.amin(-1).clamp_max(1.0)
    infeasible = alpha_star < 1
    a = info.alpha[infeasible]
    assert ((alpha_star[infeasible] - a) >= -1e-12).all()
    assert ((alpha_star[infeasible] - a) <= 2.0**-K + 1e-12).all()
    assert torch.equal(out[~infeasible], x[~infeasible])


def _reference_alpha(x, ip, fn, steps, ratio, tol, conv_tol):
    """Sequential scalar bisection, one row at a time."""
    out = []
    for b in range(x.shape[0]):
        lo, hi = 0.0, 1.0
        for _ in range(steps):
            if hi - lo < conv_tol:
                break
            a = (1 - ratio) * lo + ratio * hi
            pt = ip[b, 0] + a * (x[b] - ip[b, 0])
            v = float(fn(pt.view(1, 1, -1), b).max())
            if v <= tol:
                lo = a
            else:
                hi = a
        out.append((lo, hi))
    return out


@pytest.mark.parametrize(("ratio", "conv_tol"), [(0.5, 0.0), (0.9, 0.0), (0.3, 0.0), (0.9, 0.03), (0.5, 1e-5)])
def test_matches_sequential_reference_and_width(ratio, conv_tol):
    gen = torch.Generator().manual_seed(3)
    b, d, steps = 20, 3, 25
    c = torch.randn(b, d, generator=gen, dtype=torch.float64)
    r = 0.5 + torch.rand(b, generator=gen, dtype=torch.float64)
    x = outside_ball(gen, b, d, c, r)
    ip = c.unsqueeze(1)
    _, info = bisection_project(x, ip, ball_fn(c, r), steps=steps, ratio=ratio, tol=TINY, conv_tol=conv_tol)
    ref = _reference_alpha(x, ip, lambda pt, i: ball_fn(c[i : i + 1], r[i : i + 1])(pt), steps, ratio, TINY, conv_tol)
    lo_ref = torch.tensor([lo for lo, _ in ref], dtype=torch.float64)
    assert torch.allclose(info.alpha, lo_ref, atol=1e-14, rtol=0)
    widths = torch.tensor([hi - lo for lo, hi in ref])
    assert (widths <= max(ratio, 1 - ratio) ** steps + 1e-15).all() or conv_tol > 0
    if conv_tol > 0:  # per-row early stop: each row stopped right after its width fell below conv_tol
        assert (widths < conv_tol).all()
        assert (widths >= conv_tol * min(ratio, 1 - ratio) - 1e-15).all()


def test_feasible_inputs_unchanged_and_outputs_on_segment():
    gen = torch.Generator().manual_seed(4)
    b, d, m = 64, 4, 3
    x = 2 * torch.randn(b, d, generator=gen, dtype=torch.float64)
    ip = 0.8 * (2 * torch.rand(b, m, d, generator=gen, dtype=torch.float64) - 1)
    out, info = bisection_project(x, ip, box_fn, steps=20)
    inside = x.abs().amax(-1) <= 1
    assert inside.any() and (~inside).any()
    assert torch.equal(out[inside], x[inside])
    assert (info.ip_index[inside] == -1).all() and (info.alpha[inside] == 1).all()
    moved = ~inside
    chosen = ip[moved, info.ip_index[moved]]
    seg = x[moved] - chosen
    recon = chosen + info.alpha[moved].unsqueeze(-1) * seg
    assert torch.allclose(out[moved], recon, atol=1e-12)
    # collinearity: the component of (out - ip) orthogonal to (x - ip) vanishes
    rel = out[moved] - chosen
    orth = rel - (rel * seg).sum(-1, keepdim=True) / (seg * seg).sum(-1, keepdim=True) * seg
    assert orth.norm(dim=-1).max() < 1e-12
    assert ((info.alpha >= 0) & (info.alpha <= 1)).all()


def test_zero_steps_returns_the_interior_point():
    x = torch.tensor([[3.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    ip = torch.tensor([[[0.2, 0.1]], [[0.0, 0.0]]], dtype=torch.float64)
    out, info = bisection_project(x, ip, box_fn, steps=0)
    assert torch.equal(out[0], ip[0, 0]) and torch.equal(out[1], x[1])
    assert info.steps == 0 and info.feasible.all() and info.alpha[0] == 0


def test_multi_ip_nearest_verified_candidate():
    gen = torch.Generator().manual_seed(5)
    b, d, m = 40, 3, 4
    x = 3 * torch.randn(b, d, generator=gen, dtype=torch.float64)
    x = x[x.abs().amax(-1) > 1]
    ip = 0.9 * (2 * torch.rand(x.shape[0], m, d, generator=gen, dtype=torch.float64) - 1)
    ip[:, 0] = 0.98 * x / x.abs().amax(-1, keepdim=True) + 0.02 * x  # an infeasible IP right next to x
    ip[:, 0] = torch.where(
        ip[:, 0].abs().amax(-1, keepdim=True) > 1, ip[:, 0], 1.5 * ip[:, 0] / ip[:, 0].abs().amax(-1, keepdim=True)
    )
    assert (ip[:, 0].abs().amax(-1) > 1).all()
    out, info = bisection_project(x, ip, box_fn, steps=K, tol=TINY, conv_tol=0.0)
    assert info.feasible.all() and (out.abs().amax(-1) <= 1 + TINY).all()
    dist = (out - x).norm(dim=-1)
    singles = []
    for k in range(1, m):
        o, _ = bisection_project(x, ip[:, k : k + 1], box_fn, steps=K, tol=TINY, conv_tol=0.0)
        singles.append((o - x).norm(dim=-1))
    singles = torch.stack(singles, -1)
    assert (dist <= singles.amin(-1) + 1e-12).all()
    assert torch.allclose(dist, singles.amin(-1), atol=1e-12)
    # the infeasible IP 0 may only be chosen when a feasible point was found on its segment (alpha > 0)
    zero = info.ip_index == 0
    assert (info.alpha[zero] > 0).all()


def test_infeasible_interior_point_is_flagged():
    x = torch.tensor([[3.0, 3.0], [2.0, 0.0]], dtype=torch.float64)
    ip = torch.tensor([[[2.0, 2.0]], [[0.0, 0.0]]], dtype=torch.float64)  # row 0: IP and segment all outside
    out, info = bisection_project(x, ip, box_fn)
    assert info.feasible.tolist() == [False, True]
    assert torch.equal(out[0], x[0]) and info.ip_index[0] == -1 and info.violation[0] > 0
    out_ip, info_ip = bisection_project(x, ip, box_fn, on_failure="ip")
    assert torch.equal(out_ip[0], ip[0, 0]) and not info_ip.feasible[0] and info_ip.ip_index[0] == 0
    with pytest.raises(ProjectionFailure, match="1 of 2 rows"):
        bisection_project(x, ip, box_fn, on_failure="raise")


def _invariant(fn, x, ip, tol=1e-5):
    out, info = bisection_project(x, ip, fn, steps=K, tol=tol)
    v = fn(out.unsqueeze(1))
    v = v.amax(-1) if v.dim() == 3 else v
    assert info.feasible.all()
    assert (v.squeeze(1) <= tol).all()
    assert torch.allclose(info.violation, v.squeeze(1))


def test_feasibility_invariant_random_polytopes():
    for seed in range(5):
        poly = Polytope.random(d=5, n_rows=12, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        theta = torch.zeros(256, poly.theta_dim, dtype=torch.float64)
        x = 2 * torch.randn(256, 5, generator=gen, dtype=torch.float64)
        ip = 0.05 * torch.randn(256, 2, 5, generator=gen, dtype=torch.float64)
        _invariant(poly.violation_fn(theta), x, ip)


def test_feasibility_invariant_qcqp():
    prob = ConvexQCQP.random(n=20, n_eq=8, n_ineq=8, seed=0)
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(128, gen)
    ip = prob.y_to_z(theta, prob.analytic_interior(theta)).unsqueeze(1)
    x = torch.rand(128, prob.z_dim, generator=gen, dtype=torch.float64)
    _invariant(prob.violation_fn(theta), x, ip)


def test_feasibility_invariant_union_of_balls_and_ring():
    gen = torch.Generator().manual_seed(6)
    union = toys.UnionOfBalls()
    theta = union.sample_theta(256, gen)
    k = torch.randint(0, 4, (256,), generator=gen)
    centres = theta[:, :8].reshape(256, 4, 2)[torch.arange(256), k]
    x = 4 * torch.rand(256, 2, generator=gen, dtype=torch.float64) - 2
    _invariant(union.violation_fn(theta), x, centres.unsqueeze(1))
    ring = toys.Ring()
    theta = ring.sample_theta(256, gen)
    u = torch.randn(256, 2, generator=gen, dtype=torch.float64)
    ip = theta + 0.75 * u / u.norm(dim=-1, keepdim=True)
    x = 4 * torch.rand(256, 2, generator=gen, dtype=torch.float64) - 2
    _invariant(ring.violation_fn(theta), x, ip.unsqueeze(1))


def test_convex_bound_against_cvxpy_projection():
    pytest.importorskip("cvxpy")
    from bisection_proj.baselines import cvxpy_projection

    d = 4
    for seed in range(2):
        poly = Polytope.random(d=d, n_rows=6, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        theta = torch.zeros(24, poly.theta_dim, dtype=torch.float64)
        x = 1.5 * torch.randn(24, d, generator=gen, dtype=torch.float64)
        ip = torch.zeros(24, 1, d, dtype=torch.float64)
        out, info = bisection_project(x, ip, poly.violation_fn(theta), steps=K, tol=TINY, conv_tol=0.0)
        proj = cvxpy_projection(poly, theta, x)
        dist = (x - proj).norm(dim=-1)
        moved = (x - out).norm(dim=-1)
        r = min(float((poly.h / poly.G.norm(dim=-1)).min()), 1.0)
        big_r = math.sqrt(d)
        slack = 2.0**-K * x.norm(dim=-1) + 1e-6
        assert (moved >= dist - slack).all()
        assert (moved <= dist * (big_r + dist) / (r + dist) + slack).all()


def test_float32_matches_float64():
    gen = torch.Generator().manual_seed(7)
    b, d = 32, 3
    c = torch.randn(b, d, generator=gen, dtype=torch.float64)
    r = 0.5 + torch.rand(b, generator=gen, dtype=torch.float64)
    x = outside_ball(gen, b, d, c, r)
    o64, _ = bisection_project(x, c.unsqueeze(1), ball_fn(c, r), steps=20)
    o32, i32 = bisection_project(x.float(), c.float().unsqueeze(1), ball_fn(c.float(), r.float()), steps=20)
    assert o32.dtype == torch.float32 and i32.feasible.all()
    assert torch.allclose(o32.double(), o64, atol=1e-4)


def test_completion_exact_and_affine():
    prob = ConvexQP.random(n=30, n_eq=12, n_ineq=10, seed=0)
    gen = torch.Generator().manual_seed(0)
    theta = prob.sample_theta(16, gen)
    z1 = torch.rand(16, prob.z_dim, generator=gen, dtype=torch.float64)
    z2 = torch.rand(16, prob.z_dim, generator=gen, dtype=torch.float64)
    y1 = prob.z_to_y(theta, z1)
    assert prob.eq_residual(theta, y1).abs().max() < 1e-10
    a = 0.3
    assert torch.allclose(
        prob.z_to_y(theta, a * z1 + (1 - a) * z2), a * y1 + (1 - a) * prob.z_to_y(theta, z2), atol=1e-12
    )
    assert torch.allclose(prob.y_to_z(theta, y1), z1, atol=1e-12)


def test_projector_on_qp_restores_feasibility_and_straight_through():
    prob = ConvexQP.random(n=20, n_eq=8, n_ineq=8, seed=1)
    gen = torch.Generator().manual_seed(1)
    theta = prob.sample_theta(64, gen)
    ip = prob.y_to_z(theta, prob.analytic_interior(theta)).unsqueeze(1)
    z = (ip[:, 0] + 0.3 * torch.randn(64, prob.z_dim, generator=gen, dtype=torch.float64)).clamp(0, 1)
    proj = BisectionProjector(prob)
    y, info = proj(theta, z, ip)
    assert info.projected.any() and (~info.projected).any()
    assert info.feasible.all()
    assert prob.max_violation(theta, y).max() <= 1e-5
    assert torch.equal(info.z[~info.projected], z[~info.projected])
    st = BisectionProjector(prob, grad="straight_through")
    zg = z.clone().requires_grad_(True)
    y2, _ = st(theta, zg, ip)
    y2.sum().backward()
    expected = prob.P_x.sum(-1) * (prob.U - prob.L)[prob.partial_idx]  # d(sum y)/dz through scale and completion
    assert torch.allclose(zg.grad, expected.expand_as(zg))
    assert torch.allclose(y2.detach(), y)


def test_steps_is_a_maximum_capped_by_conv_tol_and_info_says_so():
    ball = ball_fn(torch.zeros(4, 2, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    x = torch.full((4, 2), 3.0, dtype=torch.float64)
    ip = torch.zeros(4, 1, 2, dtype=torch.float64)
    _, info = bisection_project(x, ip, ball, steps=40)  # conv_tol 1e-5 at rho 0.5: ceil(log2(1e5)) = 17
    assert (info.steps, info.max_steps) == (math.ceil(math.log(1e-5) / math.log(0.5)), 40) == (17, 40)
    _, info = bisection_project(x, ip, ball, steps=40, conv_tol=0.0)
    assert (info.steps, info.max_steps) == (40, 40)
    prob = ConvexQP.random(n=12, n_eq=5, n_ineq=5, seed=0, n_subsets=50)
    theta = prob.sample_theta(8, torch.Generator().manual_seed(0))
    z = torch.ones(8, prob.z_dim, dtype=torch.float64)
    ip_qp = prob.y_to_z(theta, prob.analytic_interior(theta)).unsqueeze(1)
    _, info = BisectionProjector(prob, steps=40)(theta, z, ip_qp)
    assert info.max_steps == 40 and info.steps == 17
