"""Process reward models: ``score(prompt, steps) -> list[float]``, one reward in [0, 1] per step.

RSD reads the last reward: that of the candidate step in its context (Alg. 1). Steps are passed as text without
their trailing step delimiter. :class:`HFProcessRewardModel` reads a scalar at each step's last token, the layout
of the paper's PRM (Skywork-o1-Open-PRM: problem, a newline, each step followed by a step token, a value head read
at each step-end position, passed through a sigmoid).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from icml25_shared.validate import check_choice, check_int

__all__ = ["PRM", "CallablePRM", "HFProcessRewardModel", "check_scores"]


@runtime_checkable
class PRM(Protocol):
    """What the decoder needs from a process reward model."""

    def score(self, prompt: str, steps: list[str]) -> list[float]: ...


def _prm_name(prm: Any) -> str:
    return getattr(prm, "name", None) or type(prm).__name__


def check_scores(prm: Any, scores: Any, n_steps: int) -> list[float]:
    """``scores`` as floats when they are ``n_steps`` finite values in [0, 1]; else ``ValueError`` naming the PRM."""
    name = _prm_name(prm)
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().reshape(-1).tolist()
    if scores is None or isinstance(scores, (str, bytes, int, float)) or not hasattr(scores, "__iter__"):
        raise ValueError(
            f"PRM {name}: score(prompt, steps) returned {scores!r}; expected a list of {n_steps} floats in [0, 1], "
            "one per step (a scalar is not enough: RSD reads the last step's reward from the list)"
        )
    try:
        values = [float(s) for s in scores]
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"PRM {name}: score(prompt, steps) returned {scores!r}; expected a list of {n_steps} floats in [0, 1]"
        ) from err
    if len(values) != n_steps:
        raise ValueError(f"PRM {name} returned {len(values)} scores for {n_steps} steps: {values!r}")
    for v in values:
        if not (0.0 <= v <= 1.0):  # NaN fails too
            raise ValueError(f"PRM {name} returned the score {v!r}; expected a finite value in [0, 1]")
    return values


class CallablePRM:
    """A PRM from a function ``fn(prompt, steps) -> list[float]`` (or ``fn(prompt, step) -> float`` with
    ``per_step=True``, called once per step with the steps before it joined into the context)."""

    cost = None

    def __init__(self, fn: Callable[..., Any], *, per_step: bool = False, name: str | None = None):
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {fn!r}")
        self.fn, self.per_step = fn, bool(per_step)
        self.name = name or getattr(fn, "__name__", "CallablePRM")

    def score(self, prompt: str, steps: list[str]) -> list[float]:
        if self.per_step:
            out = []
            for i in range(len(steps)):
                v = self.fn(prompt, list(steps[: i + 1]))
                if not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
                    raise ValueError(
                        f"PRM {self.name} (per_step=True) returned {v!r} for step {i}; expected one float in [0, 1]"
                    )
                out.append(float(v))
            return check_scores(self, out, len(steps))
        return check_scores(self, self.fn(prompt, list(steps)), len(steps))


class HFProcessRewardModel:
    """A ``transformers`` model as a PRM: a scalar read at the last token of every step, mapped to [0, 1].

    ``model(input_ids).logits`` of shape ``(1, T, C)`` (a ``...ForTokenClassification`` or value-head model)
    supplies the scalar: channel ``value_index`` through a sigmoid (``head="sigmoid"``, the official PRM), or the
    softmax probability of class ``value_index`` (``head="softmax"``, e.g. a good/bad classifier). With a causal LM
    pass ``head="token"`` and ``value_index`` = the id of a "good" token: the reward is its probability at the
    step end. Layout (``layout="official"``): bos + prompt + ``"\\n"`` + each step's tokens + ``step_token``;
    ``layout="plain"``: prompt + steps joined by ``separator``, read at each step's last token.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        head: str = "sigmoid",
        value_index: int = 0,
        layout: str = "official",
        step_token: str = "\n",
        separator: str = "\n\n",
        name: str | None = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.head = check_choice("head", head, ("sigmoid", "softmax", "token"))
        self.layout = check_choice("layout", layout, ("official", "plain"))
        self.value_index = check_int("value_index", value_index, min=0)
        for arg, v in (("step_token", step_token), ("separator", separator)):
            if not isinstance(v, str):
                raise ValueError(f"{arg} must be a string, got {v!r}")
        self.step_token, self.separator = step_token, separator
        self.name = name or f"HFProcessRewardModel({type(model).__name__})"
        from rsd.flops import ModelCost

        self.cost = ModelCost.from_model(model)

    def layout_ids(self, prompt: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """The token ids fed to the model and the positions read (one per step)."""
        enc = self.tokenizer.encode
        ids: list[int] = []
        reads: list[int] = []
        if self.layout == "official":
            bos = getattr(self.tokenizer, "bos_token_id", None)
            ids += [bos] if bos is not None else []
            ids += enc(prompt + "\n", add_special_tokens=False)
            for s in steps:
                ids += enc(s, add_special_tokens=False) + enc(self.step_token, add_special_tokens=False)
                reads.append(len(ids) - 1)
        else:
            ids += enc(prompt, add_special_tokens=True)
            for i, s in enumerate(steps):
                ids += enc((self.separator if i else "") + s, add_special_tokens=False)
                reads.append(len(ids) - 1)
        return ids, reads

    @torch.no_grad()
    def score(self, prompt: str, steps: list[str]) -> list[float]:
        if not steps:
            return []
        ids, reads = self.layout_ids(prompt, steps)
        device = next(self.model.parameters()).device
        logits = self.model(input_ids=torch.tensor([ids], device=device)).logits[0, reads].float()
        if self.value_index >= logits.shape[-1]:
            raise ValueError(
                f"value_index={self.value_index} is out of range: the model's logits have {logits.shape[-1]} channels"
            )
        if self.head == "sigmoid":
            values = torch.sigmoid(logits[:, self.value_index])
        else:
            values = torch.softmax(logits, dim=-1)[:, self.value_index]
        return [min(1.0, max(0.0, float(v))) if math.isfinite(float(v)) else float("nan") for v in values]
