"""δa = δw = 0: every Unifews layer equals its torch_geometric peer (outputs and gradients, float64)."""

import pytest
import torch
from torch_geometric.nn import GATv2Conv, GCN2Conv, GCNConv, SAGEConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from unifews import UnifewsConfig, UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsSAGEConv

from .helpers import random_graph

DENSE = UnifewsConfig(delta_a=0.0, delta_w=0.0)


def _grads(module, out, upstream):
    module.zero_grad()
    (out * upstream).sum().backward()
    return {n: p.grad.clone() for n, p in module.named_parameters()}


def test_gcn_equals_pyg_gcnconv_normalize_false():
    x, ei = random_graph()
    ei_n, w = gcn_norm(ei, None, x.size(0), add_self_loops=True, dtype=x.dtype)
    ours = UnifewsGCNConv(8, 5, config=DENSE).double()
    peer = GCNConv(8, 5, normalize=False, bias=True).double()
    peer.lin.weight.data.copy_(ours.lin.weight.data)
    ours.bias.data.normal_()
    peer.bias.data.copy_(ours.bias.data)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a = ours(xa, ei)  # normalises itself
    b = peer(xb, ei_n, w)
    torch.testing.assert_close(a, b)
    up = torch.randn_like(a)
    ga, gb = _grads(ours, a, up), _grads(peer, b, up)
    torch.testing.assert_close(ga["lin.weight"], gb["lin.weight"])
    torch.testing.assert_close(ga["bias"], gb["bias"])
    torch.testing.assert_close(xa.grad, xb.grad)


def test_gcn_normalize_false_with_given_weights():
    x, ei = random_graph(seed=1)
    ei_n, w = gcn_norm(ei, None, x.size(0), add_self_loops=True, dtype=x.dtype)
    ours = UnifewsGCNConv(8, 5, normalize=False, config=DENSE).double()
    peer = GCNConv(8, 5, normalize=False).double()
    peer.lin.weight.data.copy_(ours.lin.weight.data)
    torch.testing.assert_close(ours(x, ei_n, w), peer(x, ei_n, w))


def test_sage_equals_pyg_sageconv():
    x, ei = random_graph(seed=2)
    ours = UnifewsSAGEConv(8, 6, config=DENSE).double()
    peer = SAGEConv(8, 6, aggr="mean").double()
    peer.lin_l.weight.data.copy_(ours.lin_l.weight.data)
    peer.lin_l.bias.data.copy_(ours.lin_l.bias.data)
    peer.lin_r.weight.data.copy_(ours.lin_r.weight.data)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, ei), peer(xb, ei)
    torch.testing.assert_close(a, b)
    up = torch.randn_like(a)
    ga, gb = _grads(ours, a, up), _grads(peer, b, up)
    for k in ("lin_l.weight", "lin_l.bias", "lin_r.weight"):
        torch.testing.assert_close(ga[k], gb[k])
    torch.testing.assert_close(xa.grad, xb.grad)


@pytest.mark.parametrize("concat", [True, False])
def test_gatv2_equals_pyg_gatv2conv(concat):
    x, ei = random_graph(seed=3)
    ours = UnifewsGATv2Conv(8, 4, heads=3, concat=concat, config=DENSE).double().eval()
    peer = GATv2Conv(8, 4, heads=3, concat=concat).double().eval()
    peer.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.endswith(("mask", "keep"))}, strict=False)
    for k in ("lin_l.weight", "lin_l.bias", "lin_r.weight", "lin_r.bias", "att", "bias"):
        torch.testing.assert_close(dict(peer.named_parameters())[k], dict(ours.named_parameters())[k])
    ours.bias.data.normal_()
    peer.bias.data.copy_(ours.bias.data)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, ei), peer(xb, ei)
    torch.testing.assert_close(a, b)
    up = torch.randn_like(a)
    ga, gb = _grads(ours, a, up), _grads(peer, b, up)
    for k in ga:
        torch.testing.assert_close(ga[k], gb[k], msg=k)
    torch.testing.assert_close(xa.grad, xb.grad)


def test_gcn2_equals_pyg_gcn2conv():
    x, ei = random_graph(seed=4)
    x0 = torch.randn_like(x)
    ours = UnifewsGCN2Conv(8, alpha=0.1, theta=0.5, layer=2, config=DENSE).double()
    peer = GCN2Conv(8, alpha=0.1, theta=0.5, layer=2).double()
    peer.weight1.data.copy_(ours.weight1.data)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, x0, ei), peer(xb, x0, ei)
    torch.testing.assert_close(a, b)
    up = torch.randn_like(a)
    ga, gb = _grads(ours, a, up), _grads(peer, b, up)
    torch.testing.assert_close(ga["weight1"], gb["weight1"])
    torch.testing.assert_close(xa.grad, xb.grad)
