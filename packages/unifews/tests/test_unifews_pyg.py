"""The layers as PyG citizens: propagate (explainers, hooks), every graph form GCNConv takes, cached, improved,
masks bound to their graph, and mini-batches under pruning."""

import importlib.util

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.nn import GCNConv
from torch_geometric.utils import k_hop_subgraph, to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from unifews import UnifewsConfig, UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsGNN, UnifewsSAGEConv
from unifews.functional import diffusion_weights, message_scores

from .helpers import random_graph

PRUNE = UnifewsConfig(delta_a=0.6, delta_w=0.5)
# torch warns when PyG's to_torch_*_tensor builds a sparse tensor without saying whether to check invariants
pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse CSC tensor support is in beta:UserWarning"),
]


def _explainer(model):
    from torch_geometric.explain import Explainer, GNNExplainer

    return Explainer(
        model,
        GNNExplainer(epochs=15),
        explanation_type="model",
        node_mask_type=None,  # x unmasked: layer 1 scores (and keeps) the same edges in every epoch
        edge_mask_type="object",
        model_config={"mode": "multiclass_classification", "task_level": "node", "return_type": "raw"},
    )


class _TwoConvGCN(torch.nn.Module):
    """A user's model: two Unifews convs, each fed the input graph (no progressive hand-over)."""

    def __init__(self, cfg1, cfg2):
        super().__init__()
        self.conv1, self.conv2 = UnifewsGCNConv(8, 16, config=cfg1), UnifewsGCNConv(16, 3, config=cfg2)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_gnnexplainer_runs_and_gives_pruned_edges_no_attribution():
    x, ei = random_graph(n=60, m=300, f=8, seed=50, dtype=torch.float32)
    m = ei.size(1)
    torch.manual_seed(0)
    model = UnifewsGNN(8, 16, 3, 2, "gcn", 0.0, UnifewsConfig(delta_a=1.0, delta_w=0.3)).eval()
    expl = _explainer(model)(x, ei, index=torch.arange(10))
    assert expl.edge_mask.shape == (m,) and torch.isfinite(expl.edge_mask).all()
    kept = model.convs[0].edge_keep[:m]  # the graph's first m edges are the input's (PyG layout, loops last)
    assert 0 < int(kept.sum()) < m
    assert (expl.edge_mask[~kept] == 0).all()  # removed in layer 1, so in every layer: no message, no attribution
    assert (expl.edge_mask[kept] > 0).any()

    torch.manual_seed(0)
    # conv2 keeps only self-loops (δa = ∞): an edge conv1 removes carries no message anywhere
    user = _TwoConvGCN(UnifewsConfig(delta_a=1.0, delta_w=0.0), UnifewsConfig(delta_a=float("inf"))).eval()
    expl = _explainer(user)(x, ei, index=torch.arange(10))
    never = ~user.conv1.edge_keep[:m]
    assert never.any() and (expl.edge_mask[never] == 0).all() and (expl.edge_mask > 0).any()


def test_propagate_hooks_fire_and_see_the_kept_adjacency():
    x, ei = random_graph(n=40, m=200, seed=51)
    conv = UnifewsGCNConv(8, 4, config=PRUNE).double()
    seen = []
    conv.register_propagate_forward_hook(lambda mod, inputs, out: seen.append(("propagate", out.shape)))
    conv.register_message_and_aggregate_forward_pre_hook(
        lambda mod, inputs: seen.append(("adj_t", inputs[0].layout, inputs[0]._nnz()))
    )
    conv(x, ei)
    assert seen[0] == ("adj_t", torch.sparse_csr, conv.last_stats["edges_aggregated"])
    assert seen[1] == ("propagate", (40, 4))
    assert conv.last_stats["edges_aggregated"] < ei.size(1) + 40  # something was pruned


