"""Progressive edges, schemes (prune_all / prune_inc / keep), lock, gradients, state dicts, the model."""

import torch
import torch.nn.functional as F

from unifews import UnifewsConfig, UnifewsGCNConv, UnifewsGNN, spmm
from unifews.functional import diffusion_weights, edge_keys

from .helpers import random_graph


def _model(delta_a=0.5, delta_w=0.5, layers=3, conv="gcn", **kw):
    torch.manual_seed(0)
    return UnifewsGNN(8, 16, 3, layers, conv, 0.0, UnifewsConfig(delta_a=delta_a, delta_w=delta_w, **kw)).double()


def test_edge_sets_nested_across_layers():
    x, ei = random_graph(n=60, m=400, seed=10)
    for conv in ("gcn", "sage", "gat"):
        model = _model(0.6, 0.3, conv=conv)
        model(x, ei)
        sets = [set(edge_keys(c.kept_edge_index, 60).tolist()) for c in model.convs]
        assert all(a >= b for a, b in zip(sets, sets[1:])), conv
        assert len(sets[-1]) < len(sets[0]) or conv == "gat"
        assert model.sparsity()["edge_total"] > 0


def test_prune_inc_weight_sparsity_never_falls_and_zeroes_values():
    x, ei = random_graph(n=60, m=400, seed=11)
    model = _model(0.3, 0.8)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    y = torch.randint(0, 3, (60,))
    model.set_scheme("prune_all", "prune_inc")
    prev = -1.0
    for _ in range(8):
        opt.zero_grad()
        loss = F.cross_entropy(model(x, ei), y)
        sp = model.sparsity()["weight"]
        assert sp >= prev
        prev = sp
        for conv in model.convs:  # pruned values are zeroed by the prune_inc forward
            assert torch.all(conv.lin.weight[~conv.lin_mask] == 0)
        loss.backward()
        opt.step()
    assert prev > 0


def test_prune_all_rewinds_values_bit_exactly():
    x, ei = random_graph(seed=12)
    conv = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0.0, delta_w=1.5)).double()
    before = conv.lin.weight.detach().clone()
    conv(x, ei)
    assert not conv.lin_mask.all()
    assert torch.equal(conv.lin.weight, before)  # dense values stored untouched
    conv.config.delta_w = 0.0
    out = conv(x, ei)
    assert conv.lin_mask.all()
    ref = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0.0, delta_w=0.0)).double()
    ref.load_state_dict(conv.state_dict())
    assert torch.equal(out, ref(x, ei))


def test_edge_prune_inc_intersects_with_stored_edges():
    x, ei = random_graph(n=50, m=300, seed=13)
    conv = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0.8, delta_w=0.0)).double()
    conv(x, ei)
    first = set(edge_keys(conv.kept_edge_index, 50).tolist())
    conv.set_scheme("prune_inc", "prune_all")
    conv(torch.randn_like(x), ei)  # a different input would keep other edges under prune_all
    second = set(edge_keys(conv.kept_edge_index, 50).tolist())
    assert second <= first


def test_keep_reuses_stored_masks_exactly():
    x, ei = random_graph(n=50, m=300, seed=14)
    conv = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0.8, delta_w=0.8)).double()
    conv(x, ei)
    edge, wmask = conv.edge_keep.clone(), conv.lin_mask.clone()
    conv.set_scheme("keep", "keep")
    x2 = torch.randn_like(x) * 10
    out = conv(x2, ei)
    assert torch.equal(conv.edge_keep, edge) and torch.equal(conv.lin_mask, wmask)
    ei_n, w = diffusion_weights(ei, 50, dtype=x.dtype)
    ref = spmm(ei_n[:, edge], w[edge], x2 @ (conv.lin.weight * wmask).t()) + conv.bias
    torch.testing.assert_close(out, ref)


def test_lock_restores_messages_into_locked_nodes_in_that_layer_only():
    x, ei = random_graph(n=50, m=300, seed=15)
    conv = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=1.0, delta_w=0.0)).double()
    dense = UnifewsGCNConv(8, 5, config=UnifewsConfig(delta_a=0.0, delta_w=0.0)).double()
    dense.load_state_dict(conv.state_dict(), strict=False)
    lock = torch.zeros(50, dtype=torch.bool)
    lock[:10] = True
    out_free, (g_free, _) = conv(x, ei, return_graph=True)
    out_lock, (g_lock, _) = conv(x, ei, lock=lock, return_graph=True)
    ref = dense(x, ei)
    torch.testing.assert_close(out_lock[lock], ref[lock])  # locked rows: every message restored
    torch.testing.assert_close(out_lock[~lock], out_free[~lock])  # other rows: unchanged
    assert not torch.allclose(out_free[lock], ref[lock])
    assert torch.equal(g_free, g_lock)  # the lock does not reach the next layer
    out_idx = conv(x, ei, lock=torch.arange(10))
    torch.testing.assert_close(out_idx, out_lock)


