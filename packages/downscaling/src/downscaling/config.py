"""Configuration dataclasses of the operators: one docstring per field, choices typed ``Literal[...]``, validated in
``__post_init__`` with :mod:`icml25_shared.validate` (errors name the field, the value and the expectation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "PRUNE_METHODS",
    "DistillConfig",
    "EnsembleConfig",
    "PruneConfig",
    "PruneMethod",
    "Recover",
]

PruneMethod = Literal["magnitude", "wanda", "sparsegpt", "heads", "channels", "layers"]
PRUNE_METHODS: tuple[PruneMethod, ...] = get_args(PruneMethod)
UNSTRUCTURED: tuple[str, ...] = ("magnitude", "wanda", "sparsegpt")
STRUCTURED: tuple[str, ...] = ("heads", "channels", "layers")
KLDirection = Literal["forward", "reverse"]
Router = Literal["label", "classifier", "average"]


@dataclass
class Recover:
    """Recovery training after pruning: ``steps`` AdamW steps on the calibration data, next-token loss, or
    distillation from ``distill_from`` (usually the dense model) when given. Masks of unstructured pruning stay
    applied during recovery (``torch.nn.utils.prune`` re-multiplies them on every forward)."""

    steps: int = 50
    """AdamW steps."""
    lr: float = 1e-3
    """Learning rate."""
    distill_from: Any = None
    """A teacher model: recovery uses the distillation loss (temperature 2, alpha 0.5) instead of plain CE."""

    def __post_init__(self) -> None:
        self.steps = check_int("steps", self.steps, min=1)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)


@dataclass
class PruneConfig:
    """What :func:`downscaling.prune` removes.

    Unstructured methods (``magnitude``, ``wanda``, ``sparsegpt``) zero a fraction ``sparsity`` of the weights of
    every ``nn.Linear`` inside the decoder blocks (the LM head and embeddings are kept, as in Wanda and SparseGPT).
    Structured methods remove whole units and shrink the config: ``heads`` removes key/value groups together with
    their query heads (GQA-aware), ``channels`` MLP intermediate channels, ``layers`` whole decoder blocks.
    """

    method: PruneMethod = "magnitude"
    """Pruning criterion (see the class docstring)."""
    sparsity: float = 0.5
    """Fraction removed, in [0, 1): of the weights (unstructured) or of the heads/channels/layers (structured,
    rounded down to whole units)."""
    scope: Literal["layer", "global"] = "layer"
    """``layer``: each matrix (``magnitude``, ``sparsegpt``) or each output row (``wanda``, its default
    comparison group) loses exactly ``sparsity``; ``global``: one threshold over all pruned matrices. Structured
    methods remove the same number of units per block so that the result has one config."""
    calib: Any = None
    """Calibration inputs (a ``(n, T)`` tensor of token ids or a list of them); needed by ``wanda`` and
    ``sparsegpt``, optional for structured methods (they then score by activations rather than weights)."""
    recover: Recover | None = None
    """Optional recovery training after pruning."""
    sparsegpt_damp: float = 0.01
    """SparseGPT's dampening: λ = damp · mean(diag H) added to the Hessian (Frantar & Alistarh 2023, Sec. 3)."""
    sparsegpt_block: int = 32
    """SparseGPT's lazy-update block size (columns whose mask is chosen together)."""
    finalize: bool = True
    """Unstructured methods: bake the masks into the weights once pruning (and ``recover``) is done, so that the
    returned model is a plain model whose ``save_pretrained`` / ``state_dict`` hold the pruned weights. ``False``
    keeps ``torch.nn.utils.prune``'s masks (``weight_orig`` x ``weight_mask``) for further training that must keep
    the pruned weights at zero; its state dict still holds the pruned ``weight`` (folded on save, masks restored
    on load), so ``save_pretrained`` / ``from_pretrained`` round-trip either way. Ignored by structured methods."""

    def __post_init__(self) -> None:
        self.method = check_choice("method", self.method, PRUNE_METHODS)
        self.sparsity = check_float("sparsity", self.sparsity, min=0.0, max=1.0, max_open=True)
        self.scope = check_choice("scope", self.scope, ("layer", "global"))
        self.sparsegpt_damp = check_float("sparsegpt_damp", self.sparsegpt_damp, min=0.0, min_open=True)
        self.sparsegpt_block = check_int("sparsegpt_block", self.sparsegpt_block, min=1)
        self.finalize = check_bool("finalize", self.finalize)
        if self.recover is not None and not isinstance(self.recover, Recover):
            raise TypeError(f"recover must be a Recover or None, got {type(self.recover).__name__}")
        if self.method in ("wanda", "sparsegpt") and self.calib is None and self.sparsity > 0:
            raise ValueError(f"calib must be calibration token ids for method={self.method!r}, got None")