def _adj_forms(ei, n, w=None):
    """``edge_index`` forms of the same graph: adj_t (CSR, COO, CSC: rows are targets) and EdgeIndex."""
    t = ei.flip(0)  # adj_t[dst, src]
    return {
        "csr": to_torch_csr_tensor(t, w, size=(n, n)),
        "coo": to_torch_coo_tensor(t, w, size=(n, n)),
        "csc": to_torch_csc_tensor(t, w, size=(n, n)),
        "edge_index": EdgeIndex(ei.contiguous(), sparse_size=(n, n)),
        "edge_index_sorted": EdgeIndex(ei.contiguous(), sparse_size=(n, n)).sort_by("col")[0],
    }


def _run(make, x, graph, *extra):
    torch.manual_seed(0)
    conv = make().double()
    xr = x.clone().requires_grad_()
    out = conv(xr, *extra, graph) if extra else conv(xr, graph)
    out.square().sum().backward()
    return out, xr.grad, conv.last_stats["edges_kept"], {k: p.grad for k, p in conv.named_parameters()}


@pytest.mark.parametrize(
    "make",
    [
        lambda: UnifewsGCNConv(8, 5, config=PRUNE),
        lambda: UnifewsGCNConv(8, 5, improved=True, config=PRUNE),
        lambda: UnifewsSAGEConv(8, 5, config=PRUNE),
        lambda: UnifewsGATv2Conv(8, 3, heads=2, config=PRUNE),
        lambda: UnifewsGCN2Conv(8, alpha=0.1, theta=0.5, layer=1, config=PRUNE),
    ],
    ids=["gcn", "gcn_improved", "sage", "gatv2", "gcn2"],
)
def test_adj_t_and_edge_index_inputs_equal_edge_index(make):
    x, ei = random_graph(n=40, m=240, seed=52)
    extra = (torch.randn_like(x),) if isinstance(make(), UnifewsGCN2Conv) else ()
    ref = _run(make, x, ei, *extra)
    for form, graph in _adj_forms(ei, 40).items():
        if isinstance(make(), UnifewsGCNConv | UnifewsGCN2Conv) and form in ("csr", "coo", "csc"):
            graph = graph.to(torch.float64)
        got = _run(make, x, graph, *extra)
        torch.testing.assert_close(got[0], ref[0], atol=1e-6, rtol=0, msg=form)
        torch.testing.assert_close(got[1], ref[1], atol=1e-6, rtol=0, msg=form)
        assert got[2] == ref[2], form
        for k in ref[3]:
            torch.testing.assert_close(got[3][k], ref[3][k], atol=1e-6, rtol=0, msg=f"{form} {k}")


def test_normalize_false_adj_t_equals_pyg_gcnconv_on_the_same_adj_t():
    x, ei = random_graph(n=40, m=240, seed=53)
    ei_n, w = diffusion_weights(ei, 40, dtype=x.dtype)
    adj_t = to_torch_csr_tensor(ei_n.flip(0), w, size=(40, 40))
    ours = UnifewsGCNConv(8, 5, normalize=False, cached=True, config=UnifewsConfig(delta_a=0, delta_w=0)).double()
    peer = GCNConv(8, 5, normalize=False, cached=True).double()
    peer.lin.weight.data.copy_(ours.lin.weight.data)
    for _ in range(2):
        torch.testing.assert_close(ours(x, adj_t), peer(x, adj_t))


def test_improved_equals_pyg_gcnconv_improved():
    x, ei = random_graph(n=40, m=240, seed=54)
    w = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(0), dtype=x.dtype) + 0.5
    ours = UnifewsGCNConv(8, 5, improved=True, config=UnifewsConfig(delta_a=0, delta_w=0)).double()
    peer = GCNConv(8, 5, improved=True).double()
    peer.lin.weight.data.copy_(ours.lin.weight.data)
    torch.testing.assert_close(ours(x, ei, w), peer(x, ei, w))
    # Â = A + 2I also without edge weights; PyG 2.8's gcn_norm drops the fill value when edge_weight is None,
    # so its peer here is the same graph with explicit unit weights
    torch.testing.assert_close(ours(x, ei), peer(x, ei, torch.ones_like(w)))
    plain = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0, delta_w=0)).double()
    plain.load_state_dict(ours.state_dict())
    assert not torch.allclose(ours(x, ei), plain(x, ei))


