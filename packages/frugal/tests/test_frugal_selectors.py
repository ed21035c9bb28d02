"""The gradient split (paper Alg. 1): decompositions, coordinate partitions, block schedules, update rules."""

from __future__ import annotations

import math

import pytest
import torch

from frugal import adamw_update, lion_update, sgdm_update, state_free_update
from frugal.selectors import (
    block_schedule,
    coordinate_selection,
    gather,
    project_down,
    project_up,
    projection_rank,
    random_projection,
    resolve_side,
    scatter,
    svd_projection,
)


def _grad(m=12, n=7, seed=0):
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("shape", [(12, 7), (7, 12)])
@pytest.mark.parametrize("side", ["std", "reverse_std", "left", "right", "full"])
@pytest.mark.parametrize("kind", ["svd", "random"])
def test_projection_decomposes_gradient_orthogonally(shape, side, kind):
    g = _grad(*shape)
    s = resolve_side(side, shape)
    r = projection_rank(shape, 0.5, s)
    if kind == "svd":
        left, right = svd_projection(g, r, s)
    else:
        left, right = random_projection(shape, r, s, torch.Generator().manual_seed(1), g.dtype, g.device)
    low = project_down(g, left, right)
    expected_low = {"left": (r, shape[1]), "right": (shape[0], r), "full": (r, r)}[s]
    assert low.shape == expected_low
    kept = project_up(low, left, right)
    residual = g - kept
    torch.testing.assert_close(kept + residual, g, atol=1e-6, rtol=0)
    # the residual is orthogonal to every direction of the subspace: <R, up(x)> = 0 for all x
    x = torch.randn(expected_low, dtype=g.dtype, generator=torch.Generator().manual_seed(2))
    # (projectors are computed in fp32, as in the authors' code: float32-level round-off)
    assert abs(float((residual * project_up(x, left, right)).sum())) < 1e-5
    # and up(down(.)) is a projection: applying it twice changes nothing
    torch.testing.assert_close(project_up(project_down(kept, left, right), left, right), kept, atol=1e-5, rtol=0)


def test_std_side_projects_the_smaller_dimension_and_rank_rounds():
    assert resolve_side("std", (12, 7)) == "right" and resolve_side("std", (7, 12)) == "left"
    assert resolve_side("reverse_std", (12, 7)) == "left"
    assert projection_rank((176, 64), 0.25, "right") == 16
    assert projection_rank((64, 176), 0.25, "left") == 16
    assert projection_rank((64, 176), 0.25, "full") == 16
    assert projection_rank((10, 10), 0.25, "full") == 2  # round(2.5) = 2 (Python rounds half to even)
    assert projection_rank((64, 64), 0.25, "right", rank=100) == 64


def test_svd_projection_captures_top_singular_subspace():
    g = _grad(20, 8)
    left, right = svd_projection(g, 3, "right")
    s = torch.linalg.svdvals(g)
    kept = project_up(project_down(g, left, right), left, right)
    # Eckart-Young: the best rank-3 approximation error is sqrt(sum of the other squared singular values)
    assert float(torch.linalg.norm(g - kept)) == pytest.approx(float(s[3:].square().sum().sqrt()), rel=1e-6)


@pytest.mark.parametrize("selector", ["columns", "rows", "randk", "randperm"])
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_coordinate_sets_partition_the_matrix(selector, density):
    shape = (9, 14)
    sel = coordinate_selection(selector, shape, density, torch.Generator().manual_seed(0), torch.device("cpu"))
    mask = scatter(torch.ones_like(gather(torch.ones(shape), sel)), sel, torch.zeros(shape))
    active = int(mask.sum())
    expected = {
        "columns": 9 * int(density * 14),
        "rows": int(density * 9) * 14,
        "randk": int(density * 126),
        "randperm": round(density * 9) * 14,  # std side of a wide matrix: rows, round(ρ·m)
    }[selector]
    assert active == expected
    assert set(mask.unique().tolist()) <= {0.0, 1.0}  # no entry selected twice
    g = _grad(*shape).float()
    low = gather(g, sel)
    kept = scatter(low, sel, torch.zeros_like(g))
    residual = g - kept
    assert torch.equal(kept + residual, g)
    assert torch.equal(residual[mask.bool()], torch.zeros(active))  # active and inactive sets are complementary
    assert torch.equal(kept[~mask.bool()], torch.zeros(126 - active))


