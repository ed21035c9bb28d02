"""Simulated federated graph data (Sec. 5, data protocol): one graph split into C node-induced client subgraphs
(edges between clients dropped), each with its own random 60/20/20 train/val/test node split.

Splits: ``louvain`` (communities, cut and packed into C clients of n/C ± δ nodes, the official code's rule),
``random`` (IID) and ``metis`` (pymetis, extra ``metis``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

import eagles._pyg  # noqa: F401  (before torch_geometric)
from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = ["check_data", "louvain_clients", "random_clients", "metis_clients", "make_clients", "split_clients"]


def graph_tensors(data: Data) -> tuple[Tensor, Tensor, Tensor]:
    """(x, edge_index, y) of a graph :func:`check_data` accepted."""
    x, ei, y = getattr(data, "x", None), getattr(data, "edge_index", None), getattr(data, "y", None)
    if not isinstance(x, Tensor) or not isinstance(ei, Tensor) or not isinstance(y, Tensor):
        raise TypeError("data must hold tensors x, edge_index and y (see check_data)")
    return x, ei, y


def check_data(data: Data) -> int:
    """Validate a node-classification graph (x, edge_index, y); returns the number of nodes."""
    if not isinstance(data, Data):
        raise TypeError(f"data must be a torch_geometric.data.Data, got {type(data).__name__}")
    x, ei, y = getattr(data, "x", None), getattr(data, "edge_index", None), getattr(data, "y", None)
    check_tensor("data.x", x, ndim=2, dtype="floating")
    check_tensor("data.edge_index", ei, ndim=2, dtype="integer")
    check_tensor("data.y", y, ndim=1, dtype="integer")
    x, ei, y = graph_tensors(data)
    if x.layout == torch.strided:
        check_tensor("data.x", x, finite=True)
    elif not bool(torch.isfinite(x.coalesce().values() if x.layout == torch.sparse_coo else x.values()).all()):
        raise ValueError("data.x must be finite (no NaN or inf), got non-finite entries")
    n = x.size(0)
    if n == 0:
        raise ValueError("data must have at least one node, got 0")
    if y.size(0) != n:
        raise ValueError(f"data.y must have one label per node ({n} rows of data.x), got {y.size(0)}")
    if ei.size(0) != 2:
        raise ValueError(f"data.edge_index must have shape (2, m), got {tuple(ei.shape)}")
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(f"data.edge_index must index nodes in [0, {n}), got [{int(ei.min())}, {int(ei.max())}]")
    return n


def _check_c(num_clients: int, n: int) -> int:
    return check_int("num_clients", num_clients, min=1, max=n)


def random_clients(data: Data, num_clients: int, seed: int = 0) -> list[Data]:
    """IID split: a random permutation of the nodes cut into C parts of sizes differing by at most one."""
    n = check_data(data)
    c = _check_c(num_clients, n)
    perm = np.random.default_rng(check_int("seed", seed, min=0)).permutation(n)
    assign = np.empty(n, dtype=np.int64)
    for i, part in enumerate(np.array_split(perm, c)):
        assign[part] = i
    return split_clients(data, assign, seed)


def louvain_clients(data: Data, num_clients: int, seed: int = 0, delta: float = 0.1) -> list[Data]:
    """Louvain communities (networkx, seeded), communities larger than n/C cut into pieces of at most n/C nodes,
    pieces packed largest first into the least-filled client whose size stays within n/C · (1 + δ); δ grows by
    0.05 until every piece fits."""
    import networkx as nx

    n = check_data(data)
    c = _check_c(num_clients, n)
    seed = check_int("seed", seed, min=0)
    delta = check_float("delta", delta, min=0.0)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((u, v) for u, v in graph_tensors(data)[1].t().tolist() if u != v)
    comms = [sorted(cm) for cm in nx.community.louvain_communities(g, seed=seed)]
    target = n / c
    piece = max(1, math.floor(target))
    pieces = []
    for cm in comms:
        pieces += [cm[i : i + piece] for i in range(0, len(cm), piece)]
    pieces.sort(key=lambda p: (-len(p), p[0]))
    while True:
        cap = target * (1 + delta)
        sizes = [0] * c
        parts: list[list[int]] = [[] for _ in range(c)]
        ok = True
        for p in pieces:
            j = min(range(c), key=lambda i: (sizes[i], i))
            if sizes[j] + len(p) > cap and sizes[j] > 0:
                ok = False
                break
            sizes[j] += len(p)
            parts[j] += p
        if ok and all(sizes):
            break
        delta += 0.05
    assign = np.empty(n, dtype=np.int64)
    for i, part in enumerate(parts):
        assign[part] = i
    return split_clients(data, assign, seed)


def metis_clients(data: Data, num_clients: int, seed: int = 0) -> list[Data]:
    """METIS k-way partition (pymetis, extra ``metis``) into C parts."""
    try:
        import pymetis
    except ImportError as err:  # pragma: no cover - pymetis is in the test extra
        raise ImportError("metis_clients needs pymetis: pip install 'icml25-eagles[metis]'") from err
    n = check_data(data)
    c = _check_c(num_clients, n)
    if c == 1:
        return split_clients(data, np.zeros(n, dtype=np.int64), seed)
    adj: list[set[int]] = [set() for _ in range(n)]
    for u, v in graph_tensors(data)[1].t().tolist():
        if u != v:
            adj[u].add(v)
            adj[v].add(u)
    _, membership = pymetis.part_graph(c, adjacency=[sorted(a) for a in adj])
    return split_clients(data, np.asarray(membership, dtype=np.int64), seed)


def make_clients(data: Data, num_clients: int, split: str = "louvain", seed: int = 0) -> list[Data]:
    """Dispatch on ``split`` in {"louvain", "random", "metis"}."""
    split = check_choice("split", split, ("louvain", "random", "metis"))
    fn = {"louvain": louvain_clients, "random": random_clients, "metis": metis_clients}[split]
    return fn(data, num_clients, seed)


def split_clients(
    data: Data, assignment: np.ndarray | Tensor, seed: int = 0, fractions: tuple[float, float] = (0.6, 0.2)
) -> list[Data]:
    """Node-induced client subgraphs from a node → client assignment (values 0..C−1, every client non-empty),
    with random train/val/test masks (``fractions`` train, val; the rest test) over the client's labelled nodes,
    seeded per client. A label < 0 marks an unlabelled node (as ogbn data sets do): it keeps its edges and
    features but lies in no mask."""
    n = check_data(data)
    a = torch.as_tensor(np.asarray(assignment), dtype=torch.long)
    if a.shape != (n,):
        raise ValueError(f"assignment must have one entry per node ({n}), got shape {tuple(a.shape)}")
    c = int(a.max()) + 1
    sizes = torch.bincount(a, minlength=c)
    if int(a.min()) < 0 or bool((sizes == 0).any()):
        empty = [i for i in range(c) if int(sizes[i]) == 0]
        raise ValueError(f"every client must hold at least one node; clients {empty} have none")
    x, edge_index, y = graph_tensors(data)
    x = x.to_dense() if x.layout != torch.strided else x
    clients = []
    for i in range(c):
        nodes = torch.nonzero(a == i).view(-1)
        ei, _ = subgraph(nodes, edge_index, relabel_nodes=True, num_nodes=n)
        labelled = torch.nonzero(y[nodes] >= 0).view(-1)  # every node, in order, when all are labelled
        k = labelled.numel()
        perm = labelled[torch.from_numpy(np.random.default_rng([seed, i]).permutation(k))]
        n_tr, n_va = round(fractions[0] * k), round(fractions[1] * k)
        masks = [torch.zeros(nodes.numel(), dtype=torch.bool) for _ in range(3)]
        masks[0][perm[:n_tr]] = True
        masks[1][perm[n_tr : n_tr + n_va]] = True
        masks[2][perm[n_tr + n_va :]] = True
        clients.append(
            Data(
                x=x[nodes],
                edge_index=ei,
                y=y[nodes].long(),
                train_mask=masks[0],
                val_mask=masks[1],
                test_mask=masks[2],
                global_id=nodes,
            )
        )
    return clients
