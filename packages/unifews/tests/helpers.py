"""Small random graphs for the tests."""

import torch


def random_graph(n: int = 30, m: int = 120, f: int = 8, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (m,), generator=g)
    dst = torch.randint(0, n, (m,), generator=g)
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    ei = torch.unique(torch.cat([ei, ei.flip(0)], dim=1), dim=1)  # undirected, no duplicates
    x = torch.randn(n, f, generator=g, dtype=dtype)
    return x, ei
