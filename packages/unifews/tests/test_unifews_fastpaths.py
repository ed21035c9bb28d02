"""The layers' fast paths against their references: the one-pass kept-CSR selection (numba) against the torch
selection, the remembered kept CSR against a fresh one, and a layer that reuses its masks against one that selects
again."""

import warnings

import pytest
import torch

from unifews import UnifewsConfig, UnifewsGCNConv, _kept
from unifews import graph as graph_mod
from unifews.graph import LayerGraph

from .helpers import random_graph

needs_numba = pytest.mark.skipif(not _kept.AVAILABLE, reason="numba is not installed (the [fast] extra)")


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
        monkeypatch.setattr(graph_mod._kept, "AVAILABLE", False)
        ref = _parts(g.csr(g.w, mask.clone(), transposed))  # a new mask object: no remembered CSR
        monkeypatch.setattr(graph_mod._kept, "AVAILABLE", True)
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


def _layer(kind: str, f: int, cfg: UnifewsConfig, dtype: torch.dtype):
    from unifews import UnifewsGCN2Conv, UnifewsSAGEConv

    torch.manual_seed(0)
    if kind == "gcn":
        conv = UnifewsGCNConv(f, 5, config=cfg)
    elif kind == "sage":
        conv = UnifewsSAGEConv(f, 5, config=cfg)
    else:
        conv = UnifewsGCN2Conv(f, alpha=0.1, theta=0.5, layer=1, config=cfg)
    return conv.to(dtype)


def _run(conv, x, ei, active=None, grad=True):
    xr = x.clone().requires_grad_(grad)
    kw = {} if active is None else {"active": active}
    args = (xr, x, ei) if type(conv).__name__ == "UnifewsGCN2Conv" else (xr, ei)
    out = conv(*args, **kw)
    if grad:
        out.square().sum().backward()
    return out.detach(), None if xr.grad is None else xr.grad, conv.edge_keep.clone(), dict(conv.last_stats)


@needs_numba
@pytest.mark.parametrize("kind", ["gcn", "sage", "gcn2"])
@pytest.mark.parametrize("threshold", ["relative", "absolute"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_rule_equals_torch_rule(monkeypatch, kind, threshold, dtype):
    """The one-pass rule (scores, threshold, keep mask, both kept CSRs: ``LayerGraph.select_scored``) against the
    torch rule on the same layer: the same mask bit for bit, the same statistics, outputs and gradients; on an
    unsorted edge list (the CSR order is a permutation), with and without ``active``, at several thresholds."""
    x, ei = random_graph(n=70, m=500, f=6, seed=11, dtype=dtype)
    ei = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))]  # not sorted by target
    calls = {"n": 0}
    real = LayerGraph.select_scored

    def counted(self, *a, **k):
        out = real(self, *a, **k)
        calls["n"] += out is not None
        return out

    monkeypatch.setattr(LayerGraph, "select_scored", counted)
    # the SpMMs through torch's kernel in both runs (the compiled ones, used on one thread, scatter the backward in
    # another order; they have their own test below): only the rule differs
    monkeypatch.setattr(graph_mod, "compiled_spmm_applies", lambda z, w: False)
    partial = 0  # cases where something was pruned and something kept
    for delta in (0.3, 1.0, 2.5) if threshold == "relative" else (0.05, 0.4, 1.5):
        cfg = UnifewsConfig(delta_a=delta, delta_w=0.0, threshold=threshold)
        for use_active in (False, True):
            conv = _layer(kind, 6, cfg, dtype)
            probe = _run(conv, x, ei, grad=False)[2]  # the layer's edge count (self-loops added)
            active = None
            if use_active:
                active = torch.rand(probe.numel(), generator=torch.Generator().manual_seed(1)) < 0.7
            before = calls["n"]
            fast = _run(conv, x, ei, active)
            assert calls["n"] == before + 1  # the compiled rule ran
            monkeypatch.setattr(graph_mod._kept, "AVAILABLE", False)
            ref_conv = _layer(kind, 6, cfg, dtype)
            ref = _run(ref_conv, x, ei, active)
            monkeypatch.setattr(graph_mod._kept, "AVAILABLE", True)
            assert calls["n"] == before + 1  # the reference did not
            assert torch.equal(fast[2], ref[2])
            partial += 0 < int(fast[2].sum()) < fast[2].numel()
            assert fast[3] == ref[3]
            torch.testing.assert_close(fast[0], ref[0], rtol=0, atol=0)
            torch.testing.assert_close(fast[1], ref[1], rtol=0, atol=0)
    assert partial >= 3


