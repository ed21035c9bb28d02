"""Hyper-parameters of TimeBase (:class:`TimeBaseConfig`) and the official per-dataset, per-horizon presets.

Every field is validated in ``__post_init__``; errors name the field, the value received and what was expected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, cast, get_args

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["TimeBaseConfig", "TrainingPreset", "PRESETS", "training_preset", "PadMode", "OrthNorm"]

PadMode = Literal["aligned", "official"]
OrthNorm = Literal["fro", "fro2"]


@dataclass
class TimeBaseConfig:
    """Configuration of a :class:`timebase.TimeBase` forecaster.

    The look-back window of ``seq_len`` steps is cut into ``seg_num_x = ceil(seq_len / period_len)`` segments of
    one period; ``basis_num`` basis segments are extracted from them and mapped to
    ``seg_num_y = ceil(pred_len / period_len)`` future segments, per phase.
    """

    seq_len: int
    """Look-back length T (720 in every paper experiment). Must be >= ``period_len``."""
    pred_len: int
    """Forecast horizon H; cropped from ``seg_num_y * period_len`` when not a multiple of the period."""
    period_len: int = 24
    """Period P (segment length): 24 for hourly data, FFT-chosen on the training rows otherwise."""
    basis_num: int = 6
    """Number of basis segments R (6 in the paper; 4 for ETTh2 at H=192). Must be <= ``seg_num_x``."""
    individual: bool = False
    """One (W1, b1, W2, b2) per channel instead of weights shared across channels."""
    n_channels: int | None = None
    """Number of channels C; required when ``individual`` is True, otherwise only checked if given."""
    period_norm: bool = True
    """Subtract (and add back) the per-phase mean over the segments; False: the whole-window mean."""
    pad_mode: PadMode = "aligned"
    """How a window with ``seq_len % period_len != 0`` is padded to whole segments: ``"aligned"`` prepends the
    same-phase values of the next segment (output phases line up with input phases); ``"official"`` appends the
    same-phase values of the previous segment, bit-for-bit the official code (forecast phase-shifted by the pad)."""
    orth_weight: float = 0.0
    """lambda_orth, the weight of the orthogonality regulariser in the training loss (presets: 0.04 to 0.2)."""
    orth_norm: OrthNorm = "fro"
    """``"fro"``: unsquared Frobenius norm of the off-diagonal Gram (official code); ``"fro2"``: squared (paper)."""

    def __post_init__(self) -> None:
        for name in ("seq_len", "pred_len", "period_len", "basis_num"):
            setattr(self, name, check_int(name, getattr(self, name), min=1))
        if self.seq_len < self.period_len:
            raise ValueError(
                f"seq_len must be >= period_len (at least one whole period), got seq_len={self.seq_len} "
                f"and period_len={self.period_len}"
            )
        if self.basis_num > self.seg_num_x:
            raise ValueError(
                f"basis_num must be <= seg_num_x = ceil(seq_len / period_len) = {self.seg_num_x} (the basis "
                f"compresses the segments), got basis_num={self.basis_num}"
            )
        self.individual = check_bool("individual", self.individual)
        self.period_norm = check_bool("period_norm", self.period_norm)
        self.n_channels = check_int("n_channels", self.n_channels, min=1, allow_none=True)
        if self.individual and self.n_channels is None:
            raise ValueError("n_channels must be given (an int >= 1) when individual=True, got None")
        check_choice("pad_mode", self.pad_mode, get_args(PadMode))
        check_choice("orth_norm", self.orth_norm, get_args(OrthNorm))
        self.orth_weight = check_float("orth_weight", self.orth_weight, min=0.0)

    @property
    def seg_num_x(self) -> int:
        """N = ceil(T / P), the number of input segments."""
        return -(-self.seq_len // self.period_len)

    @property
    def seg_num_y(self) -> int:
        """M = ceil(H / P), the number of output segments."""
        return -(-self.pred_len // self.period_len)

    @property
    def pad(self) -> int:
        """N * P - T, the number of padded steps (0 when P divides T)."""
        return self.seg_num_x * self.period_len - self.seq_len

    def num_parameters(self) -> int:
        """(N*R + R) + (R*M + M), times C when ``individual`` (the paper's Thm 3.1)."""
        n, m, r = self.seg_num_x, self.seg_num_y, self.basis_num
        per_channel = n * r + r + r * m + m
        channels = self.n_channels if self.individual else 1
        assert channels is not None  # individual=True requires n_channels (validated)
        return per_channel * channels

    def macs(self, n_channels: int) -> int:
        """Multiply-accumulates per sample of the two linear maps, as ``thop`` counts them: C*P*(N*R + R*M)."""
        n_channels = check_int("n_channels", n_channels, min=1)
        n, m, r = self.seg_num_x, self.seg_num_y, self.basis_num
        return n_channels * self.period_len * (n * r + r * m)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimeBaseConfig:
        """Inverse of :meth:`to_dict` (unknown keys raise)."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown TimeBaseConfig fields {sorted(unknown)}; expected a subset of {sorted(names)}")
        return cls(**d)

    def replace(self, **changes: Any) -> TimeBaseConfig:
        """A validated copy with ``changes`` applied."""
        return replace(self, **changes)

    @classmethod
    def preset(cls, dataset: str, pred_len: int, seq_len: int = 720, **overrides: Any) -> TimeBaseConfig:
        """The official model settings for ``dataset`` ("ETTh1", "ETTh2", "Weather") at horizon ``pred_len``
        (from the official scripts); the matching optimiser settings are :func:`training_preset`."""
        p = _lookup(dataset, pred_len)
        kw: dict[str, Any] = {
            "seq_len": seq_len,
            "pred_len": pred_len,
            "period_len": p.period_len,
            "basis_num": p.basis_num,
            "individual": p.individual,
            "n_channels": p.n_channels if p.individual else None,
            "orth_weight": p.orth_weight,
        }
        kw.update(overrides)
        return cls(**kw)


@dataclass(frozen=True)
class TrainingPreset:
    """One row of the official scripts: model settings plus the optimiser's batch size and learning rate."""

    orth_weight: float
    batch_size: int
    lr: float
    basis_num: int = 6
    period_len: int = 24
    individual: bool = False
    n_channels: int = 7


def _ett(rows: dict[int, tuple[float, int, float] | tuple[float, int, float, int]]) -> dict[int, TrainingPreset]:
    return {h: TrainingPreset(*cast("tuple[Any, ...]", v)) for h, v in rows.items()}


# (lambda_orth, batch, lr[, R]) from the official scripts/*.sh.
PRESETS: dict[str, dict[int, TrainingPreset]] = {
    "etth1": _ett({96: (0.16, 64, 0.1), 192: (0.16, 256, 0.4), 336: (0.08, 256, 0.4), 720: (0.12, 64, 0.05)}),
    "etth2": _ett({96: (0.2, 512, 0.2), 192: (0.08, 512, 0.06, 4), 336: (0.12, 64, 0.4), 720: (0.12, 64, 0.4)}),
    "weather": {
        h: TrainingPreset(0.04, 512, 0.02, 6, 4, True, 21) for h in (96, 192, 336, 720)
    },  # P=4 (FFT), individual
}


def _lookup(dataset: str, pred_len: int) -> TrainingPreset:
    table = PRESETS.get(str(dataset).lower())
    if table is None:
        raise ValueError(f"no preset for dataset {dataset!r}; expected one of {sorted(PRESETS)} (case-insensitive)")
    if pred_len not in table:
        raise ValueError(f"no {dataset} preset for pred_len={pred_len!r}; expected one of {sorted(table)}")
    return table[pred_len]


def training_preset(dataset: str, pred_len: int) -> dict[str, Any]:
    """The official optimiser settings for ``dataset`` at ``pred_len``, as keyword arguments of
    :func:`timebase.fit`: ``lr``, ``batch_size``, ``epochs=30``, ``patience=5``."""
    p = _lookup(dataset, pred_len)
    return {"lr": p.lr, "batch_size": p.batch_size, "epochs": 30, "patience": 5}
