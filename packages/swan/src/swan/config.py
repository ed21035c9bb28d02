"""SWANConfig: every hyper-parameter of the optimizer, with defaults, provenance and validation."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from swan.functional import WHITENING_METHODS

__all__ = ["SWANConfig", "ALGORITHMS", "NONFINITE_POLICIES", "validate_hparams"]

ALGORITHMS = ("swan", "adamw")
NONFINITE_POLICIES = ("raise", "skip")


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_hparams(h: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the field and the value for every invalid entry of ``h`` (keys absent from
    ``h`` are not checked). Shared by :class:`SWANConfig` and every parameter group of :class:`swan.SWAN`."""
    lr = h.get("lr", 0.0)
    if isinstance(lr, torch.Tensor):
        if lr.numel() != 1:
            raise ValueError(f"Tensor lr must be 1-element, got shape {tuple(lr.shape)}")
        lr = float(lr)
    if not _is_real(lr) or lr < 0:
        raise ValueError(f"lr must be a finite float >= 0, got {lr!r}")
    if "algorithm" in h and h["algorithm"] not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {h['algorithm']!r}")
    ns_steps = h.get("ns_steps")
    if ns_steps is not None and (isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1):
        raise ValueError(f"ns_steps must be an int >= 1 (or None for the method's preset), got {ns_steps!r}")
    ns_beta = h.get("ns_beta")
    if ns_beta is not None and not (_is_real(ns_beta) and 0.0 < ns_beta <= 1.0):
        raise ValueError(f"ns_beta must be in (0, 1] (or None for the method's preset), got {ns_beta!r}")
    if "whitening" in h and h["whitening"] not in WHITENING_METHODS:
        raise ValueError(f"whitening must be one of {WHITENING_METHODS}, got {h['whitening']!r}")
    if "norm_dim" in h and (isinstance(h["norm_dim"], bool) or h["norm_dim"] not in (-1, -2)):
        raise ValueError(f"norm_dim must be -1 (rows, the paper) or -2 (columns), got {h['norm_dim']!r}")
    if "eps" in h and not (_is_real(h["eps"]) and h["eps"] > 0):
        raise ValueError(f"eps must be a finite float > 0, got {h['eps']!r}")
    for key in ("weight_decay", "adamw_weight_decay"):
        if key in h and h[key] is not None and not (_is_real(h[key]) and h[key] >= 0):
            raise ValueError(f"{key} must be a finite float >= 0, got {h[key]!r}")
    if "momentum" in h and not (_is_real(h["momentum"]) and 0.0 <= h["momentum"] < 1.0):
        raise ValueError(f"momentum must be in [0, 1), got {h['momentum']!r}")
    if "whiten_dtype" in h and (
        not isinstance(h["whiten_dtype"], torch.dtype) or not h["whiten_dtype"].is_floating_point
    ):
        raise ValueError(f"whiten_dtype must be a floating torch.dtype, got {h['whiten_dtype']!r}")
    if "nonfinite" in h and h["nonfinite"] not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {h['nonfinite']!r}")
    if "adamw_lr" in h and h["adamw_lr"] is not None and not (_is_real(h["adamw_lr"]) and h["adamw_lr"] >= 0):
        raise ValueError(f"adamw_lr must be a finite float >= 0 (or None for lr), got {h['adamw_lr']!r}")
    if "adamw_betas" in h:
        betas = h["adamw_betas"]
        if not (
            isinstance(betas, (tuple, list)) and len(betas) == 2 and all(_is_real(b) and 0 <= b < 1 for b in betas)
        ):
            raise ValueError(f"adamw_betas must be a pair of floats in [0, 1), got {betas!r}")
    if "adamw_eps" in h and not (_is_real(h["adamw_eps"]) and h["adamw_eps"] >= 0):
        raise ValueError(f"adamw_eps must be a finite float >= 0, got {h['adamw_eps']!r}")
    for key in ("normalize", "whiten", "rescale", "norm_center", "distributed_whitening"):
        if key in h and not isinstance(h[key], bool):
            raise ValueError(f"{key} must be a bool, got {h[key]!r}")
    if "foreach" in h and h["foreach"] is not None and not isinstance(h["foreach"], bool):
        raise ValueError(f"foreach must be None or a bool, got {h['foreach']!r}")


