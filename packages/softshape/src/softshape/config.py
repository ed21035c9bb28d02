"""Hyper-parameters of SoftShape (the paper's model and the official defaults) as a validated dataclass,
plus the shape-length rules."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "SoftShapeConfig",
    "UCR_SHAPE_SIZES",
    "ucr_shape_size",
    "auto_shape_size",
    "resolve_shape_size",
    "resolve_stride",
    "keep_ratios",
    "GATING_MODES",
]

# Per-dataset shape lengths of the official code for the UCR sets we could confirm (an int is m itself, a float
# is a ratio r with m = int(T * r)). The official table covers all 128 UCR names; only these entries were checked
# here, so every other name falls back to ``auto_shape_size`` (documented in the README as our rule).
UCR_SHAPE_SIZES: dict[str, int | float] = {
    "GunPoint": 32,
    "ItalyPowerDemand": 4,
    "ArrowHead": 16,
    "OSULeaf": 0.1,
    "ACSF1": 64,
}

Sparsify = Literal["soft", "hard", "none"]
EvalSparse = Literal["match_train", "always", "never"]
Gating = Literal["switch", "official"]
GATING_MODES: tuple[str, ...] = get_args(Gating)
SPARSIFY_MODES: tuple[str, ...] = get_args(Sparsify)
EVAL_SPARSE_MODES: tuple[str, ...] = get_args(EvalSparse)


def ucr_shape_size(name: str, default: int | float | str | None = "auto") -> int | float | str:
    """The shape length of the official code for UCR data set ``name`` (int, or float ratio of the length).

    Names outside the table return ``default`` (``"auto"``: our rule, see :func:`auto_shape_size`); pass
    ``default=None`` to get a ``KeyError`` instead.
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a UCR data set name (str), got {name!r}")
    if name in UCR_SHAPE_SIZES:
        return UCR_SHAPE_SIZES[name]
    if default is None:
        raise KeyError(f"no shape length for UCR data set {name!r}; known: {sorted(UCR_SHAPE_SIZES)}")
    return default


def auto_shape_size(n_timepoints: int) -> int:
    """Our rule for data sets outside the UCR table: m = clip(round(0.1 T), 4, 64).

    For very short inputs (T < 8, e.g. tabular data) m is capped at ceil(T / 2) so that at least two shapes exist.
    """
    if n_timepoints < 8:
        return max(1, math.ceil(n_timepoints / 2))
    return int(np.clip(round(0.1 * n_timepoints), 4, 64))


def resolve_shape_size(shape_size: int | float | str, n_timepoints: int) -> int:
    """Shape length m for series of length ``n_timepoints``: ``"auto"``, an int, or a float ratio in (0, 1]."""
    if isinstance(shape_size, str):
        if shape_size == "auto":
            m = auto_shape_size(n_timepoints)
        elif shape_size in UCR_SHAPE_SIZES:
            return resolve_shape_size(UCR_SHAPE_SIZES[shape_size], n_timepoints)
        else:
            raise ValueError(
                f"shape_size must be 'auto', a UCR name in the table, a positive int or a ratio in (0, 1], "
                f"got {shape_size!r}"
            )
    elif isinstance(shape_size, (bool, np.bool_)):
        raise ValueError(f"shape_size must be 'auto', a positive int or a ratio in (0, 1], got {shape_size!r}")
    elif isinstance(shape_size, (int, np.integer)):
        if shape_size < 1:
            raise ValueError(f"shape_size must be a positive int, got {shape_size}")
        m = int(shape_size)
    elif isinstance(shape_size, (float, np.floating)):
        if not 0.0 < shape_size <= 1.0:
            raise ValueError(f"shape_size as a ratio must lie in (0, 1], got {shape_size}")
        m = max(1, int(n_timepoints * shape_size))
    else:
        raise ValueError(f"shape_size must be 'auto', a positive int or a ratio in (0, 1], got {shape_size!r}")
    if m > n_timepoints:
        raise ValueError(
            f"shape_size={m} is longer than the series (n_timepoints={n_timepoints}, i.e. {n_timepoints} "
            "feature(s) for 2-D input); expected shape_size <= T"
        )
    return m


def resolve_stride(shape_size: int, stride: int) -> int:
    """The official rule: if m <= q then q = min(2, m)."""
    return min(2, shape_size) if shape_size <= stride else stride


def keep_ratios(depth: int, sparse_rate: float) -> list[float]:
    """Keep ratio per layer: r_l = 1 - linspace(0, sparse_rate, depth)[l] (layer 1 never sparsifies)."""
    return [float(1.0 - s) for s in np.linspace(0.0, sparse_rate, depth)]


