"""The optimizer's projection path (``svd`` / ``random``: one scratch buffer for the residual, its sign added with
``alpha``, the up-projection accumulated by ``addmm_``, AdamW over the group by ``torch._foreach_*``) against a
per-matrix reference written from the paper's Algorithm 1 with the package's pure functions."""

from __future__ import annotations

import pytest
import torch

from frugal import FRUGAL
from frugal.functional import adamw_update, sgdm_update, state_free_update
from frugal.selectors import project_down, project_up

SHAPES = [(12, 8), (8, 12), (10, 10), (12, 8)]  # tall (right side), wide (left), square, a repeated shape


def _reference(weights, grads, projectors, *, lr, wd, rule, state_full, gap, maximize, betas=(0.9, 0.999)):
    """Alg. 1 per matrix: decay, down, state-full rule, up, plus the state-free rule on G - up(down(G)); moments
    reset at every refresh (steps 0, T, 2T, ...), the projectors taken from the optimizer's state at each step."""
    ws = [w.clone() for w in weights]
    moments: list[dict] = [{} for _ in ws]
    for k, (gs, ps) in enumerate(zip(grads, projectors, strict=True)):
        for w, g, (left, right), mom in zip(ws, gs, ps, moments, strict=True):
            g = -g if maximize else g
            if k % gap == 0:
                mom.clear()
            w.mul_(1 - lr * wd)
            low = project_down(g, left, right)
            if state_full == "adamw":
                if not mom:
                    mom.update(m=torch.zeros_like(low), v=torch.zeros_like(low), t=0)
                mom["t"] += 1
                upd = adamw_update(low, mom["m"], mom["v"], mom["t"], lr, *betas, 1e-8)
            else:
                mom.setdefault("b", torch.zeros_like(low))
                upd = sgdm_update(low, mom["b"], lr, betas[0])
            free = state_free_update(g - project_up(low, left, right), rule, lr)
            w.add_(project_up(upd, left, right) + (0 if free is None else free))
    return ws


@pytest.mark.parametrize("selector", ["svd", "random"])
@pytest.mark.parametrize("side", ["std", "reverse_std", "full"])
@pytest.mark.parametrize("rule", ["signsgd", "sgd", "none"])
def test_projection_path_equals_the_per_matrix_reference(selector, side, rule):
    _check(selector, side, rule, state_full="adamw", wd=0.1, maximize=False)


@pytest.mark.parametrize(("state_full", "maximize", "transposed"), [("adamw", True, False), ("sgdm", False, False),
                                                                    ("adamw", False, True)])  # fmt: skip
def test_projection_path_with_maximize_sgdm_and_transposed_groups(state_full, maximize, transposed):
    _check("svd", "std", "signsgd", state_full=state_full, wd=0.0, maximize=maximize, transposed=transposed)


def _check(selector, side, rule, *, state_full, wd, maximize, transposed=False):
    gen = torch.Generator().manual_seed(0)
    steps, gap, lr = 7, 3, 1e-2
    weights = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) for s in SHAPES] for _ in range(steps)]
    # a transposed group stores each matrix as its transpose and is optimised as the matrix above
    params = [torch.nn.Parameter((w.mT if transposed else w).clone().contiguous()) for w in weights]
    opt = FRUGAL([{"params": params, "projectable": True, "transposed": transposed}], lr=lr, weight_decay=wd,
                 maximize=maximize, density=0.25, update_gap=gap, selector=selector, proj_side=side,
                 state_free=rule, state_full=state_full)  # fmt: skip
    projectors = []
    for gs in grads:
        for p, g in zip(params, gs, strict=True):
            p.grad = (g.mT if transposed else g).clone()
        opt.step()
        projectors.append([(opt.state[p].get("left"), opt.state[p].get("right")) for p in params])
        for p, g in zip(params, gs, strict=True):  # the step leaves the gradient as it found it
            assert torch.equal(p.grad, g.mT if transposed else g)
    ref = _reference(weights, grads, projectors, lr=lr, wd=wd, rule=rule, state_full=state_full, gap=gap,
                     maximize=maximize)  # fmt: skip
    for p, w, w0 in zip(params, ref, weights, strict=True):
        got = p.detach().mT if transposed else p.detach()
        moved = (w - w0).norm()
        assert moved > 0
        torch.testing.assert_close(got, w, rtol=1e-6, atol=1e-6 * float(moved))


def test_scratch_buffer_grows_and_is_not_state():
    """The residual's scratch buffer is sized by the largest matrix, shared by all, and absent from state_dict."""
    gen = torch.Generator().manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in [(6, 4), (16, 12), (5, 5)]]
    opt = FRUGAL([{"params": params, "projectable": True}], lr=1e-2, selector="svd", density=0.5)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    before = opt.memory_report()["expected_state_bytes"]
    opt.step()
    (buf,) = opt._buffers.values()
    assert buf.numel() == 16 * 12
    assert opt.memory_report()["state_bytes"] == before
    assert not any(isinstance(v, torch.Tensor) and v.numel() == 16 * 12 for v in opt.state_dict().values())
