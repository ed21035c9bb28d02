"""Amortized IRT / REEval (ICML 2025): sparse MML-EM Rasch/2PL/3PL, content-based amortized difficulty,
vectorised Fisher-information adaptive testing of language models."""

from importlib.metadata import version as _version

from amortized_irt.amortized import AmortizedDifficulty, HashingFeaturizer, TransformersFeaturizer
from amortized_irt.cat import AdaptiveTest, ItemBank
from amortized_irt.config import IRTConfig, Stop
from amortized_irt.data import ResponseMatrix
from amortized_irt.estimators import Rasch, ThreePL, TwoPL, from_mirt, to_mirt

__version__ = _version("icml25-amortized-irt")

__all__ = [
    "AdaptiveTest",
    "AmortizedDifficulty",
    "HashingFeaturizer",
    "IRTConfig",
    "ItemBank",
    "Rasch",
    "ResponseMatrix",
    "Stop",
    "ThreePL",
    "TransformersFeaturizer",
    "TwoPL",
    "from_mirt",
    "to_mirt",
    "__version__",
]
