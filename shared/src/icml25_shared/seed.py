"""Repeatable runs: one call seeds python's ``random``, numpy and torch (CPU and CUDA).

Used by every package's tests and reproductions.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["seed_everything", "numpy_rng"]


def seed_everything(seed: int, *, deterministic: bool = False) -> torch.Generator | None:
    """Seed python, numpy and torch (and CUDA) with ``seed``; return a fresh ``torch.Generator`` seeded likewise.

    ``deterministic=True`` also asks torch for deterministic algorithms (warn-only) and disables cuDNN
    benchmarking. Returns ``None`` when torch is not installed (numpy-only packages such as dp_ts_ucb).
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import torch
    except ImportError:  # numpy-only packages
        return None
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def numpy_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A ``numpy.random.Generator`` from a seed, ``None`` (fresh entropy) or an existing generator."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"seed must be None, a non-negative int or a numpy Generator, got {seed!r}")
    return np.random.default_rng(seed)
