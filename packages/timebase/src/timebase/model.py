"""TimeBase: basis extraction and segment-level forecasting, per phase, channel-independent (paper Sec. 3).

Shapes: B batch, T = seq_len, H = pred_len, C channels, P = period_len, N = ceil(T/P) input segments,
M = ceil(H/P) output segments, R = basis_num.

    x (B, T, C) -> segments (B, N, P, C)        # z[:, n, p, c] = x[:, n*P + p, c]  (a free view)
    mu = mean over N (period norm)              # (B, 1, P, C)
    basis = W1 (x - mu) + b1, contracting N     # (B, R, P, C)   "BasisExtract"
    y = W2 basis + b2 + mu, contracting R       # (B, M, P, C)   "SegmentForecast"
    y -> (B, M*P, C) -> crop H -> (B, H, C)     # a free view again

The official code permutes to (B*C, P, N) and back; keeping time-major, channels-last layout makes every reshape
a view and each linear map one batched GEMM over (P*C) columns -- the same arithmetic (tested against a literal
transcription of the official forward).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

import torch
from torch import Tensor, nn

from icml25_shared.validate import check_choice, check_int, check_tensor
from timebase.config import OrthNorm, PadMode, TimeBaseConfig

__all__ = [
    "TimeBase",
    "TimeBaseOutput",
    "MultiSeasonalTimeBase",
    "orthogonal_loss",
    "pad_segments",
    "check_window",
]


def orthogonal_loss(basis: Tensor, norm: OrthNorm = "fro") -> Tensor:
    """Orthogonality regulariser (paper Eq. 6 / official code) of ``basis`` with shape (G, P, R).

    For each group b, Gram G_b = basis_b^T basis_b (R x R); the loss is the mean over groups of the Frobenius
    norm of G_b minus its diagonal: unsquared for ``norm="fro"`` (official code), squared for ``"fro2"`` (paper).
    """
    check_choice("norm", norm, get_args(OrthNorm))
    if basis.ndim != 3:
        raise ValueError(f"basis must have shape (groups, period_len, basis_num), got {tuple(basis.shape)}")
    gram = basis.transpose(-1, -2) @ basis  # (G, R, R)
    off = gram - torch.diag_embed(torch.diagonal(gram, dim1=-2, dim2=-1))
    sq = off.square().sum(dim=(-2, -1))
    if norm == "fro2":
        return sq.mean()
    # sqrt with a zero-safe gradient: d sqrt(s)/ds is infinite at s = 0, where the off-diagonal part (and its
    # gradient direction) vanishes; use 0 there, the subgradient torch.linalg.norm also picks.
    safe = torch.where(sq > 0, sq, torch.ones_like(sq))
    return torch.where(sq > 0, safe.sqrt(), torch.zeros_like(sq)).mean()


def pad_segments(x: Tensor, period_len: int, mode: PadMode = "aligned", dim: int = -1) -> Tensor:
    """Pad ``x`` along ``dim`` (length T) to N*P steps with same-phase values.

    ``"official"`` appends x[s - pad : s] with s = (N - 1) * P (the segment grid starts at t = 0);
    ``"aligned"`` prepends x[r : r + pad] with r = T mod P (the grid ends at t = T - 1, so output phases
    line up with input phases). Both return ``x`` unchanged when P divides T.
    """
    check_choice("mode", mode, get_args(PadMode))
    if type(period_len) is not int or period_len < 1:  # the forward's calls take the fast path
        period_len = check_int("period_len", period_len, min=1)
    t = x.shape[dim]
    n = -(-t // period_len)
    pad = n * period_len - t
    if pad == 0:
        return x
    if mode == "official":
        return torch.cat([x, x.narrow(dim, (n - 1) * period_len - pad, pad)], dim=dim)
    return torch.cat([x.narrow(dim, t % period_len, pad), x], dim=dim)


def check_window(
    x: Any,
    seq_len: int,
    n_channels: int | None = None,
    name: str = "x",
    check_finite: bool = True,
    dtype: torch.dtype | None = None,
) -> None:
    """Raise a ``ValueError`` unless ``x`` is a (finite, unless ``check_finite=False``) floating tensor of shape
    (B, seq_len, C), of ``dtype`` when given (the model's parameter dtype)."""
    check_tensor(name, x, dtype="floating")
    if dtype is not None and x.dtype != dtype:
        raise ValueError(
            f"{name} has dtype {x.dtype} but the model's parameters are {dtype}: cast the input "
            f"({name}.to({dtype})) or the model (model.to({x.dtype}))"
        )
    if x.ndim != 3:
        raise ValueError(f"{name} must have shape (batch, seq_len={seq_len}, channels), got {tuple(x.shape)}")
    if x.shape[1] != seq_len:
        raise ValueError(f"{name} must have seq_len={seq_len} steps on axis 1, got {x.shape[1]} ({tuple(x.shape)})")
    if x.shape[0] == 0 or x.shape[2] == 0:
        raise ValueError(f"{name} must have at least one sample and one channel, got shape {tuple(x.shape)}")
    if n_channels is not None and x.shape[2] != n_channels:
        raise ValueError(f"{name} must have n_channels={n_channels} channels on axis 2, got {x.shape[2]}")
    if check_finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf; clean or impute the series first")


def param_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of ``module``'s first parameter (``None`` without parameters)."""
    p = next(module.parameters(), None)
    return p.dtype if p is not None else None


@dataclass
class TimeBaseOutput:
    """Auxiliary outputs of :meth:`TimeBase.forward` with ``return_aux=True``."""

    basis: Tensor
    """The extracted basis, (B*C, P, R)."""
    orth_loss: Tensor
    """:func:`orthogonal_loss` of ``basis`` (scalar), to be added (times lambda) to the training loss only."""


class _ChannelLinear(nn.Module):
    """C independent ``nn.Linear(in_features, out_features)`` stacked as (C, out, in), same default init."""

    def __init__(self, n_channels: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(n_channels, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(n_channels, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in)); bias alike
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        # x (B, in, P, C) -> (B, out, P, C): one batched contraction instead of a Python loop over channels
        return torch.einsum("bipc,coi->bopc", x, self.weight) + self.bias.T[None, :, None, :]


def _shared_linear(layer: nn.Linear, z: Tensor) -> Tensor:
    """nn.Linear applied along axis 1 of z (B, in, P, C) -> (B, out, P, C), as one GEMM over P*C columns."""
    b, i, p, c = z.shape
    # bmm over an expanded (stride-0) weight: no transposed copies of z, unlike matmul's 2-D @ 3-D folding
    out = torch.bmm(layer.weight.expand(b, -1, -1), z.reshape(b, i, p * c)) + layer.bias[:, None]
    return out.reshape(b, layer.out_features, p, c)


class TimeBase(nn.Module):
    """The TimeBase forecaster: ``forward(x[B, T, C]) -> y[B, H, C]`` (see the module docstring).

    ``TimeBase(TimeBaseConfig(seq_len=720, pred_len=96))`` has 214 parameters. ``return_aux=True`` also returns
    a :class:`TimeBaseOutput` with the basis and its orthogonality loss.
    """

    def __init__(self, config: TimeBaseConfig) -> None:
        super().__init__()
        if not isinstance(config, TimeBaseConfig):
            raise ValueError(f"config must be a TimeBaseConfig, got {type(config).__name__}")
        self.config = config
        n, m, r = config.seg_num_x, config.seg_num_y, config.basis_num
        if config.individual:
            assert config.n_channels is not None  # validated by the config
            self.basis_extract: nn.Module = _ChannelLinear(config.n_channels, n, r)  # W1, b1 per channel
            self.segment_forecast: nn.Module = _ChannelLinear(config.n_channels, r, m)  # W2, b2 per channel
        else:
            self.basis_extract = nn.Linear(n, r)  # W1 (R, N), b1 (R,)   eq. "BasisExtract"
            self.segment_forecast = nn.Linear(r, m)  # W2 (M, R), b2 (M,)  eq. "SegmentForecast"
        self._crops_phases = config.pred_len < config.period_len

    # ----------------------------------------------------------------------------------------------- forward
    def segments(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Centred same-phase segments z (B, N, P, C) of a window x (B, T, C), z[:, n, p] = x[:, n*P + p] - mu,
        and the mean mu (B, 1, P, C) that is added back to the forecast.

        No input validation (see :func:`check_window`); used by :meth:`forward` and the least-squares fit.
        """
        cfg = self.config
        b, _, c = x.shape
        z = pad_segments(x, cfg.period_len, cfg.pad_mode, dim=1)  # (B, N*P, C)
        z = z.reshape(b, cfg.seg_num_x, cfg.period_len, c)
        if cfg.period_norm:
            mu = z.mean(dim=1, keepdim=True)  # per-phase mean over the N segments
        else:
            mu = z.mean(dim=(1, 2), keepdim=True).expand(-1, -1, cfg.period_len, -1)  # whole padded window
        return z - mu, mu

    def _linear(self, layer: nn.Module, z: Tensor) -> Tensor:
        return layer(z) if self.config.individual else _shared_linear(layer, z)  # type: ignore[arg-type]

    def forward(self, x: Tensor, return_aux: bool = False) -> Tensor | tuple[Tensor, TimeBaseOutput]:
        """Forecast (B, H, C) from the window ``x`` (B, T, C); with ``return_aux`` also a :class:`TimeBaseOutput`."""
        cfg = self.config
        # every input value reaches the output through its phase mean unless that phase is cropped (H < P), so
        # checking the (smaller) output for NaN/inf catches a non-finite input; the input is then checked for
        # the error message (a non-finite output from finite input, e.g. diverged weights, is returned as is)
        check_window(x, cfg.seq_len, cfg.n_channels if cfg.individual else None, check_finite=self._crops_phases,
                     dtype=param_dtype(self))  # fmt: skip
        b, _, c = x.shape
        z, mu = self.segments(x)  # (B, N, P, C), (B, 1, P, C)
        basis = self._linear(self.basis_extract, z)  # (B, R, P, C)   eq. BasisExtract
        y = self._linear(self.segment_forecast, basis) + mu  # (B, M, P, C)   eq. SegmentForecast
        y = y.reshape(b, cfg.seg_num_y * cfg.period_len, c)[:, : cfg.pred_len]  # (B, H, C)
        if not self._crops_phases and not bool(torch.isfinite(y.detach()).all()):
            check_window(x, cfg.seq_len)
        if not return_aux:
            return y
        basis = basis.permute(0, 3, 2, 1).reshape(b * c, cfg.period_len, cfg.basis_num)  # official (B*C, P, R)
        return y, TimeBaseOutput(basis, orthogonal_loss(basis, cfg.orth_norm))

    def training_loss(self, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """(MSE(forecast, target) + orth_weight * L_orth, forecast): the official training objective."""
        if self.config.orth_weight > 0:
            y, aux = self(x, return_aux=True)
            return nn.functional.mse_loss(y, target) + self.config.orth_weight * aux.orth_loss, y
        y = self(x)
        return nn.functional.mse_loss(y, target), y

    # ----------------------------------------------------------------------------------------- introspection
    def num_parameters(self) -> int:
        """Number of parameters (equals :meth:`TimeBaseConfig.num_parameters`)."""
        return sum(p.numel() for p in self.parameters())

    def macs(self, n_channels: int | None = None) -> int:
        """MACs per sample of the two linear maps for ``n_channels`` channels (config's by default)."""
        c = n_channels if n_channels is not None else self.config.n_channels
        if c is None:
            raise ValueError("n_channels must be given (the config has none)")
        return self.config.macs(c)

    @torch.no_grad()
    def as_affine(self) -> tuple[Tensor, Tensor]:
        """The forecaster as the affine map it is: y[:, h, c] = sum_t x[:, t, c] A[t, h] + c[h].

        Returns (A (T, H), c (H,)) for shared weights, (A (C, T, H), c (C, H)) when ``individual``. The linear
        map acting on the centred segments has rank <= basis_num
        (the mean added back adds up to P more). Computed by probing the model with the zero window and the T
        unit windows.
        """
        cfg = self.config
        p = next(self.parameters())
        n_ch = cfg.n_channels if cfg.individual else 1
        assert n_ch is not None
        probe = torch.cat([torch.zeros(1, cfg.seq_len), torch.eye(cfg.seq_len)]).to(p)  # (T+1, T)
        out = self(probe[:, :, None].expand(-1, -1, n_ch).contiguous())  # (T+1, H, C)
        const, lin = out[0], out[1:] - out[:1]  # (H, C), (T, H, C)
        if cfg.individual:
            return lin.permute(2, 0, 1).contiguous(), const.T.contiguous()
        return lin[..., 0].contiguous(), const[:, 0].contiguous()

    # ---------------------------------------------------------------------------------------------- save/load
    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``; returns the directory."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf-8")
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, d / "model.safetensors")
        return d

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str]) -> TimeBase:
        """Load a model written by :meth:`save_pretrained`."""
        from safetensors.torch import load_file

        d = Path(directory)
        raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
        if "periods" in raw:
            raise ValueError(f"{d} holds a MultiSeasonalTimeBase; load it with MultiSeasonalTimeBase.from_pretrained")
        cfg = TimeBaseConfig.from_dict(raw)
        model = cls(cfg)
        model.load_state_dict(load_file(d / "model.safetensors"))
        return model

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"T={c.seq_len}, H={c.pred_len}, P={c.period_len}, N={c.seg_num_x}, M={c.seg_num_y}, R={c.basis_num}, "
            f"individual={c.individual}, period_norm={c.period_norm}, pad_mode={c.pad_mode!r}"
        )