@pytest.mark.skipif(importlib.util.find_spec("torch_sparse") is None, reason="torch_sparse is not installed")
def test_sparse_tensor_input_equals_edge_index():  # pragma: no cover - needs torch_sparse
    from torch_sparse import SparseTensor

    x, ei = random_graph(n=40, m=240, seed=55)
    adj_t = SparseTensor(row=ei[1], col=ei[0], sparse_sizes=(40, 40))
    make = lambda: UnifewsGCNConv(8, 5, config=PRUNE)  # noqa: E731
    torch.testing.assert_close(_run(make, x, adj_t)[0], _run(make, x, ei)[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("conv", ["gcn", "sage", "gcn2"])
def test_cached_equals_uncached_through_training(conv):
    x, ei = random_graph(n=50, m=300, seed=56)
    y = torch.randint(0, 3, (50,))
    runs = []
    for cached in (False, True):
        torch.manual_seed(0)
        model = UnifewsGNN(8, 16, 3, 2, conv, 0.0, UnifewsConfig(delta_a=0.5, delta_w=0.5), cached=cached).double()
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        outs = []
        for step in range(4):
            model.set_scheme("prune_all", "prune_inc" if step >= 2 else "prune_all")
            opt.zero_grad()
            out = model(x, ei.clone())  # a new tensor each step: the cache is checked by fingerprint
            torch.nn.functional.cross_entropy(out, y).backward()
            opt.step()
            outs.append(out.detach())
        runs.append((outs, [c.edge_keep.clone() for c in model.convs]))
        if cached:
            graph = model._cached_graph
            model(x, ei)
            assert model._cached_graph is graph  # normalisation and CSR orders kept across forwards
            with pytest.raises(ValueError, match="cached=True"):
                model(x, ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))])
    for a, b in zip(runs[0][0], runs[1][0]):
        torch.testing.assert_close(a, b)
    for a, b in zip(runs[0][1], runs[1][1]):
        assert torch.equal(a, b)


def test_cached_conv_refuses_another_graph_until_reset():
    x, ei = random_graph(n=40, m=240, seed=57)
    conv = UnifewsGCNConv(8, 4, cached=True, config=PRUNE).double()
    first = conv(x, ei)
    torch.testing.assert_close(conv(x, ei.clone()), first)
    other = random_graph(n=40, m=240, seed=58)[1]
    with pytest.raises(ValueError, match="cached=True"):
        conv(x, other)
    conv.reset_cache()
    fresh = UnifewsGCNConv(8, 4, config=PRUNE).double()
    fresh.load_state_dict(conv.state_dict())
    torch.testing.assert_close(conv(x, other), fresh(x, other))


def test_keep_masks_refuse_a_reordered_or_different_graph_of_the_same_size():
    x, ei = random_graph(n=40, m=240, seed=59)
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))
    for model in (
        UnifewsGCNConv(8, 4, config=PRUNE).double(),
        UnifewsGNN(8, 16, 3, 2, "gcn", 0.0, PRUNE).double(),
        UnifewsGATv2Conv(8, 4, config=PRUNE).double(),
    ):
        model(x, ei)
        model.set_scheme("keep", "keep")
        model(x, ei.clone())  # the same graph: fine
        with pytest.raises(ValueError, match="fingerprint"):
            model(x, ei[:, perm])
        swapped = ei.clone()
        swapped[1, 0] = (swapped[1, 0] + 1) % 40  # one edge rewired, same size
        with pytest.raises(ValueError, match="fingerprint"):
            model(x, swapped)


def _batches(ei, n, w=None, size=10):
    for start in range(0, n, size):
        seeds = torch.arange(start, min(n, start + size))
        subset, sub_ei, mapping, edge_mask = k_hop_subgraph(seeds, 2, ei, relabel_nodes=True, num_nodes=n)
        yield seeds, subset, sub_ei, mapping, None if w is None else w[edge_mask]


