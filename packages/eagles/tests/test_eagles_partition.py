import pytest
import torch
from torch_geometric.data import Data

from eagles.partition import louvain_clients, make_clients, metis_clients, random_clients, split_clients


def _ring_of_cliques(k=6, size=8):
    edges = []
    for c in range(k):
        base = c * size
        edges += [(base + i, base + j) for i in range(size) for j in range(size) if i != j]
        edges += [(base, ((c + 1) % k) * size + 1), (((c + 1) % k) * size + 1, base)]
    n = k * size
    return Data(x=torch.randn(n, 4), edge_index=torch.tensor(edges).t(), y=torch.randint(0, 3, (n,)))


def _check_clients(data, clients):
    ids = torch.cat([c.global_id for c in clients])
    assert torch.equal(ids.sort().values, torch.arange(data.num_nodes))  # a partition of the nodes
    for c in clients:
        assert torch.equal(c.x, data.x[c.global_id]) and torch.equal(c.y, data.y[c.global_id])
        k = c.num_nodes
        assert int(c.train_mask.sum()) == round(0.6 * k) and int(c.val_mask.sum()) == round(0.2 * k)
        assert bool((c.train_mask.int() + c.val_mask.int() + c.test_mask.int() == 1).all())
        g = c.global_id
        for u, v in c.edge_index.t().tolist():  # every client edge is an edge of the graph
            assert bool(((data.edge_index[0] == g[u]) & (data.edge_index[1] == g[v])).any())


def test_louvain_recovers_communities_and_balances_sizes():
    data = _ring_of_cliques()
    clients = louvain_clients(data, 6, seed=0)
    _check_clients(data, clients)
    assert [c.num_nodes for c in clients] == [8] * 6
    kept = sum(c.edge_index.size(1) for c in clients)
    assert kept >= 6 * 56  # every clique's edges stay inside one client


def test_random_and_metis_splits():
    data = _ring_of_cliques()
    r = random_clients(data, 5, seed=1)
    _check_clients(data, r)
    assert max(c.num_nodes for c in r) - min(c.num_nodes for c in r) <= 1
    pytest.importorskip("pymetis", reason="pymetis (extra metis) is not installed")
    m = metis_clients(data, 3)
    _check_clients(data, m)


def test_bad_input_names_argument_value_and_expectation(tiny_graph):
    with pytest.raises(ValueError, match="num_clients must be"):
        random_clients(tiny_graph, 0)
    with pytest.raises(ValueError, match="num_clients must be"):
        louvain_clients(tiny_graph, 41)
    with pytest.raises(ValueError, match="split must be one of"):
        make_clients(tiny_graph, 2, "spectral")
    bad = Data(x=tiny_graph.x[:30], edge_index=tiny_graph.edge_index, y=tiny_graph.y)
    with pytest.raises(ValueError, match="data.y must have one label per node"):
        random_clients(bad, 2)
    nan = tiny_graph.x.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match="data.x"):
        random_clients(Data(x=nan, edge_index=tiny_graph.edge_index, y=tiny_graph.y), 2)
    with pytest.raises(ValueError, match="clients \\[1\\] have none"):
        split_clients(tiny_graph, torch.tensor([0] * 20 + [2] * 20))


def test_int32_labels_and_isolated_nodes_are_accepted(tiny_graph):
    data = Data(x=tiny_graph.x.double(), edge_index=tiny_graph.edge_index.int(), y=tiny_graph.y.int())
    clients = random_clients(data, 4)
    assert all(c.y.dtype == torch.long for c in clients)
