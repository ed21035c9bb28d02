"""The two pruning rules, thresholds, invariances, the prune method and the MAC counter."""

import math

import pytest
import torch
from torch import nn

from unifews import LayerOps, UnifewsConfig, UnifewsGCNConv, count_macs, diffusion_weights, message_scores, weight_mask
from unifews.functional import edge_keep_mask
from unifews.macs import layer_macs
from unifews.prune import InputNormThreshold, input_norm_threshold

from .helpers import random_graph


def test_factorised_score_equals_materialised_message_norm():
    x, ei = random_graph(n=40, m=200, f=6, seed=5)
    ei, w = diffusion_weights(ei, 40, dtype=x.dtype)
    w = w * torch.randn_like(w)  # signed weights too
    tau = w.unsqueeze(1) * x[ei[0]]  # the m × f message tensor, materialised only here
    torch.testing.assert_close(message_scores(ei, w, x), torch.linalg.vector_norm(tau, dim=1))


@pytest.mark.parametrize("delta_a", [0.3, 1.0, 5.0, 1e6])
def test_self_loops_always_kept(delta_a):
    x, ei = random_graph(seed=6)
    conv = UnifewsGCNConv(8, 4, config=UnifewsConfig(delta_a=delta_a, delta_w=0.0)).double()
    _, (kept, _) = conv(x, ei, return_graph=True)
    n_loops = int((kept[0] == kept[1]).sum())
    assert n_loops == x.size(0)


@pytest.mark.parametrize("threshold", ["relative", "absolute"])
def test_infinite_delta_a_leaves_only_the_self_term(threshold):
    x, ei = random_graph(seed=7)
    conv = UnifewsGCNConv(8, 4, config=UnifewsConfig(delta_a=math.inf, delta_w=0.0, threshold=threshold)).double()
    conv.bias.data.normal_()
    out = conv(x, ei)
    deg = torch.bincount(ei[1], minlength=x.size(0)).double() + 1
    z = x @ conv.lin.weight.t()
    torch.testing.assert_close(out, z / deg.unsqueeze(1) + conv.bias, rtol=0, atol=1e-12)


def test_edge_rule_relative_vs_absolute():
    s = torch.tensor([0.1, 0.2, 0.3, 0.4, 1.0], dtype=torch.float64)
    loop = torch.tensor([False, False, False, False, True])
    # relative: threshold 1.0 * mean = 0.4
    assert edge_keep_mask(s, loop, 1.0, "relative").tolist() == [False, False, False, True, True]
    assert edge_keep_mask(s, loop, 0.25, "absolute").tolist() == [False, False, True, True, True]
    assert edge_keep_mask(s, loop, 0.0).all()


def _masks(conv, x, ei):
    conv(x, ei)
    return conv.edge_keep.clone(), conv.lin_mask.clone()


def test_masks_invariant_to_scaling_inputs():
    x, ei = random_graph(n=50, m=300, f=8, seed=8)
    conv = UnifewsGCNConv(8, 6, config=UnifewsConfig(delta_a=0.7, delta_w=0.7)).double()
    e1, w1 = _masks(conv, x, ei)
    e2, w2 = _masks(conv, 3.7 * x, ei)
    assert torch.equal(e1, e2) and torch.equal(w1, w2)
    assert 0 < int(e1.sum()) < e1.numel() and 0 < int(w1.sum()) < w1.numel()  # both rules actually prune


def test_masks_equivariant_to_node_permutation():
    x, ei = random_graph(n=50, m=300, f=8, seed=9)
    conv = UnifewsGCNConv(8, 6, config=UnifewsConfig(delta_a=0.7, delta_w=0.7)).double()
    out1, (k1, _) = conv(x, ei, return_graph=True)
    w1 = conv.lin_mask.clone()
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    inv = torch.argsort(perm)  # new id of old node i is inv[i]
    out2, (k2, _) = conv(x[perm], inv[ei], return_graph=True)
    assert torch.equal(w1, conv.lin_mask)
    torch.testing.assert_close(out2, out1[perm])
    keys1 = set(map(tuple, inv[k1].t().tolist()))
    assert keys1 == set(map(tuple, k2.t().tolist()))


def test_huge_delta_w_keeps_each_matrix_max():
    w = torch.randn(7, 5, dtype=torch.float64)
    h = torch.randn(20, 5, dtype=torch.float64)
    for thr in ("relative", "absolute"):
        m = weight_mask(w, h, 1e9, thr)
        assert m.any() and m.view(-1)[w.abs().argmax()]
        assert int(m.sum()) == int((w.abs() >= 0.999 * w.abs().max()).sum())


def test_weight_rule_closed_form():
    w = torch.tensor([[0.5, -0.1], [0.05, 2.0]], dtype=torch.float64)
    h = torch.tensor([[3.0, 0.0], [4.0, 1.0]], dtype=torch.float64)  # column norms 5 and 1, ‖H‖_F = √26
    # absolute: θ = δw / c = (0.5/5, 0.5/1) = (0.1, 0.5)
    assert weight_mask(w, h, 0.5, "absolute").tolist() == [[True, False], [False, True]]
    s = math.sqrt(26) / 2
    theta = torch.tensor([0.2 * s / 5, 0.2 * s / 1])
    assert weight_mask(w, h, 0.2, "relative").tolist() == (w.abs() >= theta).tolist()


def test_prune_method_matches_rule_and_torch_prune_api():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4)
    h = torch.randn(30, 6)
    expected = weight_mask(lin.weight, h, 0.8)
    dense = lin.weight.detach().clone()
    input_norm_threshold(lin, "weight", 0.8, h)
    assert torch.equal(lin.weight_mask.bool(), expected)
    torch.testing.assert_close(lin.weight, dense * expected)
    with pytest.raises(ValueError, match="f_in=5"):
        InputNormThreshold(0.5, torch.randn(3, 5)).compute_mask(torch.randn(2, 6), torch.ones(2, 6))


def test_count_macs_closed_form():
    ops = [LayerOps(100, 50, 16, 0.25, 300, 16), LayerOps(100, 16, 7, 0.5, 120, 7)]
    exact = (0.25 * 50 * 16 * 100 + 16 * 300 + 100 * 16) + (0.5 * 16 * 7 * 100 + 7 * 120 + 100 * 7)
    official = (0.25 * 50 * 16 * 100 + 50 * 300 + 100 * 16) + (0.5 * 16 * 7 * 100 + 16 * 120 + 100 * 7)
    assert count_macs(ops) == exact
    assert count_macs(ops, convention="official") == official
    with pytest.raises(ValueError, match="convention"):
        layer_macs(ops[0], "flops")
