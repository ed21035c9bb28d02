"""FRUGAL: Memory-Efficient Optimization by Reducing State Overhead for Scalable Training (Zmushko, Beznosikov,
Takáč, Horváth; ICML 2025, arXiv 2411.07837).

Each trainable matrix's gradient is split into a low-dimensional state-full part, updated by AdamW (or SGD-M,
Lion), and the complementary state-free part, updated by signSGD (or SGD): the update is full-rank while only the
state-full subspace costs optimizer memory.

>>> from frugal import FRUGAL, param_groups
>>> opt = FRUGAL(param_groups(model), lr=1e-3, density=0.25, update_gap=200)  # doctest: +SKIP
"""

import importlib.metadata

from frugal import selectors
from frugal.config import FRUGALConfig
from frugal.functional import adamw_update, lion_update, sgdm_update, state_free_update
from frugal.memory import adamw_bytes, llama_matrix_shapes, matrix_state_bytes, model_state_bytes
from frugal.optimizer import DEFAULT_TARGET_MODULES, FRUGAL, param_groups

__all__ = [
    "DEFAULT_TARGET_MODULES",
    "FRUGAL",
    "FRUGALConfig",
    "adamw_bytes",
    "adamw_update",
    "lion_update",
    "llama_matrix_shapes",
    "matrix_state_bytes",
    "model_state_bytes",
    "param_groups",
    "selectors",
    "sgdm_update",
    "state_free_update",
]
__version__ = importlib.metadata.version("icml25-frugal")
