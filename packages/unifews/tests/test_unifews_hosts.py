"""PyG drop-in behaviour: per-graph pruning in a Batch, bipartite / heterogeneous graphs (SAGEConv, GATv2Conv,
to_hetero), GATv2's edge features and attention weights, GCN2Conv's separate weights, lazy sizes, schemes through
state_dict, and input errors."""

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import GATv2Conv, GCN2Conv, SAGEConv, to_hetero

from unifews import UnifewsConfig, UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsGNN, UnifewsSAGEConv
from unifews.prop import unifews_propagate

from .helpers import random_graph

DENSE = UnifewsConfig(delta_a=0.0, delta_w=0.0)
PRUNE = UnifewsConfig(delta_a=0.8, delta_w=0.5)


def _two_graphs():
    xa, ea = random_graph(n=25, m=90, seed=11)
    xb, eb = random_graph(n=20, m=80, seed=12)
    return Batch.from_data_list([Data(x=xa, edge_index=ea), Data(x=10 * xb + 3, edge_index=eb)])


def _call(conv, x, ei, **kw):
    if isinstance(conv, UnifewsGCN2Conv):
        return conv(x, x, ei, **kw)
    return conv(x, ei, **kw)


@pytest.mark.parametrize(
    "make",
    [
        lambda: UnifewsGCNConv(8, 6, config=PRUNE),
        lambda: UnifewsSAGEConv(8, 6, config=PRUNE),
        lambda: UnifewsGATv2Conv(8, 3, heads=2, config=PRUNE),
        lambda: UnifewsGCN2Conv(8, alpha=0.2, theta=0.5, layer=1, shared_weights=False, config=PRUNE),
    ],
)
def test_a_graph_in_a_batch_is_pruned_as_alone(make):
    """With ``batch``, a graph's kept edges and outputs do not depend on its batch mates (one with 10x features)."""
    torch.manual_seed(0)
    conv = make().double().eval()
    data = _two_graphs()
    out = _call(conv, data.x, data.edge_index, batch=data.batch)
    kept_batched = conv.edge_keep.clone()
    src_graph = data.batch[conv.kept_edge_index[0]] if conv.kept_edge_index is not None else None
    for g in range(2):
        alone = data.get_example(g)
        ref = _call(conv, alone.x, alone.edge_index)
        torch.testing.assert_close(out[data.batch == g], ref, rtol=1e-9, atol=1e-9)
        assert int((src_graph == g).sum()) == int(conv.edge_keep.sum())  # same number of kept edges
    # without batch one mean over both graphs decides: the small-feature graph loses edges to its mate
    mixed = _call(conv, data.x, data.edge_index)
    assert not torch.equal(conv.edge_keep, kept_batched) or not torch.allclose(mixed, out)


def test_unifews_gnn_graph_level_batches():
    torch.manual_seed(1)
    model = UnifewsGNN(8, 16, 3, 2, "gcn", 0.0, PRUNE).double().eval()
    data = _two_graphs()
    out = model(data.x, data.edge_index, batch=data.batch)
    alone = data.get_example(0)
    torch.testing.assert_close(out[data.batch == 0], model(alone.x, alone.edge_index), rtol=1e-9, atol=1e-9)
    with pytest.raises(RuntimeError, match="freeze after a forward on one graph"):
        model(data.x, data.edge_index, batch=data.batch)
        model.convs[0].freeze_edge_threshold()
    with pytest.raises(ValueError, match="batch must have one entry per node"):
        model(data.x, data.edge_index, batch=data.batch[:-1])
    with pytest.raises(ValueError, match="different graphs"):
        model(data.x, data.edge_index, batch=torch.zeros_like(data.batch).index_fill_(0, torch.tensor([0]), 1))


def _bipartite(seed=0):
    g = torch.Generator().manual_seed(seed)
    x_src = torch.randn(12, 8, generator=g, dtype=torch.float64)
    x_dst = torch.randn(9, 6, generator=g, dtype=torch.float64)
    ei = torch.stack([torch.randint(0, 12, (40,), generator=g), torch.randint(0, 9, (40,), generator=g)])
    ei = torch.unique(ei, dim=1)
    return x_src, x_dst, ei


