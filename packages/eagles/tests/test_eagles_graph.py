import math

import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

from eagles.config import EaglesConfig
from eagles.graph import (
    BinaryStep,
    EdgeExpert,
    MixtureGraphSparsifier,
    NoisyTopKRouter,
    cv_squared,
    prune,
    segment_topk,
    temperature,
    topological_edge_scores,
)


def test_factorised_expert_equals_concatenated_mlp_values_and_gradients():
    torch.manual_seed(0)
    n, f, m = 15, 7, 40
    x = torch.randn(n, f, dtype=torch.float64)
    ei = torch.randint(0, n, (2, m))
    attr = torch.randn(m, 3, dtype=torch.float64)
    for edge_attr, edge_dim in ((None, 1), (attr, 3)):
        e = EdgeExpert(f, 6, edge_dim).double()
        a = torch.ones(m, 1, dtype=torch.float64) if edge_attr is None else edge_attr
        ref = e.mlp(torch.cat([x[ei[0]], x[ei[1]], a], 1)).squeeze(-1)
        out = e(x, ei, edge_attr)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        g1 = torch.autograd.grad(ref.square().sum(), list(e.parameters()))
        g2 = torch.autograd.grad(e(x, ei, edge_attr).square().sum(), list(e.parameters()))
        for a1, a2 in zip(g1, g2, strict=True):
            torch.testing.assert_close(a1, a2, rtol=1e-10, atol=1e-12)


def test_factorised_expert_on_sparse_features_equals_dense():
    torch.manual_seed(1)
    x = torch.randn(10, 6) * (torch.rand(10, 6) < 0.3)
    ei = torch.randint(0, 10, (2, 30))
    e = EdgeExpert(6, 5)
    torch.testing.assert_close(e(x.to_sparse(), ei), e(x, ei))


def test_mixture_stacked_scores_equal_each_expert():
    torch.manual_seed(2)
    sp = MixtureGraphSparsifier(5, EaglesConfig(expert_hidden=4))
    x, ei = torch.randn(12, 5), torch.randint(0, 12, (2, 35))
    z = sp.expert_scores(x, ei)
    for i, e in enumerate(sp.experts):
        torch.testing.assert_close(z[:, i], e(x, ei))


def _reference_keep(score, src, n, k):
    keep = torch.zeros(score.numel(), dtype=torch.bool)
    for u in range(n):
        idx = [j for j in range(score.numel()) if int(src[j]) == u]
        if not idx:
            continue
        kappa = max(1, round(k * len(idx)))  # Python round: half to even, like torch.round
        idx.sort(key=lambda j: (-float(score[j]), j))
        keep[idx[:kappa]] = True
    return keep


@pytest.mark.parametrize("k", [0.0, 0.3, 0.5, 1.0])
def test_keep_count_is_max1_round_k_deg_with_ties_by_edge_index(k):
    g = torch.Generator().manual_seed(3)
    n = 12
    src = torch.randint(0, n - 2, (80,), generator=g)  # nodes n-2, n-1 have no out-edges
    score = torch.randint(0, 4, (80,), generator=g).float()  # many ties
    keep, kappa, _ = segment_topk(score, src, n, k)
    assert torch.equal(keep, _reference_keep(score, src, n, k))
    deg = torch.bincount(src, minlength=n)
    for u in range(n):
        want = 0 if deg[u] == 0 else max(1, round(k * int(deg[u])))
        assert int(kappa[u]) == want == int(keep[src == u].sum())
    if k == 1.0:
        assert bool(keep.all())


def test_keep_count_per_node_ratio_and_degree_one():
    src = torch.tensor([0, 1, 1, 1, 1, 2, 2])
    score = torch.tensor([0.1, 0.5, 0.4, 0.9, 0.2, 0.3, 0.3])
    keep, kappa, thr = segment_topk(score, src, 3, torch.tensor([0.0, 0.5, 0.5]))
    assert keep.tolist() == [True, True, False, True, False, True, False]  # node 2: tie → lower index
    assert kappa.tolist() == [1, 2, 1]
    assert thr.tolist() == pytest.approx([0.1, 0.5, 0.3])


