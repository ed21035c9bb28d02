"""Unifews (ICML 2025): joint entry-wise graph and weight sparsification of GNNs, as PyG layers."""

from . import _pyg  # noqa: F401  (import torch_geometric once, quietly)
from .config import UnifewsConfig
from .functional import diffusion_weights, edge_keep_mask, message_scores, spmm, weight_mask
from .metrics import LayerOps, count_macs
from .models import UnifewsGNN
from .nn import UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsSAGEConv

__all__ = [
    "UnifewsConfig",
    "UnifewsGCNConv",
    "UnifewsGATv2Conv",
    "UnifewsSAGEConv",
    "UnifewsGCN2Conv",
    "UnifewsGNN",
    "LayerOps",
    "count_macs",
    "diffusion_weights",
    "edge_keep_mask",
    "message_scores",
    "spmm",
    "weight_mask",
]
