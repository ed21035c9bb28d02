"""Unifews (ICML 2025): joint entry-wise graph and weight sparsification of GNNs, as PyG layers."""

import importlib.metadata

from unifews import _pyg  # noqa: F401  (import torch_geometric once, quietly)
from unifews.config import UnifewsConfig
from unifews.functional import diffusion_weights, edge_keep_mask, message_scores, spmm, weight_mask
from unifews.macs import LayerOps, count_macs
from unifews.models import UnifewsGNN
from unifews.nn import UnifewsGATv2Conv, UnifewsGCN2Conv, UnifewsGCNConv, UnifewsSAGEConv

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

__version__ = importlib.metadata.version("icml25-unifews")
