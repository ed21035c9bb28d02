"""``BSLoRAConfig``: every hyper-parameter of BSLoRA, validated on construction (peft's ``LoraConfig`` idiom)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from icml25_shared.validate import check_choice, check_float, check_int

__all__ = ["BSLoRAConfig", "SHARE_MODES", "DEFAULT_TARGETS", "DEFAULT_LAYERS_PATTERN", "ShareMode"]

ShareMode = Literal["slice", "kron", "gate"]
SHARE_MODES: tuple[ShareMode, ...] = get_args(ShareMode)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "up_proj", "down_proj")
DEFAULT_LAYERS_PATTERN = r"\.(?:layers|h|blocks|layer)\.(\d+)\."


@dataclass
class BSLoRAConfig:
    """Configuration of a BSLoRA adapter (Bi-Share LoRA, ICML 2025).

    Every target linear ``W0`` gets ``y = W0 x + s * (B_loc A_loc x + T_m(B_l, A_l) x + T_m(B_g, A_g) x)``: a private
    LoRA of rank ``r_local``, an intra-layer pair of rank ``r_intra`` shared by the targets of one decoder layer and an
    inter-layer pair of rank ``r_inter`` shared by every target of the model. ``T_m`` turns the shared pair into an
    ``out x in`` update: a centred slice (``"slice"``), a Kronecker extension with per-module samplers (``"kron"``) or a
    rank-1 gate transformation (``"gate"``).
    """

    r_local: int = 2
    """Rank of the private (per module) LoRA branch; 0 removes it."""
    r_intra: int = 4
    """Rank of the pair shared by the targets of one decoder layer; 0 removes it."""
    r_inter: int = 16
    """Rank of the pair shared by every target of the model; 0 removes it."""
    share_mode: ShareMode = "slice"
    """Shape transformation of the shared pairs: ``"slice"`` (SS), ``"kron"`` (KE) or ``"gate"`` (GT)."""
    kron_share_size: int = 256
    """KE: side ``S`` of the shared ``S x S`` product; every target's in and out features must be divisible by it."""
    gate_share_size: int = 1024
    """GT: side ``G`` of the shared ``G x G`` product."""
    scaling: float = 2.0
    """Scale ``s > 0`` of all three branches (the official code hard-codes 2). Ignored when ``lora_alpha`` is set."""
    lora_alpha: float | None = None
    """If set (``> 0``), ``s = lora_alpha / r_local`` (or ``/ (r_local + r_intra + r_inter)`` with
    ``scale_by="sum"``)."""
    scale_by: Literal["local", "sum"] = "local"
    """Denominator of ``lora_alpha``: ``"local"`` (the official ``set_scale``) or ``"sum"`` (our extension)."""
    lora_dropout: float = 0.05
    """Dropout on the input of the local branch (all modes) and of the shared branches (slice, gate)."""
    kron_shared_dropout: bool = False
    """KE: also apply dropout before the shared branches (the official code does not)."""
    init_lora_weights: Literal["kaiming", "gaussian"] = "kaiming"
    """Init of every A: ``"kaiming"`` (``kaiming_uniform_(a=sqrt(5))``) or ``"gaussian"`` (N(0, 1/r)). B starts at 0."""
    slice_align: Literal["center", "start"] = "center"
    """SS: where module windows sit in the shared pair: ``"center"`` (official) or ``"start"`` (prefix)."""
    target_modules: tuple[str, ...] | list[str] | str = field(default=DEFAULT_TARGETS)
    """Names of the targets (a module matches when its name ends with ``.name``), or one regex (full match)."""
    layers_pattern: str = DEFAULT_LAYERS_PATTERN
    """Regex whose first group is the decoder-layer index in a module's full name (searched in ``"." + name``)."""
    fan_in_fan_out: bool = False
    """True for transformers ``Conv1D`` targets (weights stored ``in x out``, as in GPT-2)."""
    task_type: str | None = "CAUSAL_LM"
    """Kept for peft parity; not used by the math."""

    def __post_init__(self) -> None:
        for name in ("r_local", "r_intra", "r_inter"):
            setattr(self, name, check_int(name, getattr(self, name), min=0))
        if self.r_local + self.r_intra + self.r_inter == 0:
            raise ValueError("r_local, r_intra and r_inter are all 0; expected at least one positive rank")
        check_choice("share_mode", self.share_mode, SHARE_MODES)
        for name in ("kron_share_size", "gate_share_size"):
            setattr(self, name, check_int(name, getattr(self, name), min=1))
        # a zero, negative or non-finite scale would silently disable, flip or poison the adapter (eq. (1)'s s)
        self.scaling = check_float("scaling", self.scaling, min=0, min_open=True)
        check_choice("scale_by", self.scale_by, ("local", "sum"))
        if self.lora_alpha is not None:
            self.lora_alpha = check_float("lora_alpha", self.lora_alpha, min=0, min_open=True)
            if self.scale_by == "local" and self.r_local == 0:
                raise ValueError("lora_alpha with scale_by='local' needs r_local > 0, got r_local=0")
        check_float("lora_dropout", self.lora_dropout, min=0, max=1, max_open=True)
        check_choice("init_lora_weights", self.init_lora_weights, ("kaiming", "gaussian"))
        check_choice("slice_align", self.slice_align, ("center", "start"))
        if isinstance(self.target_modules, str):
            try:
                re.compile(self.target_modules)
            except re.error as err:
                raise ValueError(f"target_modules is not a valid regex: {self.target_modules!r} ({err})") from None
        else:
            tm = list(self.target_modules)
            if not tm or not all(isinstance(t, str) and t for t in tm):
                raise ValueError(f"target_modules must be a non-empty list of names or a regex, got {tm!r}")
            self.target_modules = tuple(tm)
        try:
            pat = re.compile(self.layers_pattern)
        except (re.error, TypeError) as err:
            raise ValueError(f"layers_pattern is not a valid regex: {self.layers_pattern!r} ({err})") from None
        if pat.groups < 1:
            raise ValueError(
                f"layers_pattern must have a capture group for the layer index, got {self.layers_pattern!r}"
            )

    @property
    def scale(self) -> float:
        """The scale ``s`` applied to all three branches."""
        if self.lora_alpha is None:
            return float(self.scaling)
        denom = self.r_local if self.scale_by == "local" else self.r_local + self.r_intra + self.r_inter
        return float(self.lora_alpha) / denom

    @property
    def ranks(self) -> tuple[int, int, int]:
        """``(r_local, r_intra, r_inter)``."""
        return (self.r_local, self.r_intra, self.r_inter)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``peft_type`` added), inverse of :meth:`from_dict`."""
        d = asdict(self)
        if isinstance(d["target_modules"], tuple):
            d["target_modules"] = list(d["target_modules"])
        d["peft_type"] = "BSLORA"
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BSLoRAConfig:
        """Build from :meth:`to_dict` output (unknown keys such as ``peft_type`` are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
