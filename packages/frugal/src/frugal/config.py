"""FRUGALConfig: every hyper-parameter of the optimizer, with defaults, provenance and validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from icml25_shared.validate import check_bool, check_choice, check_float, check_int, check_lr

__all__ = [
    "BLOCK_ORDERS",
    "NONFINITE_POLICIES",
    "PROJ_SIDES",
    "SELECTORS",
    "STATE_FREE_RULES",
    "STATE_FULL_RULES",
    "BlockOrder",
    "FRUGALConfig",
    "NonfinitePolicy",
    "ProjSide",
    "Selector",
    "StateFreeRule",
    "StateFullRule",
    "normalise_hparams",
    "validate_hparams",
]

#: ``torch.optim.AdamW`` arguments FRUGAL accepts at their defaults only
UNSUPPORTED_ADAMW = ("amsgrad", "capturable", "differentiable", "fused")
_FLOAT_KEYS = ("density", "weight_decay", "eps", "state_full_lr_scale", "state_free_lr_scale")
_INT_KEYS = ("update_gap", "rank")

Selector = Literal["block", "svd", "random", "randperm", "columns", "rows", "randk"]
StateFullRule = Literal["adamw", "sgdm", "lion"]
StateFreeRule = Literal["signsgd", "sgd", "none"]
ProjSide = Literal["std", "reverse_std", "left", "right", "full"]
BlockOrder = Literal["descending", "ascending", "random", "mirror"]
NonfinitePolicy = Literal["raise", "skip"]

SELECTORS: tuple[Selector, ...] = get_args(Selector)
STATE_FULL_RULES: tuple[StateFullRule, ...] = get_args(StateFullRule)
STATE_FREE_RULES: tuple[StateFreeRule, ...] = get_args(StateFreeRule)
PROJ_SIDES: tuple[ProjSide, ...] = get_args(ProjSide)
BLOCK_ORDERS: tuple[BlockOrder, ...] = get_args(BlockOrder)
NONFINITE_POLICIES: tuple[NonfinitePolicy, ...] = get_args(NonfinitePolicy)


def _check_pair(name: str, value: Any) -> None:
    try:
        if not (isinstance(value, (tuple, list)) and len(value) == 2):
            raise ValueError("not a pair")
        for i, b in enumerate(value):
            check_float(f"{name}[{i}]", b, min=0.0, max=1.0, max_open=True)
    except ValueError as err:
        raise ValueError(f"{name} must be a pair of floats in [0, 1), got {value!r}") from err


def validate_hparams(h: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the field and the value for every invalid entry of ``h`` (absent keys are not
    checked). Shared by :class:`FRUGALConfig` and every parameter group of :class:`frugal.FRUGAL`."""
    check_lr("lr", h.get("lr", 0.0))  # a float, or a 1-element tensor as torch.optim accepts
    if "density" in h:
        check_float("density", h["density"], min=0.0, max=1.0)
    if "update_gap" in h:
        check_int("update_gap", h["update_gap"], min=1)
    if h.get("rank") is not None:
        check_int("rank", h["rank"], min=0)
    for key in ("state_full_lr_scale", "state_free_lr_scale", "weight_decay"):
        if key in h:
            check_float(key, h[key], min=0.0)
    if "eps" in h:
        check_float("eps", h["eps"], min=0.0)
    if "betas" in h:
        _check_pair("betas", h["betas"])
    for key, choices in (
        ("selector", SELECTORS),
        ("state_full", STATE_FULL_RULES),
        ("state_free", STATE_FREE_RULES),
        ("proj_side", PROJ_SIDES),
        ("block_order", BLOCK_ORDERS),
        ("nonfinite", NONFINITE_POLICIES),
    ):
        if key in h:
            check_choice(key, h[key], choices)
    for key in (
        "reset_statistics",
        "projectable",
        "transposed",
        "legacy_block_momentum_init",
        "sync_selectors",
        "maximize",
        "amsgrad",
        "capturable",
        "differentiable",
    ):
        if key in h:
            check_bool(key, h[key])
    for key in ("foreach", "fused"):
        if h.get(key) is not None:
            check_bool(key, h[key])
    for key in UNSUPPORTED_ADAMW:
        if h.get(key):
            hint = "None or False; foreach=True is the multi-tensor path FRUGAL supports" if key == "fused" else "False"
            raise NotImplementedError(
                f"FRUGAL does not implement torch.optim.AdamW's {key}={h[key]!r}; pass {key}={hint}"
            )
    if "seed" in h:
        check_int("seed", h["seed"], min=0)


def normalise_hparams(h: dict[str, Any]) -> dict[str, Any]:
    """Turn numpy (or other number-like) scalars of ``h`` into Python ``float`` / ``int`` in place (after
    :func:`validate_hparams` accepted them), so that groups, ``state_dict`` and logs hold plain numbers."""
    for key in _FLOAT_KEYS:
        if key in h and type(h[key]) is not float:
            h[key] = float(h[key])
    for key in _INT_KEYS:
        if h.get(key) is not None and type(h[key]) is not int:
            h[key] = int(h[key])
    lr = h.get("lr")
    # a numpy scalar lr becomes a float; a tensor lr stays a tensor, as in torch.optim
    if lr is not None and type(lr) not in (float, int) and not hasattr(lr, "requires_grad"):
        h["lr"] = float(lr)
    if isinstance(h.get("betas"), (tuple, list)):
        h["betas"] = tuple(float(b) if not hasattr(b, "requires_grad") else b for b in h["betas"])
    return h


