"""BSLoRA: LoRA with intra-layer and inter-layer sharing (Zhou et al., ICML 2025).

A standalone, exact, mergeable tuner for transformers models in peft's idiom::

    from bslora import BSLoRAConfig, get_bslora_model
    model = get_bslora_model(base, BSLoRAConfig(r_local=2, r_intra=4, r_inter=16, share_mode="slice"))
"""

import importlib.metadata

from bslora import functional
from bslora.config import BSLoRAConfig
from bslora.counting import count_bslora_parameters, count_lora_parameters, count_sharelora_parameters
from bslora.export import export_to_lora
from bslora.layer import BASE_ADAPTER, BSLoRALinear, GateVectors, InterShare, IntraShare, KronSampler, SharedPair
from bslora.model import BSLoRAModel, get_bslora_model

__all__ = [
    "BSLoRAConfig",
    "BSLoRAModel",
    "BSLoRALinear",
    "SharedPair",
    "IntraShare",
    "InterShare",
    "KronSampler",
    "GateVectors",
    "BASE_ADAPTER",
    "get_bslora_model",
    "count_bslora_parameters",
    "count_lora_parameters",
    "count_sharelora_parameters",
    "export_to_lora",
    "functional",
]

__version__ = importlib.metadata.version("icml25-bslora")