class MultiSeasonalTimeBase(nn.Module):
    """Sum of TimeBase models with different periods (paper Appendix C.6), trained jointly.

    ``MultiSeasonalTimeBase(cfg, periods=(24, 168))`` builds one :class:`TimeBase` per period from ``cfg`` with
    ``period_len`` replaced and ``basis_num`` clipped to that period's segment count N = ceil(T / P) (at T = 720, P
    = 168 gives N = 5, below the default R = 6), or given per period (``basis_num=(6, 4)``); the forecast is the sum
    of their forecasts and the orthogonality loss the sum of theirs. The paper (Appendix C.6) gives no more detail;
    our choice: every component centres its input with its own (per-phase) mean, and only the first component adds
    its mean back, so the level of the window is counted once and the other components model the residual
    seasonality.
    """

    def __init__(
        self,
        config: TimeBaseConfig,
        periods: tuple[int, ...] = (24, 168),
        basis_num: int | tuple[int, ...] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(config, TimeBaseConfig):
            raise ValueError(f"config must be a TimeBaseConfig, got {type(config).__name__}")
        if isinstance(periods, (str, bytes)) or not hasattr(periods, "__len__") or len(periods) == 0:
            raise ValueError(f"periods must be a non-empty sequence of ints, got {periods!r}")
        self.config = config
        self.periods = tuple(check_int(f"periods[{i}]", p, min=1) for i, p in enumerate(periods))
        self.basis_nums = self._basis_nums(basis_num)
        self.components = nn.ModuleList(
            TimeBase(config.replace(period_len=p, basis_num=r)) for p, r in zip(self.periods, self.basis_nums)
        )

    def _basis_nums(self, basis_num: int | tuple[int, ...] | None) -> tuple[int, ...]:
        """R per component: ``None`` takes ``config.basis_num`` clipped to each component's segment count
        N = ceil(T / P) (R <= N: at T = 720, P = 168 has N = 5 < the default R = 6); an int is shared; a
        sequence gives one per period."""
        n_segs = [-(-self.config.seq_len // p) for p in self.periods]
        if basis_num is None:
            return tuple(min(self.config.basis_num, n) for n in n_segs)
        if not isinstance(basis_num, (str, bytes)) and hasattr(basis_num, "__len__"):  # a list, tuple or array
            basis_num = tuple(basis_num)  # type: ignore[arg-type]
            if len(basis_num) != len(self.periods):
                raise ValueError(
                    f"basis_num must give one R per period ({len(self.periods)} for periods={self.periods}), "
                    f"got {tuple(basis_num)}"
                )
            return tuple(check_int(f"basis_num[{i}]", r, min=1) for i, r in enumerate(basis_num))  # type: ignore[misc]
        r = check_int("basis_num", basis_num, min=1)
        return (r,) * len(self.periods)  # type: ignore[return-value]

    def forward(self, x: Tensor, return_aux: bool = False) -> Tensor | tuple[Tensor, TimeBaseOutput]:
        """Sum of the components' forecasts (the level of the window is added by the first component only)."""
        cfg = self.config
        check_window(x, cfg.seq_len, cfg.n_channels if cfg.individual else None, dtype=param_dtype(self))
        total: Tensor | None = None
        orth = x.new_zeros(())
        bases = []
        for i, comp in enumerate(self._timebases()):
            if return_aux:
                y, aux = comp(x, return_aux=True)
                orth = orth + aux.orth_loss
                bases.append(aux.basis)
            else:  # inference: no orthogonality loss (its Gram matrices are not part of the forecast)
                y = comp(x)
            if i > 0:  # remove the level this component added back: only its centred forecast counts
                _, mu = comp.segments(x)  # (B, 1, P_i, C)
                level = mu.expand(-1, comp.config.seg_num_y, -1, -1).reshape(x.shape[0], -1, x.shape[2])
                y = y - level[:, : cfg.pred_len]
            total = y if total is None else total + y
        assert total is not None
        if return_aux:
            return total, TimeBaseOutput(bases[0], orth)
        return total

    def training_loss(self, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """MSE + orth_weight * (sum of the components' orthogonality losses)."""
        y, aux = self(x, return_aux=True)
        return nn.functional.mse_loss(y, target) + self.config.orth_weight * aux.orth_loss, y

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def macs(self, n_channels: int) -> int:
        return sum(c.config.macs(n_channels) for c in self._timebases())

    def _timebases(self) -> list[TimeBase]:
        return cast("list[TimeBase]", list(self.components))

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` (the shared config, the periods and each component's R) and
        ``model.safetensors`` into ``directory``; returns the directory."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        meta = {"config": self.config.to_dict(), "periods": list(self.periods), "basis_num": list(self.basis_nums)}
        (d / "config.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, d / "model.safetensors")
        return d

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str]) -> MultiSeasonalTimeBase:
        """Load a model written by :meth:`save_pretrained`."""
        from safetensors.torch import load_file

        d = Path(directory)
        raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
        if "periods" not in raw:
            raise ValueError(f"{d} holds a single-period TimeBase; load it with TimeBase.from_pretrained")
        model = cls(TimeBaseConfig.from_dict(raw["config"]), tuple(raw["periods"]), tuple(raw["basis_num"]))
        model.load_state_dict(load_file(d / "model.safetensors"))
        return model