@dataclass
class SWANConfig:
    """Hyper-parameters of :class:`swan.SWAN` (spec §2.4). ``SWAN.from_config(params, cfg)`` builds the optimizer.

    Attributes:
        lr: step size of the SWAN matrices; after the rescale each entry moves by about ``lr`` (GaLore scale).
        ns_steps: Newton-Schulz iterations ``K``; ``None`` = preset of ``whitening`` (10; NSDS 2).
        ns_beta: Newton-Schulz scale ``β`` in (0, 1]; ``None`` = preset (0.8, attributed to the paper,
            unverified; NSDS 0.4). ``0.5`` converges to the exact polar factor ``U Vᵀ``.
        whitening: ``"newton_schulz"`` (paper), ``"nsds"`` (experimental), ``"svd"`` (exact, slow reference).
        normalize: apply GradNorm (paper §5.2 ablation switch).
        whiten: apply GradWhitening (ablation switch).
        rescale: scale the direction to element RMS 1, ``Δ · sqrt(mn) / ||Δ||_F``.
        norm_dim: GradNorm axis: -1 standardises each output row across inputs (paper), -2 columns (deviation).
        norm_center: subtract the mean in GradNorm (paper); ``False`` is the RMS-only deviation.
        eps: inside GradNorm's square root; also guards the whitening pre-scaling of an all-zero gradient.
        weight_decay: decoupled weight decay of the SWAN matrices, ``W <- W (1 - lr wd)``, not rescaled.
        momentum: extension, not in the paper: an SGD buffer ``b <- μ b + g`` fed to GradNorm (makes SWAN stateful).
        whiten_dtype: lower bound of the compute dtype (the wider of it and the parameter dtype is used).
        nonfinite: ``"raise"`` a ``FloatingPointError`` on a NaN/Inf gradient, or ``"skip"`` that matrix with a
            warning.
        foreach: ``True`` stacks same-shaped matrices (tall ones transposed) and whitens them with one batched
            matmul chain; ``None`` = ``True`` (measured faster, also on CPU; see benchmarks/); ``False`` whitens
            one matrix at a time, so the transient memory is one matrix rather than one bucket.
        distributed_whitening: with ``torch.distributed`` initialised, each rank whitens a round-robin share of
            the matrices and broadcasts the result (same weights, less compute per rank).
        adamw_lr: learning rate of groups with ``algorithm="adamw"`` that set none (``None``: ``lr``).
        adamw_betas, adamw_eps: Adam moments of the AdamW side (embeddings, LM head, norms, biases).
        adamw_weight_decay: decoupled weight decay of AdamW groups that set none.
    """

    lr: float = 1e-3
    ns_steps: int | None = None
    ns_beta: float | None = None
    whitening: str = "newton_schulz"
    normalize: bool = True
    whiten: bool = True
    rescale: bool = True
    norm_dim: int = -1
    norm_center: bool = True
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    whiten_dtype: torch.dtype = torch.float32
    nonfinite: str = "raise"
    foreach: bool | None = None
    distributed_whitening: bool = False
    adamw_lr: float | None = None
    adamw_betas: tuple[float, float] = (0.9, 0.999)
    adamw_eps: float = 1e-8
    adamw_weight_decay: float = 0.0

    def __post_init__(self) -> None:
        self.adamw_betas = tuple(self.adamw_betas)  # type: ignore[assignment]
        validate_hparams(asdict(self))

    def to_dict(self) -> dict[str, Any]:
        """The fields as keyword arguments of :class:`swan.SWAN`."""
        return asdict(self)
