"""Analytic FLOPs of decoding (the paper reports FLOPs; the official code records only token counts).

One forward of one input token at 0-based position p costs 2N + 2L(p+1)d FLOPs for a decoder with N non-embedding
parameters, L layers and width d (the matmuls, plus attention scores and values over p + 1 keys). Every model call
is recorded per problem as a :class:`CallRecord`; a generating call that produces k tokens from a context of c
tokens processes input positions s .. c+k−2 (the last generated token is read only by a later call), where s is
the number of context tokens whose keys the model already holds; a scoring call (the PRM) reads positions
s .. c−1. Three accountings:

- ``"generated"`` (comparable with the paper's figures): only the forwards that produce a token (positions
  c−1 .. c+k−2), and for the PRM the tokens of the newly scored step;
- ``"cached"`` (a prefix-caching server such as vLLM): s = the longest prefix of the context the model has
  already processed on this problem (a rejected draft step leaves the draft's cache at the step start);
- ``"uncached"``: s = 0 on every call (the whole context is re-read).

The cached and uncached accountings show the prefill the target pays to read the draft's accepted steps before it
rewrites a step, which the generated-token figure leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from icml25_shared.validate import check_choice, check_int

__all__ = ["MODES", "CallRecord", "FlopCounter", "ModelCost"]

Mode = Literal["generated", "cached", "uncached"]
MODES: tuple[Mode, ...] = ("generated", "cached", "uncached")


@dataclass(frozen=True)
class ModelCost:
    """Cost model of one decoder: non-embedding parameters N, layers L, width d."""

    n_nonembedding: int
    n_layers: int
    d_model: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_nonembedding", check_int("n_nonembedding", self.n_nonembedding, min=0))
        object.__setattr__(self, "n_layers", check_int("n_layers", self.n_layers, min=0))
        object.__setattr__(self, "d_model", check_int("d_model", self.d_model, min=0))

    @classmethod
    def from_model(cls, model: Any) -> ModelCost:
        """From a ``transformers`` model: parameters outside the input/output embeddings and position tables."""
        cfg = model.config
        layers = next(getattr(cfg, k) for k in ("num_hidden_layers", "n_layer") if hasattr(cfg, k))
        width = next(getattr(cfg, k) for k in ("hidden_size", "n_embd", "d_model") if hasattr(cfg, k))
        skip = set()
        for mod in (model.get_input_embeddings(), model.get_output_embeddings()):
            if mod is not None:
                skip.add(id(mod.weight))
        for name, mod in model.named_modules():
            if name.endswith(("wpe", "embed_positions", "position_embeddings")) and hasattr(mod, "weight"):
                skip.add(id(mod.weight))
        seen, n = set(), 0
        for p in model.parameters():
            if id(p) not in skip and id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        return cls(n, int(layers), int(width))

    @classmethod
    def free(cls) -> ModelCost:
        """A model priced at nothing (a rule-based PRM such as an exact checker): ``ModelCost(0, 0, 0)``, passed
        explicitly so that a free PRM is a stated choice, never a default."""
        return cls(0, 0, 0)

    def span(self, start: int, stop: int) -> int:
        """FLOPs of the forwards at positions start .. stop−1: Σ_p 2N + 2L(p+1)d."""
        n = max(0, stop - start)
        # Σ_{p=start}^{stop-1} (p + 1) = Σ_{q=start+1}^{stop} q
        keys = (stop * (stop + 1) - start * (start + 1)) // 2 if n else 0
        return 2 * self.n_nonembedding * n + 2 * self.n_layers * self.d_model * keys


@dataclass(frozen=True)
class CallRecord:
    """One model call for one problem: model name, cached prefix s, context length c, generated tokens k, and for a
    scoring call (k = 0) the number of newly scored tokens at the end of the context."""

    model: str
    cached_prefix: int
    context_len: int
    generated: int
    scored: int = 0

    def positions(self, mode: Mode) -> tuple[int, int]:
        """[start, stop) of the input positions this call processes under ``mode``."""
        c, k = self.context_len, self.generated
        stop = c + k - 1 if k > 0 else c
        if mode == "generated":
            start = c - 1 if k > 0 else c - self.scored
        elif mode == "cached":
            start = min(self.cached_prefix, stop)
        else:
            start = 0
        return start, stop


class FlopCounter:
    """FLOPs of decoding outputs (:class:`rsd.RSDOutput`, or anything with ``.calls``) under a cost per model.

    Every model that appears in the calls must be priced: a call of a model with no cost (the PRM included)
    raises ``ValueError``. A rule-based PRM that costs nothing is priced with ``prm=ModelCost.free()``; a learned
    PRM with ``ModelCost.from_model(prm_model)``; the paper's setting (Sec. 4: a 1.5B PRM beside the 1.5B draft)
    with the draft's cost.

    >>> fc = FlopCounter(draft=ModelCost(1000, 1, 8), target=ModelCost(10000, 2, 16))
    >>> fc.call(CallRecord("target", 0, 5, 4), "generated")
    81664
    """

    def __init__(
        self, *, draft: ModelCost | None = None, target: ModelCost | None = None, prm: ModelCost | None = None
    ):
        for name, cost in (("draft", draft), ("target", target), ("prm", prm)):
            if cost is not None and not isinstance(cost, ModelCost):
                hint = (
                    " (ModelCost.from_model(model) reads it from a transformers model)"
                    if hasattr(cost, "config")
                    else ""
                )
                raise TypeError(f"{name} must be a ModelCost or None, got {type(cost).__name__}{hint}")
        self.costs = {"draft": draft, "target": target, "prm": prm}

    def call(self, rec: CallRecord, mode: Mode = "generated") -> int:
        check_choice("mode", mode, MODES)
        cost = self.costs.get(rec.model)
        if cost is None:
            hint = (
                " (ModelCost.from_model(prm_model) for a learned PRM, the draft's cost for the paper's setting, or "
                "ModelCost.free() for a rule-based PRM that costs nothing)"
                if rec.model == "prm"
                else ""
            )
            raise ValueError(
                f"no ModelCost for model {rec.model!r}: its calls would be counted as 0 FLOPs; pass "
                f"{rec.model}=ModelCost(...){hint}"
            )
        return cost.span(*rec.positions(mode))

    def per_model(self, outputs: Iterable[Any] | Any, mode: Mode = "generated") -> dict[str, int]:
        """FLOPs summed over problems, per model name (``outputs``: a list of outputs, or one output)."""
        if hasattr(outputs, "calls"):  # one RSDOutput / AssistedOutput
            outputs = [outputs]
        out: dict[str, int] = {}
        for o in outputs:
            if not hasattr(o, "calls"):
                raise TypeError(f"outputs must hold decoding outputs with .calls (RSDOutput), got {type(o).__name__}")
            for rec in o.calls:
                out[rec.model] = out.get(rec.model, 0) + self.call(rec, mode)
        return out

    def total(self, outputs: Iterable[Any] | Any, mode: Mode = "generated") -> int:
        """FLOPs of all calls of all ``outputs`` (a list, or one output) under ``mode``."""
        return sum(self.per_model(outputs, mode).values())