@dataclass
class SoftShapeConfig:
    """Every hyper-parameter of :class:`~softshape.model.SoftShapeNet`.

    Attributes:
        n_timepoints: series length T after padding.
        n_classes: number of classes K (>= 2).
        n_channels: input channels C (1 for UCR).
        shape_size: shape length m (resolved int; see :func:`resolve_shape_size`).
        stride: stride q of the shape embedding (the m <= q rule is applied in ``__post_init__``).
        emb_dim: token width D (multiple of 4: the Inception expert concatenates 4 branches of D / 4).
        depth: number of SoftShape layers L.
        sparse_rate: final sparse rate rho in [0, 1); layer l keeps r_l = 1 - linspace(0, rho, L)[l].
        n_experts: experts E of the shared MoE (the paper: E = K).
        top_k: experts per token (the paper: 1).
        gating: gate value of the selected experts: ``"switch"`` (the router probability, not renormalised, so the
            router learns; Switch load-balancing loss) or ``"official"`` (the official code: top-k probabilities
            renormalised to 1, so with top-1 the router never gets a gradient; cv^2 balance loss). See
            :class:`~softshape.layers.SharedMoE`.
        dropout: dropout after the embedding, inside experts and before the head.
        sparsify: ``"soft"`` (keep top shapes, fuse the rest into one token), ``"hard"`` (drop the rest) or
            ``"none"`` (never sparsify).
        use_moe: apply the shared MoE in sparse layers (ablation switch).
        use_inception: apply the per-layer Inception expert (ablation switch).
        moe_in_dense: also apply the MoE in dense layers (the official code does not).
        scorer_hidden: hidden width of the contribution scorer (8 in the paper).
        inception_kernels: kernel sizes of the Inception branches (39, 19, 9).
    """

    n_timepoints: int
    n_classes: int
    n_channels: int = 1
    shape_size: int = 8
    stride: int = 4
    emb_dim: int = 128
    depth: int = 2
    sparse_rate: float = 0.5
    n_experts: int | None = None
    top_k: int = 1
    gating: Gating = "switch"
    dropout: float = 0.15
    sparsify: Sparsify = "soft"
    use_moe: bool = True
    use_inception: bool = True
    moe_in_dense: bool = False
    scorer_hidden: int = 8
    inception_kernels: tuple[int, ...] = field(default=(39, 19, 9))

    def __post_init__(self) -> None:
        for name in ("n_timepoints", "n_channels", "shape_size", "stride", "emb_dim", "depth", "top_k"):
            setattr(self, name, check_int(name, getattr(self, name), min=1))
        self.n_classes = check_int("n_classes", self.n_classes, min=2)
        if self.n_experts is None:
            self.n_experts = self.n_classes
        self.n_experts = check_int("n_experts (None: n_classes)", self.n_experts, min=1)
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k must be <= n_experts={self.n_experts}, got {self.top_k}")
        if self.emb_dim % 4 != 0:
            raise ValueError(
                f"emb_dim must be divisible by 4 (Inception: 4 branches of emb_dim // 4), got {self.emb_dim}"
            )
        self.sparse_rate = check_float("sparse_rate", self.sparse_rate, min=0.0, max=1.0, max_open=True)
        if self.depth == 1 and self.sparse_rate > 0 and self.sparsify != "none":
            raise ValueError(
                f"sparse_rate={self.sparse_rate} would be ignored at depth=1: layer 1 never sparsifies (keep ratios "
                "r_l = 1 - linspace(0, sparse_rate, depth)[l]); use depth >= 2, or sparse_rate=0 for a dense model"
            )
        self.dropout = check_float("dropout", self.dropout, min=0.0, max=1.0, max_open=True)
        self.sparsify = check_choice("sparsify", self.sparsify, SPARSIFY_MODES)
        self.gating = check_choice("gating", self.gating, GATING_MODES)
        self.use_moe = check_bool("use_moe", self.use_moe)
        self.use_inception = check_bool("use_inception", self.use_inception)
        self.moe_in_dense = check_bool("moe_in_dense", self.moe_in_dense)
        self.scorer_hidden = check_int("scorer_hidden", self.scorer_hidden, min=1)
        if self.shape_size > self.n_timepoints:
            raise ValueError(
                f"shape_size={self.shape_size} is longer than the series (n_timepoints={self.n_timepoints})"
            )
        if any(int(k) < 1 or int(k) % 2 == 0 for k in self.inception_kernels):
            raise ValueError(f"inception_kernels must be odd positive ints, got {self.inception_kernels!r}")
        self.inception_kernels = tuple(int(k) for k in self.inception_kernels)
        self.stride = resolve_stride(self.shape_size, self.stride)

    @property
    def n_shapes(self) -> int:
        """Number of shape tokens M = floor((T - m) / q) + 1."""
        return (self.n_timepoints - self.shape_size) // self.stride + 1

    @property
    def keep_ratios(self) -> list[float]:
        """Keep ratio of each layer (all 1 when ``sparsify="none"``)."""
        if self.sparsify == "none":
            return [1.0] * self.depth
        return keep_ratios(self.depth, self.sparse_rate)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``SoftShapeConfig(**d)`` rebuilds it)."""
        d = asdict(self)
        d["inception_kernels"] = list(self.inception_kernels)
        return d