def test_binary_step_backward_is_the_piecewise_surrogate():
    x = torch.tensor([-1.5, -1.0, -0.7, -0.4, -0.1, 0.0, 0.2, 0.4, 0.41, 1.0, 1.01], requires_grad=True)
    g = torch.linspace(0.5, 1.5, x.numel())
    y = BinaryStep.apply(x)
    assert y.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    y.backward(g)
    a = x.detach().abs()
    want = [gi * (2 - 4 * ai) if ai <= 0.4 else (0.4 * gi if ai <= 1 else 0.0) for gi, ai in zip(g, a, strict=True)]
    torch.testing.assert_close(x.grad, torch.tensor(want))


def test_router_top_s_gates_sum_to_one_and_eval_is_deterministic():
    torch.manual_seed(4)
    r = NoisyTopKRouter(6, 5, 3)
    torch.nn.init.normal_(r.w_gate)
    torch.nn.init.normal_(r.w_noise)
    x = torch.randn(20, 6)
    r.train()
    g, loss = r(x)
    assert bool((g >= 0).all()) and bool(((g > 0).sum(1) == 3).all())
    torch.testing.assert_close(g.sum(1), torch.ones(20))
    g2, _ = r(x)
    assert not torch.equal(g, g2)  # noise in training
    r.eval()
    e1, _ = r(x)
    e2, _ = r(x)
    assert torch.equal(e1, e2)
    top = (x @ r.w_gate).topk(3, 1)
    ref = torch.zeros(20, 5).scatter(1, top.indices, torch.softmax(top.values, 1))
    torch.testing.assert_close(e1, ref)
    assert float(loss.detach()) > 0


def test_cv_squared():
    assert float(cv_squared(torch.full((4,), 3.0))) == 0.0
    v = torch.tensor([1.0, 2.0, 3.0])
    assert float(cv_squared(v)) == pytest.approx(1.0 / 4.0, rel=1e-5)


def test_sparsifier_mask_is_binary_per_node_count_and_eval_deterministic(tiny_graph):
    torch.manual_seed(5)
    cfg = EaglesConfig(keep_ratios=(0.9, 0.5, 0.3), top_s=2, expert_hidden=8)
    sp = MixtureGraphSparsifier(12, cfg)
    torch.nn.init.normal_(sp.router.w_gate)
    x, ei = tiny_graph.x, tiny_graph.edge_index
    sp.eval()
    m1, _ = sp(x, ei)
    m2, _ = sp(x, ei)
    assert torch.equal(m1, m2)
    assert set(m1.unique().tolist()) <= {0.0, 1.0}
    gates, _ = sp.router(x)
    k_node = gates.double() @ torch.tensor(cfg.keep_ratios, dtype=torch.float64)
    deg = torch.bincount(ei[0], minlength=40)
    for u in range(40):
        if deg[u]:
            want = max(1, int(torch.round(k_node[u] * deg[u])))
            assert int(m1[ei[0] == u].sum()) == want
    sp.train()
    m, aux = sp(x, ei, tau=0.7)
    (m * torch.arange(m.numel())).sum().add(aux).backward()
    assert sp.experts[0].mlp[0].weight.grad is not None
    assert sp.router.w_gate.grad is not None and float(sp.router.w_gate.grad.abs().sum()) > 0


def test_sparsifier_one_expert_full_keep_keeps_everything_and_no_edges_works(tiny_graph):
    sp = MixtureGraphSparsifier(12, EaglesConfig(keep_ratios=(1.0,), top_s=1, expert_hidden=3)).eval()
    m, _ = sp(tiny_graph.x, tiny_graph.edge_index)
    assert bool((m == 1).all())
    m0, aux = sp(tiny_graph.x, torch.zeros(2, 0, dtype=torch.long))
    assert m0.numel() == 0 and torch.isfinite(aux)


def test_segment_softmax_used_is_pyg_softmax():
    z = torch.randn(6, 2)
    src = torch.tensor([0, 0, 1, 1, 1, 2])
    s = pyg_softmax(z, src, num_nodes=3)
    torch.testing.assert_close(s[:2].sum(0), torch.ones(2))


def test_prune_and_temperature():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert prune(ei, torch.tensor([1.0, 0.0, 1.0])).tolist() == [[0, 2], [1, 0]]
    with pytest.raises(ValueError, match="edge_mask"):
        prune(ei, torch.ones(2))
    assert temperature(1, 0) == 1.0 and temperature(1, 100) == pytest.approx(0.904837, rel=1e-5)
    assert temperature(2, 100) == 1.0 and temperature(21, 5000) == 0.05