def test_block_schedule_descending_wraps_and_ascending_walks():
    gen = torch.Generator().manual_seed(0)
    start, seen = None, []
    for _ in range(4):
        active, start = block_schedule("descending", 10, 3, start, gen)
        seen.append(active)
    assert seen == [[7, 8, 9], [4, 5, 6], [1, 2, 3], [0, 8, 9]]  # last first, then wraps around
    start, seen = None, []
    for _ in range(3):
        active, start = block_schedule("ascending", 5, 2, start, gen)
        seen.append(active)
    assert seen == [[0, 1], [2, 3], [0, 4]]


def test_block_schedule_mirror_pairs_and_rejects_odd():
    gen = torch.Generator().manual_seed(0)
    a, start = block_schedule("mirror", 8, 4, None, gen)
    assert a == [0, 1, 6, 7]
    a, start = block_schedule("mirror", 8, 4, start, gen)
    assert a == [2, 3, 4, 5]
    a, _ = block_schedule("mirror", 8, 4, start, gen)
    assert a == [0, 1, 6, 7]
    assert all(i + j == 7 for i, j in zip(a[:2], reversed(a[2:])))
    with pytest.raises(ValueError, match="even number of active blocks, got 3"):
        block_schedule("mirror", 8, 3, None, gen)


def test_block_schedule_random_draws_distinct_from_generator():
    a1, _ = block_schedule("random", 10, 4, None, torch.Generator().manual_seed(5))
    a2, _ = block_schedule("random", 10, 4, None, torch.Generator().manual_seed(5))
    assert a1 == a2 and len(set(a1)) == 4


def test_adamw_update_matches_torch_adamw_over_steps():
    p = torch.randn(5, 3, dtype=torch.float64)
    ref = p.clone().requires_grad_(True)
    torch_opt = torch.optim.AdamW([ref], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t in range(1, 6):
        g = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(t))
        ref.grad = g.clone()
        torch_opt.step()
        p += adamw_update(g, m, v, t, 0.01, 0.8, 0.99, 1e-6)
    torch.testing.assert_close(p, ref.detach(), atol=1e-12, rtol=0)


def test_sgdm_and_lion_match_closed_forms():
    g1, g2 = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([-1.0, 1.0, 0.25])
    buf = torch.zeros(3)
    sgdm_update(g1, buf, 0.1, 0.9)
    u = sgdm_update(g2, buf, 0.1, 0.9)
    torch.testing.assert_close(u, -0.1 * (0.9 * g1 + g2))
    m = torch.zeros(3)
    lion_update(g1, m, 0.1, 0.9, 0.99)
    torch.testing.assert_close(m, 0.01 * g1)
    u = lion_update(g2, m, 0.1, 0.9, 0.99)
    torch.testing.assert_close(u, -0.1 * torch.sign(0.9 * 0.01 * g1 + 0.1 * g2))
    torch.testing.assert_close(m, 0.99 * 0.01 * g1 + 0.01 * g2)


def test_state_free_rules():
    r = torch.tensor([[0.5, -3.0], [0.0, 2.0]])
    torch.testing.assert_close(state_free_update(r, "signsgd", 0.1), torch.tensor([[-0.1, 0.1], [0.0, -0.1]]))
    torch.testing.assert_close(state_free_update(r, "sgd", 0.1), -0.1 * r)
    assert state_free_update(r, "none", 0.1) is None
    buf = r.clone()
    out = state_free_update(buf, "signsgd", 0.1, out=buf)
    assert out.data_ptr() == buf.data_ptr() and math.isclose(float(buf[0, 1]), 0.1, rel_tol=1e-6)
