"""SWAN: SGD with Normalization and Whitening (Ma, Gong, Scetbon, Meeds; ICML 2025, arXiv 2412.13148).

A stateless optimizer for the hidden matrices of a network: each step standardises the rows of the current
gradient (GradNorm) and orthogonalises it (GradWhitening, ``(G Gᵀ)^{-1/2} G``), so no Adam moments are kept for
them. Embeddings, the output head, norms and biases use AdamW in the same optimizer object.

>>> from swan import SWAN, param_groups
>>> opt = SWAN(param_groups(model, lr=3e-3))  # doctest: +SKIP
"""

import importlib.metadata

from swan.config import SWANConfig
from swan.functional import grad_norm, grad_whitening, rescale_to_unit_rms, swan_direction
from swan.memory import MemoryProfile, memory_profile
from swan.optimizer import SWAN, param_groups

__all__ = [
    "SWAN",
    "SWANConfig",
    "MemoryProfile",
    "memory_profile",
    "grad_norm",
    "grad_whitening",
    "param_groups",
    "rescale_to_unit_rms",
    "swan_direction",
]
__version__ = importlib.metadata.version("icml25-swan")
