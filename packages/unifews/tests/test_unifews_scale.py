"""Mini-batches (NeighborLoader) and feature-sharded precompute over torch.distributed (gloo)."""

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from icml25_shared.distributed import launch
from unifews import UnifewsConfig, UnifewsGNN, diffusion_weights

from .helpers import random_graph


def _has_sampler() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("pyg_lib", "torch_sparse"))


@pytest.mark.parametrize("conv", ["sage", "gcn"])
def test_two_hop_subgraph_batches_equal_full_batch(conv):
    from torch_geometric.utils import k_hop_subgraph

    x, ei = random_graph(n=80, m=300, f=8, seed=30)
    torch.manual_seed(0)
    model = UnifewsGNN(8, 16, 3, 2, conv, 0.5, UnifewsConfig(delta_a=0.0, delta_w=0.0), normalize=conv == "sage")
    model = model.double().eval()
    w = None
    if conv == "gcn":  # GCN weights need full-graph degrees: precompute them and slice them with the batch
        ei, w = diffusion_weights(ei, 80, dtype=x.dtype)
    with torch.no_grad():
        full = model(x, ei, w)
        for start in range(0, 80, 16):
            seeds = torch.arange(start, start + 16)
            subset, sub_ei, mapping, edge_mask = k_hop_subgraph(seeds, 2, ei, relabel_nodes=True, num_nodes=80)
            out = model(x[subset], sub_ei, None if w is None else w[edge_mask])
            torch.testing.assert_close(out[mapping], full[seeds])


_NO_SAMPLER = (
    "PyG's NeighborLoader needs pyg-lib or torch-sparse: pyg-lib has no PyPI distribution, torch-sparse only a "
    "source one (0.6.18, no wheel for this torch); the k_hop_subgraph test above checks the same property"
)


@pytest.mark.skipif(not _has_sampler(), reason=_NO_SAMPLER)
@pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib':UserWarning")
@pytest.mark.parametrize("conv", ["sage", "gcn"])
def test_neighbor_loader_full_neighbourhoods_equal_full_batch(conv):
    x, ei = random_graph(n=80, m=300, f=8, seed=30)
    torch.manual_seed(0)
    normalize = conv == "sage"
    model = UnifewsGNN(8, 16, 3, 2, conv, 0.5, UnifewsConfig(delta_a=0.0, delta_w=0.0), normalize=normalize)
    model = model.double().eval()
    if conv == "gcn":  # GCN weights need full-graph degrees: precompute them and let the loader slice them
        ei, w = diffusion_weights(ei, 80, dtype=x.dtype)
        data = Data(x=x, edge_index=ei, edge_weight=w)
    else:
        data = Data(x=x, edge_index=ei)
    with torch.no_grad():
        full = model(x, data.edge_index, data.edge_weight if conv == "gcn" else None)
        loader = NeighborLoader(data, num_neighbors=[-1, -1], batch_size=16, shuffle=False)
        for batch in loader:
            out = model(batch.x, batch.edge_index, batch.edge_weight if conv == "gcn" else None)
            torch.testing.assert_close(out[: batch.batch_size], full[batch.n_id[: batch.batch_size]])


def _sharded_ddp_worker(rank: int, world: int, x, edge_index, out_dir: str) -> None:
    """Runs on each gloo rank (icml25_shared.distributed.launch): sharded precompute (4 hops, δa = 0.5, seed 11),
    then 3 DDP steps of the MLP head on the rank's half of the rows; saves ``p{rank}.pt`` (features) and
    ``m{rank}.pt`` (head weights) in ``out_dir``."""
    import os

    from torch.nn.parallel import DistributedDataParallel

    from unifews.distributed import sharded_propagate
    from unifews.experiments import MLP

    p, _ = sharded_propagate(x, edge_index, 4, 0.5, seed=11)
    torch.save(p, os.path.join(out_dir, f"p{rank}.pt"))
    torch.manual_seed(0)
    model = DistributedDataParallel(MLP(x.size(1), 8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    y = torch.arange(x.size(0)) % 3
    half = x.size(0) // world
    rows = slice(rank * half, (rank + 1) * half)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(p[rows]), y[rows]).backward()
        opt.step()
    torch.save(model.module.state_dict(), os.path.join(out_dir, f"m{rank}.pt"))


@pytest.mark.slow
def test_sharded_precompute_over_two_gloo_ranks_equals_one_process(tmp_path):
    from unifews.prop import unifews_propagate

    x, ei = random_graph(n=50, m=200, f=9, seed=31, dtype=torch.float32)
    launch(_sharded_ddp_worker, 2, args=(x, ei, str(tmp_path)))
    single, _ = unifews_propagate(x, ei, 4, 0.5, generator=11)
    for r in range(2):
        torch.testing.assert_close(torch.load(tmp_path / f"p{r}.pt"), single)
    m0, m1 = torch.load(tmp_path / "m0.pt"), torch.load(tmp_path / "m1.pt")
    for k in m0:
        if "running" not in k and "num_batches" not in k:  # BN buffers are rank-local after the last forward
            torch.testing.assert_close(m0[k], m1[k])  # DDP keeps the parameters identical
