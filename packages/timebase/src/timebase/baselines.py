"""Peers TimeBase is measured against: DLinear (Zeng et al., AAAI 2023), seasonal-naive and last-value forecasts.

All map a window (B, T, C) to a forecast (B, H, C), channel-independently.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from icml25_shared.validate import check_bool, check_float, check_int, check_tensor
from timebase.data import WindowDataset
from timebase.least_squares import sliding_moments, solve_affine
from timebase.model import check_window, param_dtype

__all__ = ["DLinear", "SeasonalNaive", "LastValue", "moving_average"]


def moving_average(x: Tensor, kernel_size: int) -> Tensor:
    """DLinear's trend: mean over ``kernel_size`` steps, stride 1, with the first/last value repeated
    (kernel_size - 1) // 2 times at each end, along axis 1 of x (B, T, C); same length T for odd kernels."""
    front = x[:, :1].expand(-1, (kernel_size - 1) // 2, -1)
    back = x[:, -1:].expand(-1, (kernel_size - 1) // 2, -1)
    z = torch.cat([front, x, back], dim=1)
    return nn.functional.avg_pool1d(z.transpose(1, 2), kernel_size, stride=1).transpose(1, 2)


class DLinear(nn.Module):
    """DLinear: trend = moving average (kernel 25, replicate padding), seasonal = x - trend, one
    ``nn.Linear(T, H)`` on each, summed. ``individual=True`` gives each channel its own pair of layers.

    DLinear is affine in the window, so :meth:`fit_least_squares` gives its best fit on a training split in
    closed form (seconds), the strongest DLinear there is under MSE on that split.
    """

    def __init__(
        self,
        seq_len: int,
        pred_len: int,
        kernel_size: int = 25,
        individual: bool = False,
        n_channels: int | None = None,
    ) -> None:
        super().__init__()
        seq_len, pred_len = check_int("seq_len", seq_len, min=1), check_int("pred_len", pred_len, min=1)
        kernel_size = check_int("kernel_size", kernel_size, min=1)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (same-length moving average), got {kernel_size}")
        individual = check_bool("individual", individual)
        n_channels = check_int("n_channels", n_channels, min=1, allow_none=not individual)
        self.seq_len, self.pred_len, self.kernel_size = seq_len, pred_len, kernel_size
        self.individual, self.n_channels = individual, n_channels
        n = n_channels if individual else 1
        assert n is not None
        self.linear_seasonal = nn.ModuleList(nn.Linear(seq_len, pred_len) for _ in range(n))
        self.linear_trend = nn.ModuleList(nn.Linear(seq_len, pred_len) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, C)."""
        check_window(x, self.seq_len, self.n_channels if self.individual else None, dtype=param_dtype(self))
        trend = moving_average(x, self.kernel_size)
        seasonal, trend = (x - trend).transpose(1, 2), trend.transpose(1, 2)  # (B, C, T)
        if not self.individual:
            return (self.linear_seasonal[0](seasonal) + self.linear_trend[0](trend)).transpose(1, 2)
        seas = cast("list[nn.Linear]", list(self.linear_seasonal))
        trnd = cast("list[nn.Linear]", list(self.linear_trend))
        ws = torch.stack([m.weight for m in seas])  # (C, H, T)
        wt = torch.stack([m.weight for m in trnd])
        bias = torch.stack([m.bias for m in seas]) + torch.stack([m.bias for m in trnd])
        y = torch.einsum("bct,cht->bch", seasonal, ws) + torch.einsum("bct,cht->bch", trend, wt) + bias
        return y.transpose(1, 2)

    def num_parameters(self) -> int:
        """2 * (T*H + H), times C when individual."""
        return sum(p.numel() for p in self.parameters())

    def macs(self, n_channels: int) -> int:
        """Multiply-accumulates per sample of the two linear layers: C * 2 * T * H."""
        check_int("n_channels", n_channels, min=1)
        return n_channels * 2 * self.seq_len * self.pred_len

    @torch.no_grad()
    def fit_least_squares(self, dataset: WindowDataset, ridge: float = 0.0) -> DLinear:
        """Set the weights to the least-squares optimum on ``dataset`` (closed form) and return ``self``.

        y = Ws (x - Kx) + Wt Kx + b is the full affine map x -> A x + b (take Ws = Wt = A), so the optimum is
        ordinary least squares of the H targets on the T inputs plus an intercept over all (window, channel)
        rows, computed from :func:`~timebase.least_squares.sliding_moments` in O((T + H) * L).
        """
        if not isinstance(dataset, WindowDataset):
            raise ValueError(
                f"dataset must be a timebase.data.WindowDataset (e.g. splits.train), got {type(dataset).__name__}"
            )
        if (dataset.seq_len, dataset.pred_len) != (self.seq_len, self.pred_len):
            raise ValueError(
                f"dataset windows are (seq_len={dataset.seq_len}, pred_len={dataset.pred_len}), the model "
                f"expects ({self.seq_len}, {self.pred_len})"
            )
        if self.individual and dataset.n_channels != self.n_channels:
            raise ValueError(
                f"dataset has {dataset.n_channels} channels, this individual DLinear has n_channels={self.n_channels}"
            )
        ridge = check_float("ridge", ridge, min=0.0)
        series = dataset.series.double().numpy()
        width = self.seq_len + self.pred_len
        channels = range(series.shape[1]) if self.individual else [None]
        for k, ch in enumerate(channels):
            s = series if ch is None else series[:, ch : ch + 1]
            g, m, n = sliding_moments(s, width)
            coef, icpt = solve_affine(g, m, n, self.seq_len, ridge)  # (T, H), (H,)
            w = torch.as_tensor(np.ascontiguousarray(coef.T))
            for layer in cast("tuple[nn.Linear, nn.Linear]", (self.linear_seasonal[k], self.linear_trend[k])):
                layer.weight.copy_(w.to(layer.weight))
                layer.bias.copy_(torch.as_tensor(icpt / 2).to(layer.bias))
        return self


class SeasonalNaive(nn.Module):
    """Repeat the last ``period`` steps of the window: y[T + h] = x[T - period + (h mod period)]."""

    def __init__(self, period: int = 24, pred_len: int | None = None) -> None:
        super().__init__()
        period = check_int("period", period, min=1)
        pred_len = check_int("pred_len", pred_len, min=1, allow_none=True)
        self.period, self.pred_len = period, pred_len

    def forward(self, x: Tensor, pred_len: int | None = None) -> Tensor:
        """(B, T, C) -> (B, H, C) with H = ``pred_len`` (argument or constructor)."""
        h = pred_len if pred_len is not None else self.pred_len
        if h is None:
            raise ValueError("pred_len must be given (to the constructor or to forward)")
        h = check_int("pred_len", h, min=1)
        check_tensor("x", x, dtype="floating")
        if x.ndim != 3 or x.shape[1] < self.period:
            raise ValueError(f"x must have shape (batch, seq_len >= period={self.period}, channels), got {x.shape}")
        last = x[:, -self.period :]
        reps = -(-h // self.period)
        return last.repeat(1, reps, 1)[:, :h]


class LastValue(nn.Module):
    """Repeat the last value of the window H times."""

    def __init__(self, pred_len: int) -> None:
        super().__init__()
        check_int("pred_len", pred_len, min=1)
        self.pred_len = pred_len

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, H, C); refuses other shapes and NaN/inf inputs (a NaN last value would be forecast
        silently)."""
        check_tensor("x", x, dtype="floating")
        if x.ndim != 3 or x.shape[1] == 0:
            raise ValueError(f"x must have shape (batch, seq_len >= 1, channels), got {tuple(x.shape)}")
        last = x[:, -1:]
        if not bool(torch.isfinite(last).all()):
            raise ValueError("x has NaN or inf at its last step: LastValue would forecast it; clean or impute first")
        return last.expand(-1, self.pred_len, -1)
