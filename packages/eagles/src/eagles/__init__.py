"""EAGLES (ICML 2025): federated GNN training on Flower with consensus weight masks and mixture-of-experts graph
sparsification."""

from importlib.metadata import version as _version

from eagles import _pyg  # noqa: F401  (imports torch_geometric with its torch.jit notice silenced)
from eagles.config import EaglesConfig
from eagles.fl import (
    DensityBandSelector,
    consensus_mask,
    context_distance,
    mask_distance,
    personalized_aggregate,
    personalized_weights,
)
from eagles.graph import EdgeExpert, MixtureGraphSparsifier, NoisyTopKRouter, prune
from eagles.metrics import CommMeter, FlopsMeter
from eagles.nn import EaglesGCN, EaglesModel, ThresholdMaskedLinear, build_model, masked_gnn
from eagles.partition import louvain_clients, metis_clients, random_clients

__version__ = _version("icml25-eagles")

__all__ = [
    "EaglesConfig",
    "EdgeExpert",
    "NoisyTopKRouter",
    "MixtureGraphSparsifier",
    "prune",
    "ThresholdMaskedLinear",
    "masked_gnn",
    "EaglesGCN",
    "EaglesModel",
    "build_model",
    "consensus_mask",
    "mask_distance",
    "context_distance",
    "personalized_weights",
    "personalized_aggregate",
    "DensityBandSelector",
    "louvain_clients",
    "random_clients",
    "metis_clients",
    "CommMeter",
    "FlopsMeter",
]
