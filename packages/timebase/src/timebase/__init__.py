"""TimeBase (ICML 2025): an ultra-light basis-component forecaster for long-term time series.

>>> import torch
>>> from timebase import TimeBase, TimeBaseConfig
>>> model = TimeBase(TimeBaseConfig(seq_len=720, pred_len=96))
>>> model.num_parameters()
214
>>> model(torch.randn(2, 720, 7)).shape
torch.Size([2, 96, 7])
"""

from . import baselines, data
from .config import PRESETS, TimeBaseConfig, training_preset
from .least_squares import fit_timebase_least_squares
from .model import MultiSeasonalTimeBase, TimeBase, TimeBaseOutput, orthogonal_loss, pad_segments
from .reducer import BasisReducer, PatchTST
from .trainer import FitResult, evaluate, fit, predict

__all__ = [
    "TimeBase",
    "TimeBaseConfig",
    "TimeBaseOutput",
    "MultiSeasonalTimeBase",
    "orthogonal_loss",
    "pad_segments",
    "BasisReducer",
    "PatchTST",
    "fit",
    "predict",
    "evaluate",
    "FitResult",
    "fit_timebase_least_squares",
    "training_preset",
    "PRESETS",
    "data",
    "baselines",
]

__version__ = "0.1.0"
