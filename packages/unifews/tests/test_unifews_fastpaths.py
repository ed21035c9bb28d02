"""The layers' fast paths against their references: the one-pass kept-CSR selection (numba) against the torch
selection, the remembered kept CSR against a fresh one, and a layer that reuses its masks against one that selects
again."""

import warnings

import pytest
import torch

from unifews import UnifewsConfig, UnifewsGCNConv, _fused
from unifews import graph as graph_mod
from unifews.graph import LayerGraph

from .helpers import random_graph

needs_numba = pytest.mark.skipif(not _fused.AVAILABLE, reason="numba is not installed (the [fast] extra)")


def _dense(a: torch.Tensor) -> torch.Tensor:
    return a.to_dense()


def _parts(a: torch.Tensor):
    return a.crow_indices(), a.col_indices(), a.values()


@needs_numba
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("input_form", ["edge_index", "csr"])
def test_one_pass_selection_equals_torch_selection(monkeypatch, transposed, input_form):
    x, ei = random_graph(n=50, m=300, f=4, seed=3)
    n = x.size(0)
    w = torch.rand(ei.size(1), dtype=x.dtype)
    adj = ei
    if input_form == "csr":
        with warnings.catch_warnings():  # torch's one-time "CSR support is beta" notice
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
            adj = torch.sparse_coo_tensor(ei.flip(0), w, (n, n), check_invariants=True).to_sparse_csr()
    g = LayerGraph.prepare(adj, None, n, normalize=True, dtype=x.dtype)
    for seed, p_keep in ((0, 0.0), (1, 0.3), (2, 0.8), (3, 1.0)):
        mask = torch.rand(g.m, generator=torch.Generator().manual_seed(seed)) < p_keep
        fast = _parts(g.csr(g.w, mask, transposed))
        monkeypatch.setattr(graph_mod._fused, "AVAILABLE", False)
        ref = _parts(g.csr(g.w, mask.clone(), transposed))  # a new mask object: no remembered CSR
        monkeypatch.setattr(graph_mod._fused, "AVAILABLE", True)
        for a, b in zip(fast, ref):
            assert a.dtype == b.dtype
            assert torch.equal(a, b)


def test_remembered_csr_follows_in_place_changes():
    x, ei = random_graph(n=40, m=200, f=4, seed=4)
    g = LayerGraph.prepare(ei, None, x.size(0), normalize=True, dtype=x.dtype)
    mask = torch.rand(g.m, generator=torch.Generator().manual_seed(0)) < 0.5
    first = g.csr(g.w, mask)
    assert g.csr(g.w, mask) is first  # the same mask, unchanged: selected once
    mask[: g.m // 2] = ~mask[: g.m // 2]  # changed in place: selected again
    again = g.csr(g.w, mask)
    assert again is not first
    torch.testing.assert_close(_dense(again), _dense(g.csr(g.w, mask.clone())))
    w2 = g.w * 2  # other weights: selected again
    torch.testing.assert_close(_dense(g.csr(w2, mask)), 2 * _dense(again))


@pytest.mark.parametrize("scheme", ["prune_all", "keep"])
def test_layer_with_remembered_csr_equals_fresh_layer(scheme):
    """Repeated forward+backward passes (the kept CSRs remembered under ``keep``) give the outputs and gradients of
    a freshly built layer on the same masks."""
    x, ei = random_graph(n=60, m=400, f=6, seed=5)
    cfg = UnifewsConfig(delta_a=0.8, delta_w=0.0)
    conv = UnifewsGCNConv(6, 5, cached=True, config=cfg).double()
    conv(x, ei)
    conv.set_scheme(scheme, "keep")
    for _ in range(3):
        xr = x.clone().requires_grad_()
        out = conv(xr, ei)
        out.square().sum().backward()
        ref = UnifewsGCNConv(6, 5, config=cfg).double()
        ref.load_state_dict(conv.state_dict())
        xr2 = x.clone().requires_grad_()
        out2 = ref(xr2, ei)
        out2.square().sum().backward()
        torch.testing.assert_close(out, out2)
        torch.testing.assert_close(xr.grad, xr2.grad)
        assert ref.sparsity()["edge"] > 0.2


def test_inference_mode_forward_equals_no_grad_forward():
    """Under ``torch.inference_mode`` (tensors without a version counter) nothing is remembered, results agree."""
    x, ei = random_graph(n=40, m=200, f=6, seed=6)
    conv = UnifewsGCNConv(6, 5, cached=True, config=UnifewsConfig(delta_a=0.8, delta_w=0.3)).double()
    with torch.no_grad():
        ref = conv(x, ei)
    with torch.inference_mode():  # masks made here are inference tensors
        outs = [conv(x, ei) for _ in range(2)]
    conv.set_scheme("keep", "keep")
    with torch.inference_mode():
        outs += [conv(x, ei) for _ in range(2)]
    for out in outs:
        torch.testing.assert_close(out, ref)
