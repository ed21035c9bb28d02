"""The learnable router of the shared MoE (gating="switch") against the official gating, which never learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from softshape import SoftShapeConfig, SoftShapeNet
from softshape.layers import SharedMoE


def test_switch_gate_is_the_router_probability_and_the_router_gets_gradient_at_zero_init():
    torch.manual_seed(0)
    z = torch.randn(3, 7, 16)
    grads = {}
    for gating in ("switch", "official"):
        torch.manual_seed(1)
        moe = SharedMoE(16, n_experts=3, gating=gating).train()
        top_i, gates = moe.route(z.reshape(-1, 16))
        assert torch.all(top_i == 0)  # zero-initialised router: uniform probabilities, tie to expert 0
        expected = 1 / 3 if gating == "switch" else 1.0
        torch.testing.assert_close(gates, torch.full_like(gates, expected))
        out, _ = moe(z)
        out.square().sum().backward()  # the task loss only
        grads[gating] = moe.w_gate.grad.abs().max().item()
    # official: the gate is exactly 1, d(p / p) / dp = 0 up to rounding, so the router cannot learn
    assert grads["official"] < 1e-6 * grads["switch"], grads


def test_switch_balance_loss_closed_form():
    moe = SharedMoE(4, n_experts=3)
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.6, 0.3, 0.1]], requires_grad=True)
    top_i = probs.argmax(1, keepdim=True)
    gates = probs.gather(1, top_i)
    aux = moe.aux_loss(top_i, gates, probs)
    share = torch.tensor([2, 1, 1]) / 4
    torch.testing.assert_close(aux, 3 * (share * probs.mean(0)).sum() - 1)
    aux.backward()
    torch.testing.assert_close(probs.grad, (3 * share / 4).expand(4, 3))  # the gradient pushes loaded experts down
    uniform = torch.full((6, 3), 1 / 3)
    balanced = torch.tensor([[0], [1], [2], [0], [1], [2]])
    assert abs(float(moe.aux_loss(balanced, uniform.gather(1, balanced), uniform))) < 1e-6
    with pytest.raises(ValueError, match="probs"):
        moe.aux_loss(balanced, uniform.gather(1, balanced))


def test_every_expert_and_the_router_get_gradient_once_tokens_spread():
    torch.manual_seed(0)
    moe = SharedMoE(16, n_experts=4).train()
    with torch.no_grad():
        moe.w_gate.normal_(std=2.0)
    z = torch.randn(4, 25, 16)
    out, aux = moe(z)
    g_aux = torch.autograd.grad(aux, moe.w_gate, retain_graph=True)[0]
    assert g_aux.abs().max() > 1e-6  # the balance loss reaches the router
    out.square().mean().backward()
    for e in range(4):
        assert moe.w1.grad[e].abs().sum() > 0 and moe.w2.grad[e].abs().sum() > 0
    assert moe.w_gate.grad.abs().max() > 1e-6  # and so does the task loss, beyond rounding noise (~1e-9)


def _three_class_bumps(n: int = 60, t: int = 48, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random walks; class c carries a bump in window c of three disjoint windows."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = np.cumsum(rng.normal(0, 0.2, size=(n, t)), axis=1)
    for c, start in enumerate((4, 20, 36)):
        x[y == c, start : start + 8] += 2.0
    return torch.from_numpy(x[:, None].astype(np.float32)), torch.from_numpy(y)


def _train_20_epochs(gating: str) -> tuple[SoftShapeNet, torch.Tensor, np.ndarray, torch.Tensor]:
    torch.manual_seed(0)
    cfg = SoftShapeConfig(n_timepoints=48, n_classes=3, shape_size=8, stride=4, emb_dim=16, gating=gating)
    net = SoftShapeNet(cfg).train()
    w_gate0 = net.moe.w_gate.detach().clone()
    x, y = _three_class_bumps()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    got_grad = np.zeros(cfg.n_experts, dtype=bool)
    for _ in range(20):  # one full-batch step per epoch, sparse from the start (no warm-up)
        out = net(x, sparse=True)
        loss = F.cross_entropy(out.logits, y) + 1e-3 * out.aux_loss
        opt.zero_grad()
        loss.backward()
        got_grad |= (net.moe.w1.grad.flatten(1).abs().sum(1) > 0).numpy()
        opt.step()
    counts = net.eval()(x, return_scores=True).expert_counts
    return net, w_gate0, got_grad, counts


def test_after_20_epochs_on_3_classes_every_expert_got_gradient_and_the_router_moved():
    net, w_gate0, got_grad, counts = _train_20_epochs("switch")
    assert net.config.n_experts == 3
    assert got_grad.all(), got_grad  # every expert received a gradient at some step
    assert (net.moe.w_gate - w_gate0).abs().max() > 1e-3  # the router's weights moved
    assert int(counts.sum()) > 0 and int((counts > 0).sum()) >= 2  # after training, tokens use several experts