@dataclass
class FRUGALConfig:
    """Hyper-parameters of :class:`frugal.FRUGAL`; ``FRUGAL.from_config(params, cfg)`` builds the optimizer.

    Defaults are those of the authors' pre-training scripts (the paper's LLaMA/C4 runs): block selector walking the
    layers backwards, density 0.25, update gap 200, AdamW state-full, signSGD state-free.
    """

    lr: float = 1e-3
    """Learning rate η of every parameter (the non-projectable ones run AdamW with it unscaled)."""
    density: float = 0.25
    """ρ in [0, 1]: the fraction of each matrix (or of the group's tensors, for ``"block"``) that is state-full."""
    update_gap: int = 200
    """T: the subspace is re-chosen at steps 0, T, 2T, ... (read from the group at every refresh: schedulable)."""
    selector: Selector = "block"
    """How the state-full subspace is chosen: ``"block"`` (whole tensors, BAdam-style), ``"svd"`` (GaLore's top
    singular vectors), ``"random"`` (random orthonormal), ``"randperm"`` (random coordinate axis subset with
    GaLore's sides), ``"columns"``, ``"rows"``, ``"randk"`` (random coordinates)."""
    state_full: StateFullRule = "adamw"
    """Optimizer of the state-full part: ``"adamw"``, ``"sgdm"`` (momentum ``betas[0]``) or ``"lion"``
    (``betas``; Lion is usually run with ``(0.9, 0.99)``)."""
    state_free: StateFreeRule = "signsgd"
    """Rule of the state-free part: ``"signsgd"`` (the paper's choice), ``"sgd"`` or ``"none"`` (GaLore/BAdam)."""
    state_full_lr_scale: float = 1.0
    """s_p (``proj_params_lr_scale`` in the authors' code; GaLore's α): multiplies η on projectable tensors."""
    state_free_lr_scale: float = 1.0
    """s_f (``inactive_lr_scale``): the state-free step is η·s_p·s_f (1 for pre-training, 0.1 for fine-tuning)."""
    reset_statistics: bool = True
    """Zero the state-full moments (and Adam's bias-correction counter) at every refresh. The block selector
    always resets (the authors' code does so regardless of the flag)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Moment coefficients of AdamW (and of Lion; ``betas[0]`` is the SGD-M momentum)."""
    eps: float = 1e-8
    """AdamW's ε, added after the bias correction of √v as in ``torch.optim.AdamW``."""
    weight_decay: float = 0.0
    """Decoupled weight decay λ: ``W <- W (1 - η λ)`` on every parameter, with the unscaled η. 0 as in the
    authors' pre-training scripts; ``FRUGAL(...)`` called directly defaults to ``torch.optim.AdamW``'s 0.01."""
    maximize: bool = False
    """Maximise the objective (every part of the update uses the negated gradient, as ``torch.optim.AdamW``)."""
    proj_side: ProjSide = "std"
    """Side of the projection selectors (GaLore's ``proj_type``): ``"std"`` projects the smaller dimension,
    ``"reverse_std"`` the larger, ``"left"``/``"right"`` a fixed one, ``"full"`` both."""
    block_order: BlockOrder = "descending"
    """Order in which the block selector activates tensors: ``"descending"`` (the authors' pre-training runs:
    last tensor first, wrapping around), ``"ascending"``, ``"random"``, ``"mirror"`` (symmetric pairs)."""
    rank: int | None = None
    """Fixed projection rank r (GaLore-style groups); ``None`` derives r from ``density``."""
    seed: int = 0
    """Seed of the optimizer's own ``torch.Generator`` (random selectors, random block order); saved in
    ``state_dict``. Use the same seed on every data-parallel rank."""
    legacy_block_momentum_init: bool = False
    """Reproduce the authors' code: SGD-M buffers of newly active blocks start as a copy of the parameter
    (the paper's algorithm starts them at zero)."""
    nonfinite: NonfinitePolicy = "raise"
    """On a NaN/Inf gradient of a projectable tensor: ``"raise"`` ``FloatingPointError`` or ``"skip"`` it."""
    sync_selectors: bool = True
    """With ``torch.distributed`` initialised, broadcast rank 0's SVD/random projectors at every refresh."""
    foreach: bool | None = None
    """Passed to torch's AdamW kernel on the non-projectable groups and the active blocks (``torch.optim.AdamW``'s
    ``foreach``)."""

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        validate_hparams(asdict(self))

    def to_dict(self) -> dict[str, Any]:
        """The fields as keyword arguments of :class:`frugal.FRUGAL`."""
        return asdict(self)
