import sys
from pathlib import Path

import pytest
import torch

import eagles  # noqa: F401  (imports torch_geometric with its torch.jit notice silenced)
from icml25_shared.device import torch_threads

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test on one torch thread (the library's default), the caller's setting restored after."""
    with torch_threads(1):
        yield


@pytest.fixture
def tiny_graph():
    """A 40-node, 3-class graph with isolated nodes and a degree-1 node, symmetric edges."""
    g = torch.Generator().manual_seed(0)
    n = 40
    src = torch.randint(0, 34, (90,), generator=g)
    dst = torch.randint(0, 34, (90,), generator=g)
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    ei = torch.cat([ei, ei.flip(0), torch.tensor([[35], [36]]), torch.tensor([[36], [35]])], 1)
    x = torch.randn(n, 12, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    from torch_geometric.data import Data

    return Data(x=x, edge_index=ei, y=y)