@dataclass
class DistillConfig:
    """Knowledge distillation (Hinton et al. 2015): L = (1 − α) CE(y, p_S) + α τ² KL(p_T^τ ‖ p_S^τ)."""

    temperature: float = 2.0
    """τ > 0: both distributions are softmax(z / τ); the KL term is scaled by τ² so its gradient does not shrink."""
    alpha: float = 0.5
    """α in [0, 1]: weight of the KL term (α = 1: pure distillation, α = 0: plain next-token training)."""
    kl: KLDirection = "forward"
    """``forward``: KL(p_T ‖ p_S) (Hinton); ``reverse``: KL(p_S ‖ p_T) (mode-seeking, as MiniLLM)."""
    steps: int = 100
    """Optimizer steps."""
    lr: float = 3e-4
    """AdamW learning rate."""
    batch_size: int = 16
    """Windows per step (split across ranks under torch.distributed)."""
    seq_len: int = 64
    """Tokens per window."""
    seed: int = 0
    """Seeds the batch order."""

    def __post_init__(self) -> None:
        self.temperature = check_float("temperature", self.temperature, min=0.0, min_open=True)
        self.alpha = check_float("alpha", self.alpha, min=0.0, max=1.0)
        self.kl = check_choice("kl", self.kl, get_args(KLDirection))
        self.steps = check_int("steps", self.steps, min=1)
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.seq_len = check_int("seq_len", self.seq_len, min=1)
        self.seed = check_int("seed", self.seed, min=0)


@dataclass
class EnsembleConfig:
    """The paper's proposed pipeline: prune a base model into one specialist per domain, continue pre-training each
    on its domain, and route tokens among them."""

    prune: PruneConfig | None = None
    """How each specialist is cut from the base (``None``: a full copy)."""
    steps_per_domain: int = 100
    """Continued pre-training steps of each specialist on its domain."""
    router: Router = "label"
    """``label``: the known domain picks one expert; ``classifier``: a bag-of-characters logistic classifier picks
    one; ``average``: the logits of all k experts are averaged (cost k experts per token)."""
    lr: float = 1e-3
    """AdamW learning rate of continued pre-training."""
    batch_size: int = 16
    """Windows per step."""
    seq_len: int = 64
    """Tokens per window."""
    seed: int = 0
    """Seeds batch order."""

    def __post_init__(self) -> None:
        if self.prune is not None and not isinstance(self.prune, PruneConfig):
            raise TypeError(f"prune must be a PruneConfig or None, got {type(self.prune).__name__}")
        self.steps_per_domain = check_int("steps_per_domain", self.steps_per_domain, min=0)
        self.router = check_choice("router", self.router, get_args(Router))
        self.lr = check_float("lr", self.lr, min=0.0, min_open=True)
        self.batch_size = check_int("batch_size", self.batch_size, min=1)
        self.seq_len = check_int("seq_len", self.seq_len, min=1)
        self.seed = check_int("seed", self.seed, min=0)
