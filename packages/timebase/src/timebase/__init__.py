"""TimeBase (ICML 2025): an ultra-light basis-component forecaster for long-term time series.

>>> import torch
>>> from timebase import TimeBase, TimeBaseConfig
>>> model = TimeBase(TimeBaseConfig(seq_len=720, pred_len=96))
>>> model.num_parameters()
214
>>> model(torch.randn(2, 720, 7)).shape
torch.Size([2, 96, 7])
"""

import importlib.metadata

from timebase import baselines, data
from timebase.config import PRESETS, TimeBaseConfig, training_preset
from timebase.least_squares import fit_timebase_least_squares
from timebase.model import MultiSeasonalTimeBase, TimeBase, TimeBaseOutput, orthogonal_loss, pad_segments
from timebase.reducer import BasisReducer, PatchTST, add_basis_reducer
from timebase.trainer import FitResult, evaluate, fit, predict

__all__ = [
    "TimeBase",
    "TimeBaseConfig",
    "TimeBaseOutput",
    "MultiSeasonalTimeBase",
    "orthogonal_loss",
    "pad_segments",
    "BasisReducer",
    "PatchTST",
    "add_basis_reducer",
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

__version__ = importlib.metadata.version("icml25-timebase")
