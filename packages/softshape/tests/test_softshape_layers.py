"""The math of SoftShape against references: counts, soft sparsification identities, MoE dispatch, Inception."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from softshape import SoftShapeConfig, SoftShapeNet, soft_sparsify
from softshape.config import auto_shape_size, keep_ratios, resolve_shape_size, ucr_shape_size
from softshape.layers import (
    InceptionExpert,
    SharedMoE,
    capped_same_conv1d,
    cv_squared,
    instance_norm,
    moe_dispatch_loop,
)


def small_config(**kw) -> SoftShapeConfig:
    base = {"n_timepoints": 60, "n_classes": 3, "shape_size": 8, "stride": 4, "emb_dim": 16, "dropout": 0.0}
    base.update(kw)
    return SoftShapeConfig(**base)


# ---------------------------------------------------------------- counts and config
@pytest.mark.parametrize(("T", "m", "q"), [(150, 32, 4), (24, 4, 4), (427, 42, 4), (60, 8, 3), (10, 1, 4)])
def test_token_count_matches_formula(T, m, q):
    cfg = small_config(n_timepoints=T, shape_size=m, stride=q)
    net = SoftShapeNet(cfg)
    q_eff = min(2, m) if m <= q else q
    expected = (T - m) // q_eff + 1
    assert cfg.n_shapes == expected
    assert net.embed_shapes(torch.zeros(2, 1, T)).shape == (2, expected, 16)


def test_logits_shape_and_sparsified_counts():
    cfg = small_config(depth=3, sparse_rate=0.6)
    net = SoftShapeNet(cfg).eval()
    ratios = keep_ratios(3, 0.6)
    assert ratios == pytest.approx([1.0, 0.7, 0.4])
    seen = []
    net.inception[1].register_forward_hook(lambda mod, inp, out: seen.append(out.shape[1]))
    net.inception[2].register_forward_hook(lambda mod, inp, out: seen.append(out.shape[1]))
    out = net(torch.randn(4, 1, 60))
    assert out.logits.shape == (4, 3)
    n1 = cfg.n_shapes  # layer 1 is dense
    n2 = math.ceil(0.7 * n1) + 1
    n3 = math.ceil(0.4 * n2) + 1
    assert seen == [n2, n3]


def test_shape_size_rules():
    assert ucr_shape_size("GunPoint") == 32 and ucr_shape_size("ItalyPowerDemand") == 4
    assert resolve_shape_size(ucr_shape_size("OSULeaf"), 427) == 42
    assert ucr_shape_size("NotAUCRName") == "auto"
    with pytest.raises(KeyError):
        ucr_shape_size("NotAUCRName", default=None)
    assert auto_shape_size(150) == 15 and auto_shape_size(24) == 4 and auto_shape_size(5000) == 64
    with pytest.raises(ValueError, match="shape_size"):
        resolve_shape_size("bogus", 100)
    with pytest.raises(ValueError, match="shape_size"):
        resolve_shape_size(200, 100)
    with pytest.raises(ValueError, match="emb_dim"):
        small_config(emb_dim=18)
    with pytest.raises(ValueError, match="sparse_rate"):
        small_config(sparse_rate=1.0)


# ---------------------------------------------------------------- soft sparsification
def _inputs(b=3, n=11, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    a = torch.rand(b, n, 1, generator=g, dtype=torch.float64)
    return z, a


def test_mass_conservation_and_complement():
    z, a = _inputs()
    tokens, kept = soft_sparsify(z, a, 0.5)
    k = math.ceil(0.5 * 11)
    assert tokens.shape == (3, k + 1, 5) and kept.shape == (3, k)
    torch.testing.assert_close(tokens.sum(1), (a * z).sum(1), atol=1e-6, rtol=0)
    for b in range(3):
        kept_set = set(kept[b].tolist())
        comp = [j for j in range(11) if j not in kept_set]
        torch.testing.assert_close(tokens[b, -1], (a[b, comp] * z[b, comp]).sum(0))
        # the kept ones are the top-k scores, in temporal order, weighted by their scores
        top = set(a[b, :, 0].topk(k).indices.tolist())
        assert kept_set == top
        assert kept[b].tolist() == sorted(kept[b].tolist())
        torch.testing.assert_close(tokens[b, :k], a[b, kept[b]] * z[b, kept[b]])


def test_permuting_dropped_tokens_leaves_output_unchanged():
    z, a = _inputs(b=1)
    _, kept = soft_sparsify(z, a, 0.4)
    dropped = [j for j in range(11) if j not in set(kept[0].tolist())]
    perm = list(range(11))
    shuffled = dropped[1:] + dropped[:1]
    for src, dst in zip(dropped, shuffled):
        perm[src] = dst
    z2, a2 = z[:, perm], a[:, perm]
    t1, _ = soft_sparsify(z, a, 0.4)
    t2, _ = soft_sparsify(z2, a2, 0.4)
    torch.testing.assert_close(t1, t2, atol=1e-12, rtol=0)


def test_keep_ratio_one_gives_zero_fused_token_and_hard_drops_it():
    z, a = _inputs()
    tokens, kept = soft_sparsify(z, a, 1.0)
    assert torch.equal(kept, torch.arange(11).expand(3, 11))
    assert torch.count_nonzero(tokens[:, -1]) == 0
    torch.testing.assert_close(tokens[:, :-1], a * z)
    hard, _ = soft_sparsify(z, a, 0.5, fuse=False)
    assert hard.shape == (3, math.ceil(0.5 * 11), 5)
    with pytest.raises(ValueError, match="keep_ratio"):
        soft_sparsify(z, a, 0.0)


def _manual_forward(net: SoftShapeNet, x: torch.Tensor, with_moe: bool) -> torch.Tensor:
    """One-layer SoftShape written out with the sparse-layer formula at keep ratio 1 (no fused token)."""
    z = net.rms1[0](net.embed_shapes(x))
    a = net.scorer(z)
    tokens, _ = soft_sparsify(z, a, 1.0, fuse=False)
    h = net.rms2[0](tokens)
    z = tokens + net.inception[0](h)
    if with_moe:
        z = z + net.moe(h)[0]
    a_end = net.scorer(z)
    return (net.head(F.gelu(z)) * a_end).mean(1)


@pytest.mark.parametrize("moe_in_dense", [False, True])
def test_dense_layer_equals_sparse_formula_at_keep_ratio_one(moe_in_dense):
    """r = 1: the dense layer is the sparse formula without the (zero) fused token, plus the MoE term only when
    ``moe_in_dense``."""
    torch.manual_seed(0)
    net = SoftShapeNet(small_config(depth=1, sparse_rate=0.0, moe_in_dense=moe_in_dense)).eval()
    x = torch.randn(4, 1, 60)
    torch.testing.assert_close(net(x).logits, _manual_forward(net, x, moe_in_dense), atol=1e-6, rtol=0)
    other = _manual_forward(net, x, not moe_in_dense)
    assert (net(x).logits - other).abs().max() > 1e-4


# ---------------------------------------------------------------- MoE
def test_single_expert_is_a_residual_mlp():
    torch.manual_seed(0)
    moe = SharedMoE(8, n_experts=1, top_k=1, gating="official").eval()
    z = torch.randn(2, 5, 8)
    out, aux = moe(z)
    h = z.reshape(10, 8)
    mlp = F.linear(F.gelu(F.linear(h, moe.w1[0], moe.b1[0])), moe.w2[0], moe.b2[0])
    torch.testing.assert_close(out, F.gelu(moe.norm(h + mlp)).reshape(2, 5, 8))
    assert float(aux) == 0.0


def test_gates_sum_to_one_and_zero_init_tie_goes_to_expert_zero():
    torch.manual_seed(0)
    moe = SharedMoE(8, n_experts=4, top_k=1, gating="official")
    h = torch.randn(50, 8)
    top_i, gates = moe.route(h)
    assert torch.all(top_i == 0)  # zero-initialised gate: uniform probs, topk tie -> lowest index
    torch.testing.assert_close(gates.sum(-1), torch.ones(50))
    with torch.no_grad():
        moe.w_gate.normal_()
    moe2 = SharedMoE(8, n_experts=4, top_k=2, gating="official")
    with torch.no_grad():
        moe2.w_gate.normal_()
    _, g2 = moe2.route(h)
    torch.testing.assert_close(g2.sum(-1), torch.ones(50))


def test_aux_loss_zero_when_balanced_positive_otherwise():
    moe = SharedMoE(4, n_experts=3, gating="official")
    balanced = torch.tensor([[0], [1], [2], [0], [1], [2]])
    gates = torch.ones(6, 1)
    assert float(moe.aux_loss(balanced, gates)) == 0.0
    skewed = torch.tensor([[0], [0], [0], [0], [1], [2]])
    expected = 2 * cv_squared(torch.tensor([4.0, 1.0, 1.0]))
    torch.testing.assert_close(moe.aux_loss(skewed, gates), expected)
    assert float(expected) > 0
    assert float(cv_squared(torch.tensor([5.0]))) == 0.0


@pytest.mark.parametrize(
    ("top_k", "n_experts", "skew"),
    [(1, 5, False), (2, 5, False), (1, 16, False), (1, 64, False), (1, 8, True)],
)
def test_vectorised_dispatch_equals_loop(top_k, n_experts, skew):
    """Padded batched path (balanced loads), grouped-block path (skewed: one expert takes most tokens, so padding
    would triple the work), top-2 (loop) and the single-expert path all equal the per-expert loop, with gradients."""
    torch.manual_seed(0)
    moe = SharedMoE(16, n_experts=n_experts, top_k=top_k).eval()
    with torch.no_grad():
        moe.w_gate.normal_(std=1.0)  # spread the tokens over the experts
        moe.b1.normal_()
        moe.b2.normal_()
    h = torch.randn(300, 16, dtype=torch.float64, requires_grad=True)
    moe = moe.double()
    top_i, gates = moe.route(h)
    if skew:  # most tokens on expert 0
        top_i = torch.where(torch.arange(300)[:, None] < 250, 0, top_i)
    counts = torch.bincount(top_i[:, 0], minlength=n_experts)
    assert int((counts > 0).sum()) > 1
    if skew:
        assert n_experts * int(counts.max()) > 3 * len(h)  # the grouped-block path
    out, ref = moe.dispatch(h, top_i, gates), moe_dispatch_loop(moe, h, top_i, gates)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    g_out = torch.autograd.grad(out.square().sum(), [h, moe.w1, moe.b2], retain_graph=True)
    g_ref = torch.autograd.grad(ref.square().sum(), [h, moe.w1, moe.b2])
    for a, b in zip(g_out, g_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # single used expert (the zero-init regime) takes the one-matmul path
    moe0 = SharedMoE(16, n_experts=5, top_k=1).eval().double()
    ti, g = moe0.route(h)
    torch.testing.assert_close(moe0.dispatch(h, ti, g), moe_dispatch_loop(moe0, h, ti, g), atol=1e-6, rtol=0)


def test_rmsnorm_equals_normalize_form():
    from softshape.layers import RMSNorm

    norm = RMSNorm(32)
    with torch.no_grad():
        norm.gamma.uniform_(0.5, 2.0)
    z = torch.randn(4, 7, 32, dtype=torch.float64) * 3
    z[0, 0] = 0.0  # a zero token stays zero
    norm = norm.double()
    ref = F.normalize(z, dim=-1) * math.sqrt(32) * norm.gamma
    torch.testing.assert_close(norm(z), ref, atol=1e-9, rtol=1e-9)


# ---------------------------------------------------------------- Inception
@pytest.mark.parametrize(("k", "n"), [(39, 16), (39, 5), (19, 3), (9, 30), (39, 1)])
def test_capped_kernel_equals_same_padding(k, n):
    torch.manual_seed(0)
    x = torch.randn(3, 4, n, dtype=torch.float64)
    w = torch.randn(6, 4, k, dtype=torch.float64)
    torch.testing.assert_close(capped_same_conv1d(x, w), F.conv1d(x, w, padding=k // 2), atol=1e-6, rtol=0)


def test_instance_norm_matches_torch():
    x = torch.randn(4, 8, 13)
    torch.testing.assert_close(instance_norm(x), nn.InstanceNorm1d(8)(x), atol=1e-5, rtol=0)


def test_inception_output_width_and_shape():
    inc = InceptionExpert(32)
    assert inc.n_filters == 8
    assert inc(torch.randn(2, 7, 32)).shape == (2, 7, 32)


# ---------------------------------------------------------------- gradients
def test_scorer_gets_gradient_through_gating_and_head_weighting():
    torch.manual_seed(0)
    cfg = small_config(depth=2, sparse_rate=0.5)
    net = SoftShapeNet(cfg).train()
    x, y = torch.randn(6, 1, 60), torch.tensor([0, 1, 2, 0, 1, 2])

    def scorer_grad(detach_head: bool, detach_gate: bool) -> float:
        net.zero_grad()
        orig = net.scorer.forward
        calls = []

        def patched(z):
            a = orig(z)
            calls.append(1)
            last = len(calls) == cfg.depth + 1  # the head's a_end is the last call
            if (last and detach_head) or (not last and detach_gate):
                return a.detach()
            return a

        net.scorer.forward = patched
        try:
            F.cross_entropy(net(x).logits, y).backward()
        finally:
            net.scorer.forward = orig
        return float(net.scorer.fc1.weight.grad.abs().sum())

    assert scorer_grad(detach_head=True, detach_gate=False) > 0  # through a * z (gating) only
    assert scorer_grad(detach_head=False, detach_gate=True) > 0  # through the head weighting only


def test_return_scores_maps_kept_tokens_to_original_positions():
    torch.manual_seed(0)
    net = SoftShapeNet(small_config(depth=2, sparse_rate=0.5)).eval()
    out = net(torch.randn(3, 1, 60), return_scores=True)
    m = net.config.n_shapes
    assert out.scores.shape == (3, m) and not torch.isnan(out.scores).any()
    assert torch.all(out.kept.sum(1) == math.ceil(0.5 * m))
    # kept shapes are the top-scored ones of layer 2, which saw every shape
    for b in range(3):
        top = set(out.scores[b].topk(math.ceil(0.5 * m)).indices.tolist())
        assert top == set(torch.nonzero(out.kept[b]).flatten().tolist())
