"""MoHD (ICML 2025): Mixture of Hidden-Dimensions Transformers, transformers-native.

Importing ``mohd`` registers ``MoHDConfig`` (``model_type="mohd"``) with ``AutoConfig`` and the models with
``AutoModel`` / ``AutoModelForCausalLM``.
"""

from importlib.metadata import version as _version

from mohd.accounting import ParamCount, activated_flops, count_active_parameters, count_touched_parameters
from mohd.config import MoHDConfig
from mohd.fusion import BlockDiagFusion, GroupFusion, MonarchFusion
from mohd.layer import MoHDAttention, MoHDDecoderLayer, MoHDFeedForward, MoHDMLP, MoHDSublayer
from mohd.model import MoHDForCausalLM, MoHDModel, MoHDPreTrainedModel
from mohd.routing import SubDimRouter, load_balancing_loss

__version__ = _version("icml25-mohd")

__all__ = [
    "MoHDConfig",
    "MoHDForCausalLM",
    "MoHDModel",
    "MoHDPreTrainedModel",
    "MoHDDecoderLayer",
    "MoHDAttention",
    "MoHDMLP",
    "MoHDFeedForward",
    "MoHDSublayer",
    "SubDimRouter",
    "load_balancing_loss",
    "count_active_parameters",
    "activated_flops",
    "count_touched_parameters",
    "ParamCount",
    "MonarchFusion",
    "GroupFusion",
    "BlockDiagFusion",
    "__version__",
]