def test_bipartite_sage_equals_pyg_sageconv_and_prunes():
    x_src, x_dst, ei = _bipartite()
    ours = UnifewsSAGEConv((8, 6), 4, config=DENSE).double()
    peer = SAGEConv((8, 6), 4).double()
    peer.load_state_dict(ours.state_dict(), strict=False)
    torch.testing.assert_close(ours((x_src, x_dst), ei), peer((x_src, x_dst), ei))
    norm = UnifewsSAGEConv((8, 6), 4, normalize=True, config=DENSE).double()
    peer_n = SAGEConv((8, 6), 4, normalize=True).double()
    peer_n.load_state_dict(norm.state_dict(), strict=False)
    torch.testing.assert_close(norm((x_src, x_dst), ei), peer_n((x_src, x_dst), ei))
    pruned = UnifewsSAGEConv((8, 6), 4, config=PRUNE).double()
    out = pruned((x_src, x_dst), ei)
    assert out.shape == (9, 4) and 0 < pruned.sparsity()["edge"] < 1
    with pytest.raises(ValueError, match="aggr='mean' only"):
        UnifewsSAGEConv(8, 4, aggr="max")


@pytest.mark.parametrize("loops", [False, True])
def test_bipartite_gatv2_equals_pyg_gatv2conv(loops):
    x_src, x_dst, ei = _bipartite(1)
    ours = UnifewsGATv2Conv((8, 6), 4, heads=2, add_self_loops=loops, config=DENSE).double()
    peer = GATv2Conv((8, 6), 4, heads=2, add_self_loops=loops).double()
    peer.load_state_dict(ours.state_dict(), strict=False)
    torch.testing.assert_close(ours((x_src, x_dst), ei), peer((x_src, x_dst), ei))


def test_gatv2_edge_dim_fill_value_residual_and_attention_weights_equal_pyg():
    x, ei = random_graph(seed=21)
    attr = torch.randn(ei.size(1), 3, dtype=torch.float64)
    kw = {"heads": 2, "edge_dim": 3, "residual": True}
    ours = UnifewsGATv2Conv(8, 4, config=DENSE, **kw).double()
    peer = GATv2Conv(8, 4, **kw).double()
    peer.load_state_dict(ours.state_dict(), strict=False)
    a, (ei_a, alpha_a) = ours(x, ei, attr, return_attention_weights=True)
    b, (ei_b, alpha_b) = peer(x, ei, attr, return_attention_weights=True)
    torch.testing.assert_close(a, b)
    assert torch.equal(ei_a, ei_b)
    torch.testing.assert_close(alpha_a, alpha_b)
    shared = UnifewsGATv2Conv(8, 4, share_weights=True, config=DENSE).double()
    peer_s = GATv2Conv(8, 4, share_weights=True).double()
    peer_s.load_state_dict(shared.state_dict(), strict=False)
    torch.testing.assert_close(shared(x, ei), peer_s(x, ei))
    pruned = UnifewsGATv2Conv(8, 4, heads=2, edge_dim=3, config=PRUNE).double()
    _, (_, alpha) = pruned(x, ei, attr, return_attention_weights=True)
    removed = ~pruned.edge_keep
    assert removed.any() and (alpha[removed] == 0).all()  # the weights returned are the ones aggregated


def test_gcn2_separate_weights_equal_pyg_gcn2conv():
    x, ei = random_graph(seed=22)
    x0 = torch.randn_like(x)
    ours = UnifewsGCN2Conv(8, alpha=0.1, theta=0.5, layer=2, shared_weights=False, config=DENSE).double()
    peer = GCN2Conv(8, alpha=0.1, theta=0.5, layer=2, shared_weights=False).double()
    peer.load_state_dict(ours.state_dict(), strict=False)
    torch.testing.assert_close(ours(x, x0, ei), peer(x, x0, ei))
    pruned = UnifewsGCN2Conv(8, alpha=0.1, theta=0.5, layer=2, shared_weights=False, config=PRUNE).double()
    pruned(x, x0, ei)
    assert pruned.weight2_mask is not None and not bool(pruned.weight2_mask.all())


