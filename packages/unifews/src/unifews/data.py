"""Cora/CiteSeer as in the official protocol (spec 3.5): largest connected component, stratified 50/25/25 splits."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import torch
from torch import Tensor

from . import _pyg  # noqa: F401

__all__ = ["Split", "load_planetoid_lcc", "stratified_split", "synthetic_powerlaw_graph"]


@dataclass
class Split:
    """Train / validation / test node indices."""

    train: Tensor
    val: Tensor
    test: Tensor


def load_planetoid_lcc(name: str = "Cora"):
    """The Planetoid graph ``name`` (from ``ICML25_DATA`` via :mod:`icml25_shared.data`) restricted to its largest
    connected component (Cora: 2,485 nodes, 10,138 directed edges). Returns a ``torch_geometric.data.Data``."""
    from torch_geometric.datasets import Planetoid
    from torch_geometric.transforms import LargestConnectedComponents

    from icml25_shared import data as shared_data

    with tempfile.TemporaryDirectory(prefix="unifews-") as tmp:
        shared_data.copy_to(name, tmp)
        ds = Planetoid(tmp, name)
        data = ds[0]
    return LargestConnectedComponents()(data)


def stratified_split(y: Tensor, seed: int, fractions: tuple[float, float] = (0.5, 0.25)) -> Split:
    """Per-class random split: ``fractions[0]`` train, ``fractions[1]`` validation, the rest test."""
    g = torch.Generator().manual_seed(seed)
    parts: list[list[Tensor]] = [[], [], []]
    for c in torch.unique(y):
        idx = (y == c).nonzero().view(-1)
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        n_tr = round(fractions[0] * idx.numel())
        n_va = round(fractions[1] * idx.numel())
        parts[0].append(idx[:n_tr])
        parts[1].append(idx[n_tr : n_tr + n_va])
        parts[2].append(idx[n_tr + n_va :])
    return Split(*(torch.cat(p).sort().values for p in parts))


def synthetic_powerlaw_graph(n: int, avg_degree: float, exponent: float = 2.5, seed: int = 0) -> Tensor:
    """An undirected Chung-Lu graph with power-law expected degrees (``P(d) ∝ d^{-exponent}``), int64 ``[2, m]``,
    both directions, no self-loops, duplicates removed."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    wts = (1 - u).pow(-1.0 / (exponent - 1.0))  # Pareto(exponent - 1) weights
    wts = wts * (avg_degree / wts.mean())
    m_half = int(n * avg_degree / 2)
    p = wts / wts.sum()
    src = torch.multinomial(p, m_half, replacement=True, generator=g)
    dst = torch.multinomial(p, m_half, replacement=True, generator=g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    key = torch.unique(ei[0] * n + ei[1])
    return torch.stack([key // n, key % n])