@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_minibatches_under_pruning_with_frozen_thresholds_equal_the_full_graph(conv):
    n = 150
    x, ei = random_graph(n=n, m=260, f=8, seed=60)  # sparse: 2-hop batches are real subgraphs
    torch.manual_seed(0)
    cfg = UnifewsConfig(delta_a=0.8, delta_w=0.5)  # relative thresholds (the default)
    model = UnifewsGNN(8, 16, 3, 2, conv, 0.0, cfg, normalize=conv == "sage").double().eval()
    w = None
    if conv == "gcn":  # GCN weights from full-graph degrees, sliced with each batch
        ei, w = diffusion_weights(ei, n, dtype=x.dtype)
    with torch.no_grad():
        full = model(x, ei, w)  # prunes relative to the full graph's mean message norm
        model.set_scheme("prune_all", "keep")  # weight masks fixed for inference
        thetas = model.freeze_edge_thresholds()
        torch.testing.assert_close(model(x, ei, w), full)  # the frozen absolute θ prunes the same edges
        assert model.sparsity()["edge_total"] > 0.1
        sizes = []
        for seeds, subset, sub_ei, mapping, sub_w in _batches(ei, n, w):
            sizes.append(subset.numel())
            torch.testing.assert_close(model(x[subset], sub_ei, sub_w)[mapping], full[seeds])
        assert max(sizes) < n

        # unfrozen: each batch's θ is δa times the batch's own mean message norm (documented semantics)
        model.unfreeze_edge_thresholds()
        seeds, subset, sub_ei, mapping, sub_w = next(_batches(ei, n, w))
        model(x[subset], sub_ei, sub_w)
        conv1 = model.convs[0]
        z = x[subset] @ (conv1.lin.weight * conv1.lin_mask).t() if conv == "gcn" else x[subset]
        if conv == "sage":
            ones = torch.ones(sub_ei.size(1), dtype=x.dtype)
            sub_w = torch.zeros(subset.numel(), dtype=x.dtype).index_add_(0, sub_ei[1], ones).reciprocal()[sub_ei[1]]
        expected = 0.8 * message_scores(sub_ei, sub_w, z).mean()
        assert conv1.last_stats["theta_a"] == pytest.approx(float(expected), rel=1e-9)
        assert conv1.last_stats["theta_a"] != pytest.approx(thetas[0], rel=1e-3)


def test_freeze_needs_a_pruning_forward():
    model = UnifewsGNN(8, 16, 3, 2, "gcn", 0.0, PRUNE)
    with pytest.raises(RuntimeError, match="pruning forward"):
        model.freeze_edge_thresholds()


def _has_sampler() -> bool:
    return any(importlib.util.find_spec(m) is not None for m in ("pyg_lib", "torch_sparse"))


@pytest.mark.skipif(not _has_sampler(), reason="NeighborLoader needs pyg-lib or torch-sparse (neither installed)")
@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_neighbor_loader_under_pruning_with_frozen_thresholds(conv):  # pragma: no cover - needs a sampler
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    x, ei = random_graph(n=150, m=260, f=8, seed=61)
    torch.manual_seed(0)
    model = UnifewsGNN(8, 16, 3, 2, conv, 0.0, UnifewsConfig(delta_a=0.8, delta_w=0.5), normalize=conv == "sage")
    model = model.double().eval()
    data = Data(x=x, edge_index=ei)
    if conv == "gcn":
        data.edge_index, data.edge_weight = diffusion_weights(ei, 150, dtype=x.dtype)
    with torch.no_grad():
        full = model(x, data.edge_index, data.edge_weight if conv == "gcn" else None)
        model.set_scheme("prune_all", "keep")
        model.freeze_edge_thresholds()
        for batch in NeighborLoader(data, num_neighbors=[-1, -1], batch_size=10, shuffle=False):
            out = model(batch.x, batch.edge_index, batch.edge_weight if conv == "gcn" else None)
            torch.testing.assert_close(out[: batch.batch_size], full[batch.n_id[: batch.batch_size]])
