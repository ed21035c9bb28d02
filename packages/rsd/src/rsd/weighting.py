"""Weighting functions ω: [0, 1] → [0, 1] of the acceptance rule (Alg. 2): a draft step of reward r is accepted
with probability ω(r), else the target model rewrites the step.

- :func:`binary` ω(r) = 1[r ≥ δ] -- the optimal rule under a budget of target calls (the paper's theorem, Sec. 3)
  and the paper's default (δ = 0.7);
- :func:`clip` ω(r) = min(1, r / δ) -- a clipped linear soft rule;
- :func:`sigmoid` ω(r) = σ((r − δ) / τ) -- a smooth soft rule;
- :func:`custom` any callable [0, 1] → [0, 1].

>>> from rsd import weighting
>>> w = weighting.binary(0.7)
>>> w(0.69), w(0.7)
(0.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from icml25_shared.validate import check_bool, check_choice, check_float

__all__ = ["NAMES", "Weighting", "binary", "clip", "custom", "get", "resolve", "sigmoid"]

#: the named weightings (``RSDConfig(weighting="clip")`` and :func:`get` accept these)
NAMES = ("binary", "clip", "sigmoid")


@dataclass(frozen=True)
class Weighting:
    """A weighting function ω with its name and parameters; call it on a reward in [0, 1]."""

    name: str
    fn: Callable[[float], float] = field(repr=False, compare=False)
    delta: float | None = None
    tau: float | None = None

    @property
    def is_binary(self) -> bool:
        """True for a threshold rule: acceptance needs no random draw."""
        return self.name == "binary"

    def __call__(self, r: float) -> float:
        r = float(r)
        if not (0.0 <= r <= 1.0):  # NaN fails too: clip would accept a NaN reward surely, binary never
            raise ValueError(f"weighting {self.name!r} needs a reward in [0, 1], got {r!r}")
        w = float(self.fn(r))
        if not (0.0 <= w <= 1.0):  # NaN fails too
            raise ValueError(f"weighting {self.name!r} returned {w!r} for reward {r!r}; expected a value in [0, 1]")
        return w

    def to_dict(self) -> dict[str, Any]:
        if self.name not in NAMES:
            raise ValueError(f"weighting {self.name!r} is a custom callable and cannot be serialised")
        out: dict[str, Any] = {"name": self.name, "delta": self.delta}
        if self.name == "sigmoid":
            out["tau"] = self.tau
        if self.name == "binary" and self.delta is not None and self.delta > 1:
            out["allow_always_target"] = True
        return out


def binary(delta: float = 0.7, *, allow_always_target: bool = False) -> Weighting:
    """ω(r) = 1[r ≥ δ] (Alg. 2 with a threshold; the official code's ``reward >= prm_threshold``).

    δ must lie in [0, 1]; δ = 0 accepts every draft step (draft-only decoding). δ > 1 rejects every step (the
    target rewrites all: target-only decoding plus wasted draft work) and is allowed only with
    ``allow_always_target=True``.
    """
    check_bool("allow_always_target", allow_always_target)
    delta = check_float("delta", delta, min=0.0, max=None if allow_always_target else 1.0)
    return Weighting("binary", lambda r: 1.0 if r >= delta else 0.0, delta=delta)


def clip(delta: float = 0.7) -> Weighting:
    """ω(r) = min(1, r / δ), δ ∈ (0, 1]: accept surely above δ, with probability r/δ below."""
    delta = check_float("delta", delta, min=0.0, max=1.0, min_open=True)
    return Weighting("clip", lambda r: min(1.0, r / delta), delta=delta)


def sigmoid(delta: float = 0.7, tau: float = 0.1) -> Weighting:
    """ω(r) = σ((r − δ) / τ), δ ∈ [0, 1], τ > 0: a smooth threshold (τ → 0 gives :func:`binary`)."""
    delta = check_float("delta", delta, min=0.0, max=1.0)
    tau = check_float("tau", tau, min=0.0, min_open=True)

    def fn(r: float) -> float:
        z = (r - delta) / tau
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    return Weighting("sigmoid", fn, delta=delta, tau=tau)


def custom(fn: Callable[[float], float], name: str = "custom") -> Weighting:
    """Wrap any callable [0, 1] → [0, 1] (values outside raise ``ValueError`` when it is called)."""
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    return Weighting(str(name), fn)


def get(name: str, **kwargs: Any) -> Weighting:
    """The named weighting (``"binary"``, ``"clip"``, ``"sigmoid"``) with keyword parameters."""
    check_choice("weighting", name, NAMES)
    return {"binary": binary, "clip": clip, "sigmoid": sigmoid}[name](**kwargs)


def resolve(w: Any) -> Weighting:
    """A :class:`Weighting` from a weighting, a name (default parameters), a ``to_dict()`` dict or a callable."""
    if isinstance(w, Weighting):
        return w
    if isinstance(w, str):
        return get(w)
    if isinstance(w, dict):
        kw = dict(w)
        return get(kw.pop("name", None), **{k: v for k, v in kw.items() if v is not None})
    if callable(w):
        return custom(cast(Callable[[float], float], w))
    raise ValueError(f"weighting must be one of {NAMES}, a Weighting or a callable, got {w!r}")