def test_sparsifier_rejects_bad_input(tiny_graph):
    sp = MixtureGraphSparsifier(12, EaglesConfig(expert_hidden=3))
    x, ei = tiny_graph.x, tiny_graph.edge_index
    with pytest.raises(ValueError, match="x must be finite"):
        sp(torch.full_like(x, float("nan")), ei)
    with pytest.raises(ValueError, match="edge_index must index nodes"):
        sp(x, ei + 100)
    with pytest.raises(ValueError, match="12 columns"):
        sp(x[:, :5], ei)
    with pytest.raises(ValueError, match="tau"):
        sp(x, ei, tau=0.0)


def _competition_rank_score(graph, key):
    """Lindner et al.'s exponent score: for each endpoint a of (a, b), rank b among a's neighbours by ``key``
    (descending, ties share the best rank), 1 − log(rank)/log(deg a) (1 when deg a = 1); max over endpoints."""
    out = {}
    for u, v in graph.edges():
        best = 0.0
        for a, b in ((u, v), (v, u)):
            d = graph.degree(a)
            rank = 1 + sum(1 for w in graph[a] if key(a, w) > key(a, b))
            best = max(best, 1.0 if d <= 1 else 1.0 - math.log(rank) / math.log(d))
        out[(u, v)] = best
    return out


def test_topological_edge_scores_equal_networkx_references():
    nx = pytest.importorskip("networkx")
    pytest.importorskip("networkit", reason="networkit (extra topo) is not installed")
    graph = nx.karate_club_graph()
    edges = torch.tensor(list(graph.edges())).t()
    ei = torch.cat([edges, edges.flip(0), torch.tensor([[3], [3]])], 1)  # both directions and a self-loop
    raw = topological_edge_scores(ei, 34, normalize=False)
    m = edges.size(1)
    assert raw.shape == (2 * m + 1, 4) and torch.equal(raw[:m], raw[m : 2 * m]) and bool((raw[-1] == 0).all())
    torch.testing.assert_close(topological_edge_scores(ei, 34), raw / raw.norm(dim=0))
    torch.testing.assert_close(topological_edge_scores(ei, 34, normalize=False)[:, 1], raw[:, 1])  # seeded
    deg = dict(graph.degree())
    common = {(u, v): len(list(nx.common_neighbors(graph, u, v))) for u, v in graph.edges()}
    common.update({(v, u): t for (u, v), t in list(common.items())})
    scan = [(common[e] + 1) / math.sqrt((deg[e[0]] + 1) * (deg[e[1]] + 1)) for e in graph.edges()]
    torch.testing.assert_close(raw[:m, 3], torch.tensor(scan), rtol=1e-6, atol=1e-7)
    jaccard = {(u, v): j for u, v, j in nx.jaccard_coefficient(graph, list(common))}
    for col, key in ((0, lambda a, b: deg[b]), (2, lambda a, b: jaccard[(a, b)])):
        ref = _competition_rank_score(graph, key)
        # networkit orders tied neighbours arbitrarily: compare the edges whose rank has no tie at either end
        untied = [
            i
            for i, (u, v) in enumerate(graph.edges())
            if all(sum(key(a, w) == key(a, b) for w in graph[a]) == 1 for a, b in ((u, v), (v, u)))
        ]
        assert len(untied) >= 20
        want = torch.tensor([ref[list(graph.edges())[i]] for i in untied])
        torch.testing.assert_close(raw[untied, col], want, rtol=1e-6, atol=1e-7)
    assert bool(((raw[:, 1] >= 0) & (raw[:, 1] <= 1)).all())


def test_topo_scores_config_feeds_networkit_scores_to_the_sparsifier(tiny_graph):
    pytest.importorskip("networkit", reason="networkit (extra topo) is not installed")
    from eagles_testing import small_clients, small_config

    from eagles.client import edge_scores_for, prepare_client
    from eagles.sim import initial_model, run_federated

    clients = small_clients(tiny_graph, 2)
    cfg = small_config(topo_scores="networkit", topo_weight=0.5)
    g = prepare_client(clients[0])
    model = initial_model(12, 3, cfg)
    scores = edge_scores_for(model, g)
    assert scores is edge_scores_for(model, g)  # computed once per client
    torch.testing.assert_close(scores, topological_edge_scores(g.edge_index, g.n))
    assert edge_scores_for(initial_model(12, 3, small_config()), g) is None
    with_topo = run_federated(clients, cfg, 1)
    without = run_federated(clients, small_config(topo_weight=0.5), 1)
    key = "sparsifier.router.w_gate"
    assert not torch.equal(with_topo.server.personal[0][key], without.server.personal[0][key])
