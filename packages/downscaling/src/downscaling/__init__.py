"""Enough of Scaling (ICML 2025): prune, distill, quantize, select and ensemble language models, with measured or
estimated energy per token.

Position: Enough of Scaling LLMs! Lets Focus on Downscaling (Sengupta, Goel, Chakraborty; ICML 2025 position
track, arXiv 2505.00985). The paper argues for *downscaling laws*: shrink models, data and compute while keeping
the performance that matters, e.g. by pruning a large model into specialised small models, continuing their
pre-training on smart-selected domain data and ensembling them. This package is the toolkit that argument needs,
each operator returning a new model and a record, each cost measured:

>>> from downscaling import profile, prune, PruneConfig, quantize      # doctest: +SKIP
>>> base = profile(model, batch)                                        # FLOPs/token, bytes, latency, J/token
>>> pruned, rec = prune(model, PruneConfig("wanda", 0.5, calib=batch))
>>> q, rec = quantize(model, "int8_dynamic", "torch.ao")
"""

from importlib.metadata import version as _version

from downscaling import carbon, laws
from downscaling.config import DistillConfig, EnsembleConfig, PruneConfig, Recover
from downscaling.distill import DistillResult, distill, distill_loss, kd_kl
from downscaling.ensemble import Ensemble, specialize_and_ensemble
from downscaling.flops import AnalyticFlops, analytic_llama, count_flops, count_train_flops, param_counts
from downscaling.profiling import Profile, linear_weight_bytes, profile, weight_bytes
from downscaling.prune import PruneResult, conv1d_to_linear, finalize, prune, sparsity_of
from downscaling.quantize import QuantizeResult, quantize, supported_schemes
from downscaling.report import Report, bpc_evaluator, report
from downscaling.selection import EL2N, ProxyLoss, Random, SelectResult, select_data

__all__ = [
    "AnalyticFlops",
    "DistillConfig",
    "DistillResult",
    "DistillTrainer",
    "EL2N",
    "Ensemble",
    "EnsembleConfig",
    "Profile",
    "ProxyLoss",
    "PruneConfig",
    "PruneResult",
    "QuantizeResult",
    "Random",
    "Recover",
    "Report",
    "SelectResult",
    "analytic_llama",
    "bpc_evaluator",
    "carbon",
    "conv1d_to_linear",
    "count_flops",
    "count_train_flops",
    "distill",
    "distill_loss",
    "finalize",
    "kd_kl",
    "laws",
    "linear_weight_bytes",
    "param_counts",
    "profile",
    "prune",
    "quantize",
    "report",
    "select_data",
    "sparsity_of",
    "specialize_and_ensemble",
    "supported_schemes",
    "weight_bytes",
]

__version__ = _version("icml25-downscaling")


def __getattr__(name: str):
    if name == "DistillTrainer":
        from downscaling.distill import DistillTrainer

        return DistillTrainer
    raise AttributeError(f"module 'downscaling' has no attribute {name!r}")