@needs_numba
def test_compiled_rule_kept_csrs_equal_fresh_selections():
    """The kept CSRs the compiled rule leaves for the SpMMs equal a fresh torch selection under its mask, in both
    orders; a frozen threshold takes the same path; inference mode and a lock fall back to the torch rule."""
    x, ei = random_graph(n=60, m=400, f=5, seed=12, dtype=torch.float32)
    conv = UnifewsGCNConv(5, 4, cached=True, config=UnifewsConfig(delta_a=0.9, delta_w=0.0))
    out = conv(x.requires_grad_(), ei)
    out.sum().backward()
    g = conv._cached_graph
    keep = conv.edge_keep
    for transposed in (False, True):
        memo = g.csr(g.w, g.__dict__["_kept_fwd"][0], transposed)
        assert memo is g.__dict__["_kept_bwd" if transposed else "_kept_fwd"][3]  # remembered, not selected again
        fresh = g.csr(g.w, keep.clone(), transposed)
        for a, b in zip(_parts(memo), _parts(fresh)):
            assert torch.equal(a, b)
    theta = conv.freeze_edge_threshold()
    frozen = conv(x, ei)
    assert conv.last_stats["theta_a"] == theta and torch.equal(conv.edge_keep, keep)
    torch.testing.assert_close(frozen, out)
    with torch.inference_mode():
        inf = conv(x.detach(), ei)
    assert torch.equal(conv.edge_keep, keep)
    torch.testing.assert_close(inf, out.detach())
    locked = conv(x, ei, lock=torch.tensor([0, 1]))
    assert torch.equal(conv.edge_keep, keep) and locked.shape == out.shape


@needs_numba
@pytest.mark.parametrize("kind", ["gcn", "sage"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scheme", ["prune_all", "keep", "prune_inc", "lock"])
def test_compiled_spmm_equals_torch_spmm(monkeypatch, kind, dtype, scheme):
    """The compiled SpMMs (gather forward, scatter backward from the forward CSR: no transposed CSR) against torch's
    CSR kernel on the same layer and masks: outputs equal bit for bit (the same summation order), input and edge
    weight gradients equal to rounding."""
    from icml25_shared.device import torch_threads

    calls = {"n": 0}
    real = graph_mod._kept.spmm_scatter

    def counted(*a):
        calls["n"] += 1
        return real(*a)

    monkeypatch.setattr(graph_mod._kept, "spmm_scatter", counted)
    x, ei = random_graph(n=80, m=600, f=7, seed=13, dtype=dtype)
    ei = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(2))]
    ew = torch.rand(ei.size(1), dtype=dtype, generator=torch.Generator().manual_seed(3))
    cfg = UnifewsConfig(delta_a=0.9, delta_w=0.0)
    results = []
    for compiled in (True, False):
        monkeypatch.setattr(graph_mod, "compiled_spmm_applies", lambda z, w, c=compiled: c)
        conv = _layer(kind, 7, cfg, dtype)
        with torch_threads(1):
            conv(x, ei, ew)  # masks of a first forward
            if scheme != "lock":
                conv.set_scheme(scheme, "keep")
            xr, wr = x.clone().requires_grad_(), ew.clone().requires_grad_()
            kw = {"lock": torch.arange(0, 80, 7)} if scheme == "lock" else {}
            out = conv(xr, ei, wr, **kw)
            (out * torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)).sum().backward()
        results.append((out.detach(), xr.grad, wr.grad, conv.edge_keep.clone()))
    assert calls["n"] == 1  # the compiled backward ran once, the reference not at all
    (o1, gx1, gw1, k1), (o2, gx2, gw2, k2) = results
    assert torch.equal(k1, k2) and 0 < int(k1.sum()) < k1.numel()
    assert torch.equal(o1, o2)
    torch.testing.assert_close(gx1, gx2)
    torch.testing.assert_close(gw1, gw2)
