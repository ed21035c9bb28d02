"""SWANConfig: every hyper-parameter of the optimizer, with defaults, provenance and validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

import torch

from icml25_shared.validate import check_bool, check_choice, check_float, check_int, check_lr
from swan.functional import WHITENING_METHODS, Whitening

__all__ = [
    "SWANConfig",
    "ALGORITHMS",
    "NONFINITE_POLICIES",
    "Algorithm",
    "NonfinitePolicy",
    "Whitening",
    "validate_hparams",
]

Algorithm = Literal["swan", "adamw"]
NonfinitePolicy = Literal["raise", "skip"]

ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)
NONFINITE_POLICIES: tuple[NonfinitePolicy, ...] = get_args(NonfinitePolicy)


def validate_hparams(h: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the field and the value for every invalid entry of ``h`` (keys absent from
    ``h`` are not checked). Shared by :class:`SWANConfig` and every parameter group of :class:`swan.SWAN`."""
    check_lr("lr", h.get("lr", 0.0))  # a float, or a 1-element tensor as torch.optim accepts
    if "algorithm" in h:
        check_choice("algorithm", h["algorithm"], ALGORITHMS)
    check_int("ns_steps", h.get("ns_steps"), min=1, allow_none=True)  # None: the preset of ``whitening``
    check_float("ns_beta", h.get("ns_beta"), min=0.0, max=1.0, min_open=True, allow_none=True)
    if "whitening" in h:
        check_choice("whitening", h["whitening"], WHITENING_METHODS)
    if "norm_dim" in h:
        check_choice("norm_dim", h["norm_dim"], (-1, -2))  # rows (the paper) or columns
    if "eps" in h:
        check_float("eps", h["eps"], min=0.0, min_open=True)
    for key in ("weight_decay", "adamw_weight_decay", "adamw_lr"):  # adamw_lr None: ``lr``
        if key in h:
            check_float(key, h[key], min=0.0, allow_none=True)
    if "momentum" in h:
        check_float("momentum", h["momentum"], min=0.0, max=1.0, max_open=True)
    if "whiten_dtype" in h and (
        not isinstance(h["whiten_dtype"], torch.dtype) or not h["whiten_dtype"].is_floating_point
    ):
        raise ValueError(f"whiten_dtype must be a floating torch.dtype, got {h['whiten_dtype']!r}")
    if "nonfinite" in h:
        check_choice("nonfinite", h["nonfinite"], NONFINITE_POLICIES)
    if "adamw_betas" in h:  # the message shows the whole pair, whichever entry is wrong
        betas = h["adamw_betas"]
        pair_msg = f"adamw_betas must be a pair of floats in [0, 1), got {betas!r}"
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise ValueError(pair_msg)
        for b in betas:
            try:
                check_float("adamw_betas", b, min=0.0, max=1.0, max_open=True)
            except ValueError as err:
                raise ValueError(pair_msg) from err
    if "adamw_eps" in h:
        check_float("adamw_eps", h["adamw_eps"], min=0.0)
    for key in ("normalize", "whiten", "rescale", "norm_center", "distributed_whitening"):
        if key in h:
            check_bool(key, h[key])
    if h.get("foreach") is not None:
        check_bool("foreach", h["foreach"])
    check_int("max_bucket_bytes", h.get("max_bucket_bytes"), min=1, allow_none=True)


@dataclass
class SWANConfig:
    """Hyper-parameters of :class:`swan.SWAN`; ``SWAN.from_config(params, cfg)`` builds the optimizer.

    The paper's Algorithm 1 fixes the update; the defaults below follow it where it is explicit, and the README
    ("Defaults and their provenance") says where each other choice comes from.
    """

    lr: float = 1e-3
    """Step size of the SWAN matrices; after the rescale each entry moves by about ``lr`` (GaLore's scale)."""
    ns_steps: int | None = None
    """Newton-Schulz iterations ``K`` of GradWhitening (Alg. 2); ``None``: the preset of ``whitening`` (10; NSDS 2)."""
    ns_beta: float | None = None
    """Newton-Schulz scale ``β`` in (0, 1]; ``None``: the preset (0.8, attributed to the paper by
    re-implementations, unverified; NSDS 0.4). ``0.5`` converges to the exact polar factor ``U Vᵀ``."""
    whitening: Whitening = "newton_schulz"
    """``"newton_schulz"`` (Alg. 2), ``"nsds"`` (diagonal substitution, experimental), ``"svd"`` (exact, slow)."""
    normalize: bool = True
    """Apply GradNorm (Alg. 3); switched off in the ablation of Sec. 5.2."""
    whiten: bool = True
    """Apply GradWhitening (Alg. 2); switched off in the ablation of Sec. 5.2."""
    rescale: bool = True
    """Scale the direction to element RMS 1, ``Δ · sqrt(mn) / ||Δ||_F``."""
    norm_dim: int = -1
    """GradNorm axis: -1 standardises each output row across its inputs (the paper), -2 columns (deviation)."""
    norm_center: bool = True
    """Subtract the mean in GradNorm (the paper); ``False`` is the RMS-only deviation."""
    eps: float = 1e-8
    """Inside GradNorm's square root; also guards the whitening pre-scaling of an all-zero gradient."""
    weight_decay: float = 0.0
    """Decoupled weight decay of the SWAN matrices, ``W <- W (1 - lr wd)``, not rescaled."""
    momentum: float = 0.0
    """Extension, not in the paper: an SGD buffer ``b <- μ b + g`` fed to GradNorm (makes SWAN stateful)."""
    whiten_dtype: torch.dtype = torch.float32
    """Lower bound of the compute dtype: the wider of it and the parameter dtype is used (bf16 whitens in fp32)."""
    nonfinite: NonfinitePolicy = "raise"
    """On a NaN/Inf gradient: ``"raise"`` a ``FloatingPointError``, or ``"skip"`` that matrix with a warning."""
    foreach: bool | None = None
    """``True``/``None``: stack same-shaped matrices (tall ones transposed) and whiten them with one batched matmul
    chain, in buckets within ``max_bucket_bytes``; ``False``: one matrix at a time."""
    max_bucket_bytes: int | None = None
    """Cap of one bucket's transient memory in bytes (matrices in the compute dtype plus four ``min(m, n)²``
    whitening buffers each); ``None``: the largest single matrix's, so batching never raises a step's peak."""
    distributed_whitening: bool = False
    """With ``torch.distributed`` initialised, each rank whitens a round-robin share of the matrices and
    broadcasts the result (same weights, less compute per rank)."""
    adamw_lr: float | None = None
    """Learning rate of ``algorithm="adamw"`` groups that set none (``None``: ``lr``)."""
    adamw_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's moment coefficients on the AdamW side (embeddings, LM head, norms, biases)."""
    adamw_eps: float = 1e-8
    """Adam's epsilon on the AdamW side."""
    adamw_weight_decay: float = 0.0
    """Decoupled weight decay of AdamW groups that set none."""

    def __post_init__(self) -> None:
        self.adamw_betas = tuple(self.adamw_betas)  # type: ignore[assignment]
        validate_hparams(asdict(self))

    def to_dict(self) -> dict[str, Any]:
        """The fields as keyword arguments of :class:`swan.SWAN`."""
        return asdict(self)