@pytest.mark.parametrize("kind", ["sage", "gatv2"])
def test_to_hetero_equals_the_pyg_peer(kind):
    """``to_hetero`` of a model built from Unifews layers (lazy ``(-1, -1)`` sizes) runs on a heterogeneous graph
    and equals the same model built from PyG's layers with the same weights."""
    data = HeteroData()
    g = torch.Generator().manual_seed(5)
    data["paper"].x = torch.randn(10, 8, generator=g)
    data["author"].x = torch.randn(7, 6, generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 7, (25,), generator=g), torch.randint(0, 10, (25,), generator=g)]
    )
    data["paper", "rev_writes", "author"].edge_index = data["author", "writes", "paper"].edge_index.flip(0)

    def build(ours: bool):
        if kind == "sage":
            cls = UnifewsSAGEConv if ours else SAGEConv
            extra = {"config": DENSE} if ours else {}
            c1, c2 = cls((-1, -1), 16, **extra), cls((-1, -1), 4, **extra)
        else:
            cls = UnifewsGATv2Conv if ours else GATv2Conv
            extra = {"config": DENSE} if ours else {}
            c1 = cls((-1, -1), 16, add_self_loops=False, **extra)
            c2 = cls((-1, -1), 4, add_self_loops=False, **extra)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.conv2 = c1, c2

            def forward(self, x, edge_index):
                return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

        torch.manual_seed(0)
        return to_hetero(Net(), data.metadata(), aggr="sum")

    ours, peer = build(True), build(False)
    with torch.no_grad():
        out_ours = ours(data.x_dict, data.edge_index_dict)  # materialises the lazy layers
        peer(data.x_dict, data.edge_index_dict)
        peer.load_state_dict(ours.state_dict(), strict=False)
        out_peer = peer(data.x_dict, data.edge_index_dict)
    for node_type in ("paper", "author"):
        torch.testing.assert_close(out_ours[node_type], out_peer[node_type], rtol=1e-5, atol=1e-6)


def test_lazy_in_channels_equal_the_sized_layer():
    x, ei = random_graph(seed=23)
    for lazy, sized in (
        (UnifewsGCNConv(-1, 5, config=PRUNE), UnifewsGCNConv(8, 5, config=PRUNE)),
        (UnifewsSAGEConv(-1, 5, config=PRUNE), UnifewsSAGEConv(8, 5, config=PRUNE)),
        (UnifewsGATv2Conv(-1, 5, config=PRUNE), UnifewsGATv2Conv(8, 5, config=PRUNE)),
    ):
        lazy = lazy.double()
        first = lazy(x, ei)  # materialised from x
        sized = sized.double()
        sized.load_state_dict(lazy.state_dict())
        torch.testing.assert_close(sized(x, ei), first)
        assert lazy.sparsity()["weight"] > 0


def test_load_state_dict_restores_the_scheme_and_a_frozen_threshold():
    x, ei = random_graph(seed=24)
    torch.manual_seed(2)
    a = UnifewsGCNConv(8, 5, config=PRUNE).double()
    a(x, ei)
    a.freeze_edge_threshold()
    a.set_scheme("keep", "keep")
    b = UnifewsGCNConv(8, 5, config=PRUNE).double()
    b.load_state_dict(a.state_dict())
    assert (b.scheme_a, b.scheme_w, b.theta_a) == ("keep", "keep", a.theta_a)
    x2 = 3 * x + 1  # another input: 'keep' reuses the masks, 'prune_all' would recompute them
    torch.testing.assert_close(b(x2, ei), a(x2, ei))
    old = {k: v for k, v in a.state_dict().items() if not k.endswith("_extra_state")}
    UnifewsGCNConv(8, 5, config=PRUNE).double().load_state_dict(old)  # a state dict from before is still accepted


def test_input_errors_dtype_and_column_offset():
    x, ei = random_graph(seed=25)  # float64
    for conv in (UnifewsGCNConv(8, 4), UnifewsSAGEConv(8, 4), UnifewsGATv2Conv(8, 4)):
        with pytest.raises(TypeError, match=r"x has dtype torch.float64 but .* parameters are torch.float32"):
            conv(x, ei)
    with pytest.raises(TypeError, match="x_0 has dtype torch.float32"):
        UnifewsGCN2Conv(8, alpha=0.1).double()(x, x.float(), ei)
    with pytest.raises(ValueError, match="column_offset"):
        unifews_propagate(x, ei, 2, 0.1, column_offset=-1)
    with pytest.raises(ValueError, match="in_channels entries"):
        UnifewsSAGEConv((8, 0), 4)
    with pytest.raises(ValueError, match="edge_attr must have one row per edge"):
        UnifewsGATv2Conv(8, 4, edge_dim=2).double()(x, ei, torch.ones(3, 2, dtype=x.dtype))
