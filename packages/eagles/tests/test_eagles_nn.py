import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, GENConv, SAGEConv

from eagles.config import EaglesConfig
from eagles.nn import EaglesConv, EaglesGCN, ThresholdMaskedLinear, build_model, masked_gnn, masked_layers


def test_masked_linear_is_drop_in_linear_at_zero_threshold():
    torch.manual_seed(0)
    lin = nn.Linear(7, 5)
    m = ThresholdMaskedLinear.from_linear(lin)
    assert isinstance(m, nn.Linear)
    x = torch.randn(4, 7)
    torch.testing.assert_close(m(x), lin(x))
    m2 = ThresholdMaskedLinear(7, 5, bias=False, dtype=torch.float64)
    assert m2.bias is None and m2.threshold.dtype == torch.float64 and not bool(m2.threshold.detach().any())


def test_masked_linear_ste_gradients_match_closed_form():
    torch.manual_seed(1)
    m = ThresholdMaskedLinear(6, 4).double()
    with torch.no_grad():
        m.threshold.copy_(torch.tensor([0.05, 0.2, 0.3, 0.0], dtype=torch.float64))
    x = torch.randn(9, 6, dtype=torch.float64)
    g_out = torch.randn(9, 4, dtype=torch.float64)
    m(x).backward(g_out)
    w, t = m.weight.detach(), m.threshold.detach()
    keep = (w.abs() > t[:, None]).double()
    g_eff = g_out.t() @ x  # dL/d(W ⊙ M)
    # identity STE through the step: dL/dM = g_eff ⊙ W passes unchanged to u = |W| − t
    torch.testing.assert_close(m.weight.grad, g_eff * keep + g_eff * w * torch.sign(w))
    torch.testing.assert_close(m.threshold.grad, -(g_eff * w).sum(1))
    torch.testing.assert_close(m.bias.grad, g_out.sum(0))
    # the fused path equals the autograd composition weight * mask()
    w2 = m.weight.detach().clone().requires_grad_(True)
    t2 = m.threshold.detach().clone().requires_grad_(True)
    u = w2.abs() - t2[:, None]
    ((x @ (w2 * ((u > 0).double() + u - u.detach())).t()) * g_out).sum().backward()
    torch.testing.assert_close(w2.grad, m.weight.grad)
    torch.testing.assert_close(t2.grad, m.threshold.grad)


def test_sparsity_pressure_gradient_in_t_is_negative():
    m = ThresholdMaskedLinear(3, 4)
    m.sparsity_loss().backward()
    assert bool((m.threshold.grad < 0).all())


def test_fixed_mask_reused_exactly_and_bad_shape_rejected():
    m = ThresholdMaskedLinear(5, 3)
    mask = torch.rand(3, 5) > 0.5
    m.set_mask(mask)
    assert torch.equal(m.hard_mask(), mask) and not m.threshold.requires_grad
    assert bool((m.weight[~mask] == 0).all())
    with pytest.raises(ValueError, match="mask"):
        m.set_mask(torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="only 0 and 1"):
        m.set_mask(torch.full((3, 5), 2.0))
    assert "fixed_mask" not in m.state_dict()


def test_sparse_input_equals_dense():
    torch.manual_seed(2)
    m = ThresholdMaskedLinear(8, 3)
    x = torch.randn(5, 8) * (torch.rand(5, 8) < 0.3)
    torch.testing.assert_close(m(x.to_sparse()), m(x))


@pytest.mark.parametrize(
    "conv",
    [
        lambda: GCNConv(6, 5),
        lambda: SAGEConv(6, 5),
        lambda: GENConv(6, 5, num_layers=2),
    ],
)
def test_masked_gnn_equals_pyg_peer_at_zero_threshold(conv):
    torch.manual_seed(3)
    peer = conv()
    masked = masked_gnn(nn.Sequential(conv()))
    missing, _ = masked[0].load_state_dict(peer.state_dict(), strict=False)
    assert all(k.endswith("threshold") for k in missing)
    layers = masked_layers(masked)
    assert layers and all(isinstance(m, ThresholdMaskedLinear) for m in layers.values())
    x, ei = torch.randn(10, 6, requires_grad=True), torch.randint(0, 10, (2, 30))
    y1, y2 = peer(x, ei), masked[0](x, ei)
    torch.testing.assert_close(y1, y2)
    # input gradients agree; weight gradients carry the STE's extra g ⊙ |W| term (closed form tested above)
    g1 = torch.autograd.grad(y1.square().sum(), x)[0]
    g2 = torch.autograd.grad(y2.square().sum(), x)[0]
    torch.testing.assert_close(g1, g2)


def test_masked_gnn_rejects_models_without_convs_and_lazy_layers():
    with pytest.raises(ValueError, match="GCNConv"):
        masked_gnn(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="lazy"):
        masked_gnn(nn.Sequential(SAGEConv(-1, 4)))


def test_executed_sparsity_equals_masked_messages():
    torch.manual_seed(4)
    gnn = EaglesGCN(6, 8, 3, num_layers=3).eval()
    x, ei = torch.randn(15, 6), torch.randint(0, 15, (2, 50))
    mask = (torch.rand(50) < 0.6).float()
    a = gnn(x, ei, mask, execute_sparsity=False)
    b = gnn(x, ei, mask, execute_sparsity=True)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # masking an edge is the same as removing it
    c = gnn(x, ei[:, mask > 0], execute_sparsity=False)
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_eagles_conv_matches_dense_formula():
    torch.manual_seed(5)
    conv = EaglesConv(4, 3, normalize=True)
    x, ei = torch.randn(6, 4), torch.tensor([[0, 1, 2, 2, 5], [1, 2, 0, 1, 1]])
    a = torch.zeros(6, 6)
    a[ei[1], ei[0]] = 1.0
    d_in, d_out = a.sum(1).clamp_min(1), a.sum(0).clamp_min(1)
    a_hat = d_in.rsqrt()[:, None] * a * d_out.rsqrt()[None, :]
    ref = a_hat @ conv.lin_l(x) + conv.lin_r(x)
    torch.testing.assert_close(conv(x, ei), torch.nn.functional.normalize(ref, dim=-1))


def test_build_model_is_seeded_and_leaves_caller_rng():
    cfg = EaglesConfig(hidden_channels=4, num_layers=2, expert_hidden=2)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1 = build_model(5, 3, cfg)
    after = torch.rand(1)
    m2 = build_model(5, 3, cfg)
    assert torch.equal(before, after)
    for (k, v), (_, w) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=True):
        assert torch.equal(v, w), k
    dense = build_model(5, 3, EaglesConfig(hidden_channels=4, num_layers=2, weight_sparsifier=False))
    assert not masked_layers(dense) and dense.masks() == {}
