"""RSDConfig: every setting of reward-guided speculative decoding, with defaults, provenance and validation."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from icml25_shared.validate import check_bool, check_float, check_int
from rsd import weighting as _weighting

__all__ = ["RSDConfig"]


@dataclass
class RSDConfig:
    """Settings of :class:`rsd.RewardGuidedDecoder`, in the manner of ``transformers.GenerationConfig``.

    The defaults are the paper's main setting (Sec. 4, and the official script): binary weighting with δ = 0.7,
    greedy decoding, the PRM scoring draft steps only, per-problem limits.
    """

    weighting: Any = field(default_factory=lambda: _weighting.binary(0.7))
    """ω of the acceptance rule (Alg. 2): a :class:`rsd.weighting.Weighting`, a name (``"binary"``, ``"clip"``,
    ``"sigmoid"``, default parameters) or a callable [0, 1] → [0, 1]."""
    step_delimiter: str = "\n\n"
    """Text that ends a reasoning step (the official code uses a blank line)."""
    max_steps: int = 100
    """Most steps per problem (the official script's 100)."""
    max_step_tokens: int = 256
    """Most tokens one model call may generate for one step; a step cut here is kept and decoding goes on."""
    max_total_tokens: int = 4096
    """Most prompt + answer tokens per problem (the official ``max_tokens`` 4096); the problem ends there."""
    temperature: float = 0.0
    """0 is greedy decoding (the paper's setting); > 0 samples from both models."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]; used only when ``temperature > 0``."""
    patience: int | None = None
    """``None``: per-problem limits only. An int reproduces the official script's batch-level cut-off: a round that
    starts after ``patience - 1`` consecutive rounds in which no problem finished is the last one for every problem
    still running (the script uses 5)."""
    score_target_steps: bool = False
    """Also score the target's steps with the PRM (for analysis; the algorithm does not need it)."""
    seed: int = 0
    """Seed of the acceptance draws (one generator per problem) and of sampling, in [0, 2**64 - 1]."""

    def __post_init__(self) -> None:
        self.weighting = _weighting.resolve(self.weighting)
        if not isinstance(self.step_delimiter, str) or not self.step_delimiter:
            raise ValueError(f"step_delimiter must be a non-empty string, got {self.step_delimiter!r}")
        self.max_steps = check_int("max_steps", self.max_steps, min=1)
        self.max_step_tokens = check_int("max_step_tokens", self.max_step_tokens, min=1)
        self.max_total_tokens = check_int("max_total_tokens", self.max_total_tokens, min=1)
        self.temperature = check_float("temperature", self.temperature, min=0.0)
        self.top_p = check_float("top_p", self.top_p, min=0.0, max=1.0, min_open=True)
        if self.patience is not None:
            self.patience = check_int("patience", self.patience, min=1)
        self.score_target_steps = check_bool("score_target_steps", self.score_target_steps)
        self.seed = check_int("seed", self.seed, min=0, max=2**64 - 1)  # torch.Generator.manual_seed's range

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain values (the weighting as ``{"name", "delta"[, "tau"]}``); custom weightings cannot be serialised."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["weighting"] = self.weighting.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RSDConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown RSDConfig fields {unknown}; valid: {sorted(known)}")
        return cls(**d)