def test_gradcheck_zero_gradient_at_pruned_weights_and_edges():
    x, ei = random_graph(n=12, m=40, f=4, seed=16)
    conv = UnifewsGCNConv(4, 3, config=UnifewsConfig(delta_a=0.8, delta_w=0.8)).double()
    conv(x, ei)
    conv.set_scheme("keep", "keep")  # masks frozen
    keep, wmask = conv.edge_keep.clone(), conv.lin_mask.clone()
    ei_n, w = diffusion_weights(ei, 12, dtype=x.dtype)

    def f(weight, xx, ww):
        z = xx @ (weight * wmask).t()
        return spmm(ei_n[:, keep], ww[keep], z)

    inputs = (conv.lin.weight.detach().clone().requires_grad_(), x.clone().requires_grad_(), w.clone().requires_grad_())
    assert torch.autograd.gradcheck(f, inputs)
    out = f(*inputs)
    out.sum().backward()
    assert torch.all(inputs[0].grad[~wmask] == 0)
    assert torch.all(inputs[2].grad[~keep] == 0) and inputs[2].grad[keep].abs().sum() > 0
    conv.zero_grad()
    conv(x, ei).sum().backward()
    assert torch.all(conv.lin.weight.grad[~wmask] == 0)


def test_state_dict_round_trip_keeps_weights_and_masks(tmp_path):
    x, ei = random_graph(n=40, m=200, seed=17)
    model = _model(0.5, 0.5)
    model(x, ei)
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    fresh = _model(0.5, 0.5)
    fresh.load_state_dict(torch.load(path))
    for a, b in zip(model.convs, fresh.convs):
        assert torch.equal(a.lin.weight, b.lin.weight) and torch.equal(a.lin_mask, b.lin_mask)
        assert torch.equal(a.edge_keep, b.edge_keep) and torch.equal(a.kept_edge_index, b.kept_edge_index)
    model.eval(), fresh.eval()
    model.set_scheme("keep", "keep"), fresh.set_scheme("keep", "keep")
    torch.testing.assert_close(model(x, ei), fresh(x, ei))


def test_model_macs_follow_masks_and_dense_is_larger():
    x, ei = random_graph(n=60, m=400, seed=18)
    dense, uf = _model(0.0, 0.0), _model(0.8, 0.8)
    dense.eval(), uf.eval()
    dense(x, ei), uf(x, ei)
    assert uf.macs() < dense.macs()
    n = 60
    m_nl = ei.size(1)
    exact = 8 * 16 * n + 16 * m_nl + n * 16 + 16 * 16 * n + 16 * m_nl + n * 16 + 16 * 3 * n + 3 * m_nl + n * 3
    assert dense.macs() == exact


def test_gcn2_and_gat_models_run_and_prune():
    x, ei = random_graph(n=40, m=200, seed=19)
    for conv in ("gcn2", "gat", "sage"):
        model = _model(0.5, 0.5, layers=2, conv=conv)
        out = model(x, ei)
        assert out.shape == (40, 3) and torch.isfinite(out).all()
        assert model.sparsity()["weight"] > 0


def test_fit_dropedge_trains_on_random_subsets_and_evaluates_on_the_whole_graph():
    import pytest

    from unifews.experiments import fit, stratified_split

    x, ei = random_graph(n=80, m=500, seed=31, dtype=torch.float32)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    split = stratified_split(y, 0)
    m = ei.size(1)
    for p in (0.0, 0.6):
        torch.manual_seed(0)
        model = UnifewsGNN(8, 16, 3, 2, "gcn", 0.0, UnifewsConfig(delta_a=0.0, delta_w=0.5))
        seen = []
        model.convs[0].register_forward_hook(
            lambda mod, args, out, seen=seen: seen.append((mod.training, mod.last_stats["edges_in_nonloop"]))
        )
        res = fit(model, x, ei, y, split, epochs=6, lr=1e-2, edge_dropout=p, progress=False)
        train = [k for t, k in seen if t]
        evals = [k for t, k in seen if not t]
        assert len(train) == 6 and evals and all(k == m for k in evals)
        if p == 0:
            assert all(k == m for k in train)
        else:
            assert all(k < m for k in train) and len(set(train)) > 1  # fresh subsets
            assert abs(sum(train) / len(train) / m - (1 - p)) < 0.1
        assert 0.0 <= res.test_acc_strict <= 1.0
    with pytest.raises(ValueError, match="edge_dropout"):
        fit(model, x, ei, y, split, epochs=1, edge_dropout=1.0)
