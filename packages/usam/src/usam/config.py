"""``USAMConfig``: every hyper-parameter of the UncertainSAM heads and of their training, validated."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "GAP_TARGETS",
    "GAP_PAIRS",
    "MODEL_SIZES",
    "OFFICIAL_HEAD_NAMES",
    "TARGETS",
    "USAMConfig",
    "check_head_name",
]

MODEL_SIZES = ("tiny", "small", "base_plus", "large")
"""The SAM2 sizes the paper ensembles over (Sec. 3.1, the variational samples of θ)."""

GAP_TARGETS = ("model_gap", "prompt_gap", "task_gap")
"""Targets stored with the 0.5 offset: clip(0.5 + Δ, 0, 1) (Sec. 3.2)."""

GAP_PAIRS = {
    "model_gap": ("iou_large", "iou_tiny"),  # Δ_Θ = IoU(large) − IoU(tiny)
    "prompt_gap": ("iou_dense_prompt", "iou"),  # Δ_XP = IoU(8 points) − IoU(1 point)
    "task_gap": ("iou", "unsupervised_iou"),  # Δ_A = IoU(best of 3) − IoU(SamScore-selected)
}
"""Each gap as a difference ``first − second`` of two IoU targets (the paper's Δ* as differences of USAM heads)."""

TARGETS = ("iou", *(f"iou_{m}" for m in MODEL_SIZES), "unsupervised_iou", "iou_dense_prompt", *GAP_TARGETS)
"""Every regression target of Sec. 3.2: ``iou`` is the best-of-3 IoU of the model whose tokens are read."""

OFFICIAL_HEAD_NAMES = {
    "iou_tiny": "iou_tiny",
    "iou_small": "iou_small",
    "iou_base_plus": "iou_base_plus",
    "iou_large": "iou_large",
    "iou_unsupervised": "unsupervised_iou",
    "iou_dense_prompt": "iou_dense_prompt",
    "model_gap": "model_gap",
    "prompt_gap": "prompt_gap",
    "task_gap": "task_gap",
}
"""Folder names of the released heads (``models/mlps/sam2.x/<name>/model.pth``) → our target names."""


def check_head_name(name: Any, argument: str = "head") -> str:
    """``name`` when it is one of :data:`TARGETS`; else a ``ValueError`` naming ``argument``."""
    return check_choice(argument, name, TARGETS)


@dataclass
class USAMConfig:
    """Configuration of the USAM heads (Sec. 3.2) and of their training (Sec. 4.1).

    Defaults: the four heads of the paper's main figure, the paper's token pairing and the released COCO training
    setting (SGD, batch 189, 36 epochs, lr 0.00871, momentum 0.164, weight decay 1e-3).
    """

    heads: tuple[str, ...] = ("iou", "task_gap", "model_gap", "prompt_gap")
    """Targets with one head each (:data:`TARGETS`)."""
    hidden: int = 512
    """Width of the two hidden layers of every head (512 in the paper)."""
    token_input: Literal["both", "iou", "mask"] = "both"
    """Which decoder output tokens a head reads: concat(IoU token, mask token) (2d inputs), or one of them (d)."""
    token_alignment: Literal["aligned", "official"] = "aligned"
    """``"aligned"``: mask k is paired with the mask token that produced it (the paper); ``"official"``: with the
    token one before it (the released code's off-by-one; set by :meth:`UncertainSAM.load_official_heads`)."""
    gap_estimate: Literal["direct", "difference"] = "direct"
    """Δ* from a head trained on the gap (``"direct"``, the released heads) or as the difference of two IoU heads
    (``"difference"``, the paper's notation Δ*_A = USAM_θ − USAM_SAM; the two IoU heads must be in ``heads``)."""
    gap_offset: float = 0.5
    """Offset added to a gap before clipping to [0, 1] for training, subtracted at inference."""
    train_tokens: Literal["best", "all"] = "best"
    """Train on the token of the GT-best mask (the released heads) or on all three tokens."""
    optimizer: Literal["sgd", "adamw"] = "sgd"
    """SGD with momentum (the released heads) or AdamW."""
    lr: float = 0.00871
    """Learning rate."""
    momentum: float = 0.164
    """SGD momentum (ignored by AdamW)."""
    weight_decay: float = 1e-3
    """Weight decay."""
    epochs: int = 36
    """Passes over the training rows."""
    batch_size: int = 189
    """Rows per step."""
    val_fraction: float = 0.2
    """Last fraction of the rows held out for validation (sequential split, no shuffling)."""
    full_train: bool = True
    """Retrain the final head on all rows after validation (the released recipe)."""
    seed: int = 0
    """Seed of the head initialisation and of the batch order."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata saved with the heads (e.g. the SAM checkpoint the tokens came from)."""

    def __post_init__(self) -> None:
        if isinstance(self.heads, str) or not hasattr(self.heads, "__iter__"):
            raise ValueError(f"heads must be a tuple of target names, got {self.heads!r}")
        self.heads = tuple(check_head_name(h, "heads") for h in self.heads)
        if len(set(self.heads)) != len(self.heads):
            raise ValueError(f"heads must not repeat a name, got {self.heads}")
        self.hidden = check_int("hidden", self.hidden, min=1)
        check_choice("token_input", self.token_input, ("both", "iou", "mask"))
        check_choice("token_alignment", self.token_alignment, ("aligned", "official"))
        check_choice("gap_estimate", self.gap_estimate, ("direct", "difference"))
        self.gap_offset = check_float("gap_offset", self.gap_offset, min=0.0, max=1.0)
        check_choice("train_tokens", self.train_tokens, ("best", "all"))
        check_choice("optimizer", self.optimizer, ("sgd", "adamw"))
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.momentum = check_float("momentum", self.momentum, min=0.0, max=1.0, max_open=True)
        self.weight_decay = check_float("weight_decay", self.weight_decay, min=0.0)
        self.epochs = check_int("epochs", self.epochs, min=1)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.val_fraction = check_float("val_fraction", self.val_fraction, min=0.0, max=1.0, max_open=True)
        self.full_train = check_bool("full_train", self.full_train)
        self.seed = check_int("seed", self.seed, min=0)
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra must be a dict of metadata, got {type(self.extra).__name__}")
        if self.gap_estimate == "difference":
            for gap in self.heads:
                if gap in GAP_PAIRS:
                    missing = [h for h in GAP_PAIRS[gap] if h not in self.heads]
                    if missing:
                        raise ValueError(
                            f"gap_estimate='difference' computes {gap} from heads {GAP_PAIRS[gap]}; "
                            f"heads is missing {missing}"
                        )

    @property
    def trained_heads(self) -> tuple[str, ...]:
        """Heads that are MLPs (with ``gap_estimate="difference"`` the gaps are computed, not learned)."""
        if self.gap_estimate == "difference":
            return tuple(h for h in self.heads if h not in GAP_PAIRS)
        return self.heads

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (what ``save_pretrained`` writes)."""
        d = asdict(self)
        d["heads"] = list(self.heads)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> USAMConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ``ValueError`` naming them."""
        d = dict(d)
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"USAMConfig.from_dict: unknown keys {unknown}")
        heads = d.get("heads", cls.heads)
        d["heads"] = heads if isinstance(heads, str) else tuple(heads)  # a bare string is refused by name
        return cls(**d)
