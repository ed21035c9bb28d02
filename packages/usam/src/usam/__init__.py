"""UncertainSAM (ICML 2025): one-pass uncertainty heads for transformers' SamModel / Sam2Model.

With the paper's Monte-Carlo entropy baselines (``usam.mc``), targets and prompt protocol (``usam.targets``), head
training (``usam.train``), correction-curve metrics (``usam.metrics``) and a toy promptable segmenter (``usam.toy``).
"""

from importlib.metadata import version as _version

from usam.config import TARGETS, USAMConfig
from usam.heads import USAMHead, USAMHeads
from usam.metrics import correction_curve, pearson, relative_auc, spearman
from usam.model import UncertainSAM, USAMOutput, load_official_heads
from usam.targets import extract_rows, load_rows, sample_prompts, save_rows
from usam.train import FitResult, fit_head, training_data

__version__ = _version("icml25-usam")

__all__ = [
    "TARGETS",
    "FitResult",
    "USAMConfig",
    "USAMHead",
    "USAMHeads",
    "USAMOutput",
    "UncertainSAM",
    "correction_curve",
    "extract_rows",
    "fit_head",
    "load_official_heads",
    "load_rows",
    "pearson",
    "relative_auc",
    "sample_prompts",
    "save_rows",
    "spearman",
    "training_data",
]
