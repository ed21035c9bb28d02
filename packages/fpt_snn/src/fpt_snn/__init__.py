"""FPT: fixed-point parallel training of LIF spiking neurons (Feng et al., ICML 2025).

``fpt_snn.functional`` is pure torch. The spikingjelly integration (:class:`FPTLIFNode`, the converters) is imported
lazily, so ``import fpt_snn`` and ``import fpt_snn.functional`` work without spikingjelly installed.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any

from fpt_snn.config import FPTConfig, decay_from_tau, tau_from_decay
from fpt_snn.functional import cache_info, clear_cache, fpt_lif, lambda_matrix, lif_reference

if TYPE_CHECKING:
    from fpt_snn.convert import convert_fpt_to_lif, convert_lif_to_fpt
    from fpt_snn.neuron import FPTLIFNode

__version__ = importlib.metadata.version("icml25-fpt-snn")

__all__ = [
    "FPTConfig",
    "FPTLIFNode",
    "cache_info",
    "clear_cache",
    "convert_fpt_to_lif",
    "convert_lif_to_fpt",
    "decay_from_tau",
    "fpt_lif",
    "lambda_matrix",
    "lif_reference",
    "tau_from_decay",
]

_LAZY = {"FPTLIFNode": "neuron", "convert_lif_to_fpt": "convert", "convert_fpt_to_lif": "convert"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"fpt_snn.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
