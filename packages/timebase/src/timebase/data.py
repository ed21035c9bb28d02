"""Time-Series-Library data protocol (used by the paper): splits, the train-only scaler and sliding windows.

ETTh1/ETTh2: train rows [0, 8640), val [8640 - T, 11520), test [11520 - T, 14400) (12/4/4 months of 30 days);
other series: a 7:1:2 split with the same rule. Windows of length T + H, stride 1, built with ``Tensor.unfold``
(a view, no copy); a :class:`StandardScaler` (population std) fitted on the training rows only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "StandardScaler",
    "WindowDataset",
    "Splits",
    "ett",
    "load_ett",
    "split_series",
    "ETT_BORDERS",
    "dominant_period",
]

# (train end, val end, test end) in rows for the hourly ETT sets: 12/4/4 months of 30 days
ETT_BORDERS = (12 * 30 * 24, 16 * 30 * 24, 20 * 30 * 24)


class StandardScaler:
    """Per-channel standardisation with the population standard deviation (sklearn's ``StandardScaler``)."""

    def __init__(self) -> None:
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None

    def fit(self, rows: np.ndarray) -> StandardScaler:
        """Fit on ``rows`` (L, C): mean and population std per channel (a constant channel gets std 1)."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] == 0:
            raise ValueError(f"rows must have shape (length >= 1, channels), got {rows.shape}")
        if not np.all(np.isfinite(rows)):
            raise ValueError("rows contain NaN or inf: the scaler's mean and std would be NaN; clean or impute first")
        self.mean = rows.mean(axis=0)
        std = rows.std(axis=0)
        self.scale = np.where(std > 0, std, 1.0)
        return self

    def _check(self) -> tuple[np.ndarray, np.ndarray]:
        if self.mean is None or self.scale is None:
            raise RuntimeError("StandardScaler is not fitted; call fit(rows) first")
        return self.mean, self.scale

    def _check_channels(self, rows: Any, n_channels: int) -> None:
        shape = tuple(rows.shape)
        if len(shape) < 1 or shape[-1] != n_channels:
            raise ValueError(
                f"rows must have the {n_channels} channels the scaler was fitted on in the last axis, got shape {shape}"
            )

    def transform(self, rows: Any) -> np.ndarray:
        """(rows - mean) / std, per channel along the last axis of ``rows`` (..., C)."""
        mean, scale = self._check()
        arr = np.asarray(rows, dtype=np.float64)
        self._check_channels(arr, len(mean))
        return (arr - mean) / scale

    def inverse_transform(self, rows: Any) -> Any:
        """rows * std + mean, per channel along the last axis of ``rows`` (..., C), e.g. forecasts (B, H, C)
        (torch tensors stay tensors, on their device and dtype)."""
        mean, scale = self._check()
        self._check_channels(rows if isinstance(rows, Tensor) else np.asarray(rows), len(mean))
        if isinstance(rows, Tensor):
            return rows * torch.as_tensor(scale, dtype=rows.dtype, device=rows.device) + torch.as_tensor(
                mean, dtype=rows.dtype, device=rows.device
            )
        return np.asarray(rows, dtype=np.float64) * scale + mean


class WindowDataset(torch.utils.data.Dataset):
    """All windows (x (T, C), y (H, C)) of a (L, C) series with stride 1: ``L - T - H + 1`` of them.

    ``dataset[i]`` works with a ``torch.utils.data.DataLoader``; :meth:`batches` is the fast path (one gather
    from an ``unfold`` view per batch, no per-window Python).
    """

    def __init__(self, series: Any, seq_len: int, pred_len: int, name: str = "series") -> None:
        data = torch.as_tensor(np.asarray(series, dtype=np.float32))
        if data.ndim == 1:
            data = data[:, None]
        if data.ndim != 2:
            raise ValueError(f"{name} must have shape (length, channels), got {tuple(data.shape)}")
        seq_len, pred_len = check_int("seq_len", seq_len, min=1), check_int("pred_len", pred_len, min=1)
        if data.shape[0] < seq_len + pred_len:
            raise ValueError(
                f"{name} has {data.shape[0]} steps, shorter than seq_len + pred_len = {seq_len} + {pred_len} = "
                f"{seq_len + pred_len} needed for one window"
            )
        if data.shape[1] == 0:
            raise ValueError(f"{name} has no channels, shape {tuple(data.shape)}")
        if not bool(torch.isfinite(data).all()):
            raise ValueError(f"{name} contains NaN or inf; clean or impute the series first")
        self.series = data.contiguous()
        self.seq_len, self.pred_len = seq_len, pred_len
        # (n_windows, C, T + H): a strided view over the series, no copy
        self._view = self.series.unfold(0, seq_len + pred_len, 1)
        self._offsets = torch.arange(seq_len + pred_len)

    @property
    def n_channels(self) -> int:
        return int(self.series.shape[1])

    def __len__(self) -> int:
        return int(self._view.shape[0])

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        w = self._view[i].T  # (T + H, C)
        return w[: self.seq_len], w[self.seq_len :]

    def take(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """Windows ``index`` (1-D long tensor) as x (b, T, C), y (b, H, C): one gather into a (b, T + H, C) block,
        so each window is contiguous in memory (the model's reshapes stay views)."""
        rows = index[:, None] + self._offsets  # (b, T + H) row numbers
        w = self.series[rows]  # (b, T + H, C)
        return w[:, : self.seq_len], w[:, self.seq_len :]

    def batches(
        self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None, drop_last: bool = False
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Iterate (x, y) batches; the last partial batch is kept unless ``drop_last`` (the paper's fix)."""
        batch_size = check_int("batch_size", batch_size, min=1)
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self.take(order[start : start + batch_size])

    def num_batches(self, batch_size: int, drop_last: bool = False) -> int:
        return len(self) // batch_size if drop_last else -(-len(self) // batch_size)

    def arrays(self) -> tuple[Tensor, Tensor]:
        """Every window at once: x (n, T, C), y (n, H, C) (copies; mind the memory for long series)."""
        return self.take(torch.arange(len(self)))


@dataclass
class Splits:
    """Train/val/test window datasets of one series and the scaler fitted on its training rows."""

    train: WindowDataset
    val: WindowDataset
    test: WindowDataset
    scaler: StandardScaler
    name: str = ""

    @property
    def n_channels(self) -> int:
        return self.train.n_channels


def split_series(
    values: Any,
    seq_len: int,
    pred_len: int,
    borders: tuple[int, int, int] | None = None,
    scale: bool = True,
    name: str = "series",
) -> Splits:
    """Split a (L, C) array by the Time-Series-Library rule and build the window datasets.

    ``borders`` = (train end, val end, test end) in rows; default: 7:1:2 of the rows (``int(0.7 L)`` train,
    ``int(0.2 L)`` test, the rest val). Val and test start ``seq_len`` rows before their border, so that the first
    target follows it. The scaler is fitted on the training rows only.
    """
    seq_len, pred_len = check_int("seq_len", seq_len, min=1), check_int("pred_len", pred_len, min=1)
    scale = check_bool("scale", scale)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"values must be a numeric (length, channels) array: {e}") from e
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"values must have shape (length >= 1, channels), got {arr.shape}")
    length = arr.shape[0]
    if borders is None:
        n_train, n_test = int(length * 0.7), int(length * 0.2)
        borders = (n_train, length - n_test, length)
    if len(borders) != 3:
        raise ValueError(f"borders must be (train end, val end, test end), got {borders!r}")
    b_train, b_val, b_test = (check_int(f"borders[{i}]", b) for i, b in enumerate(borders))
    borders = (b_train, b_val, b_test)
    if not 0 < b_train <= b_val <= b_test <= length:
        raise ValueError(f"borders must satisfy 0 < train <= val <= test <= length={length}, got {borders}")
    if not np.all(np.isfinite(arr[:b_test])):
        raise ValueError(f"{name} contains NaN or inf; clean or impute the series first")
    scaler = StandardScaler().fit(arr[:b_train])
    data = scaler.transform(arr) if scale else arr
    starts = (0, b_train - seq_len, b_val - seq_len)
    ends = (b_train, b_val, b_test)
    if starts[1] < 0:
        raise ValueError(f"seq_len={seq_len} is longer than the training split ({b_train} rows)")
    parts = [
        WindowDataset(data[s:e], seq_len, pred_len, name=f"{name} {split} split ({e - s} rows)")
        for s, e, split in zip(starts, ends, ("train", "val", "test"), strict=True)
    ]
    return Splits(*parts, scaler=scaler, name=name)


def load_ett(
    name: Literal["ETTh1", "ETTh2"] = "ETTh1", path: str | os.PathLike[str] | None = None, *, download: bool = False
) -> np.ndarray:
    """The 7 value columns of ETTh1/ETTh2 as a float64 array (17,420, 7), via ``icml25_shared.data``
    (sha256-verified; ``path`` overrides the lookup; ``download`` fetches a copy that is nowhere on the machine).
    Raises :class:`icml25_shared.data.DataNotFoundError` when the file is missing."""
    check_choice("name", name, ("ETTh1", "ETTh2"))
    from icml25_shared import data as shared_data

    file = shared_data.file_path(name, path=path, download=download)
    return np.loadtxt(Path(file), delimiter=",", skiprows=1, usecols=range(1, 8), dtype=np.float64)


def ett(
    name: Literal["ETTh1", "ETTh2"] = "ETTh1",
    seq_len: int = 720,
    pred_len: int = 96,
    path: str | os.PathLike[str] | None = None,
    *,
    download: bool = False,
) -> Splits:
    """ETTh1/ETTh2 windows with the standard 12/4/4-month split (7,825 / 2,785 / 2,785 at T=720, H=96),
    standardised with the training rows' statistics ("M" features: all 7 channels in and out)."""
    return split_series(load_ett(name, path, download=download), seq_len, pred_len, borders=ETT_BORDERS, name=name)


def dominant_period(train_rows: Any, k: int = 1, max_period: float | None = None) -> int:
    """The period with the largest mean FFT amplitude over channels of ``train_rows`` (L, C) (use the training
    rows only); ``k`` > 1 returns the k-th strongest. Ties go to the lower frequency."""
    arr = np.asarray(train_rows, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 4:
        raise ValueError(f"train_rows must have shape (length >= 4, channels), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("train_rows contain NaN or inf; clean or impute the series first")
    length = arr.shape[0]
    k = check_int("k", k, min=1)
    max_period = check_float("max_period", max_period, min=2.0, allow_none=True)
    amp = np.abs(np.fft.rfft(arr - arr.mean(axis=0), axis=0)).mean(axis=1)
    freqs = np.arange(len(amp))
    periods = np.where(freqs > 0, length / np.maximum(freqs, 1), np.inf)
    # candidates: the non-zero frequencies (period <= max_period when given) carrying any amplitude
    ok = (freqs > 0) & (amp > 0)
    if max_period is not None:
        ok &= periods <= max_period
    cand = np.flatnonzero(ok)
    if k > len(cand):
        raise ValueError(
            f"k must be <= the number of periodic components found ({len(cand)}: a constant series has none"
            f"{'' if max_period is None else f', max_period={max_period} allows periods up to {max_period}'}), "
            f"got k={k}"
        )
    order = cand[np.argsort(-amp[cand], kind="stable")]
    return int(round(float(periods[order[k - 1]])))
