"""The methods RSD is compared with, on the same backends and the same accounting.

- :func:`target_only` / :func:`draft_only`: one model decodes every step (the target-only baseline of the paper's
  FLOPs comparison, and its draft-only counterpart);
- :func:`best_of_n`: the "parallel decoding" baseline of the paper's +3.5 claim: N sampled draft answers, the PRM
  scores every step, the answer with the best aggregate (``"min"``, ``"last"`` or ``"prod"`` over its steps) wins;
- :func:`assisted_generation`: token-level speculative decoding as ``transformers`` runs it
  (``generate(..., assistant_model=draft)``), whose greedy output equals the target's greedy output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from icml25_shared.validate import check_choice, check_int
from rsd.config import RSDConfig
from rsd.decoder import RSDOutput, StepDecoder
from rsd.flops import CallRecord
from rsd.prm import check_scores

__all__ = ["AssistedOutput", "assisted_generation", "best_of_n", "draft_only", "target_only"]


def target_only(
    target: Any, prompts: Sequence[str], config: RSDConfig | None = None, *, batched: bool = True, prm: Any = None
) -> list[RSDOutput]:
    """Every step from the target (the baseline of the FLOPs ratio); ``prm`` scores the steps when
    ``config.score_target_steps``."""
    return StepDecoder(None, target, prm, config, target_name="target").generate(prompts, batched=batched)


def draft_only(
    draft: Any, prompts: Sequence[str], config: RSDConfig | None = None, *, batched: bool = True, prm: Any = None
) -> list[RSDOutput]:
    """Every step from the draft (what RSD gives with δ = 0)."""
    return StepDecoder(None, draft, prm, config, target_name="draft").generate(prompts, batched=batched)


_AGGREGATES = ("min", "last", "prod")


def best_of_n(
    draft: Any, prm: Any, prompts: Sequence[str], n: int, config: RSDConfig | None = None, *, aggregate: str = "min"
) -> list[RSDOutput]:
    """Best-of-N with the draft: N answers per prompt sampled at ``config.temperature`` (set it > 0), each scored
    step by step by the PRM and aggregated (``min``: the weakest step, the usual choice; ``last``; ``prod``); the
    best answer is returned with the calls of all N samples and of the scoring (for FLOPs)."""
    n = check_int("n", n, min=1)
    aggregate = check_choice("aggregate", aggregate, _AGGREGATES)
    config = config if config is not None else RSDConfig(temperature=0.7)
    if n > 1 and config.greedy:
        raise ValueError(
            f"best_of_n with n={n} needs config.temperature > 0, got {config.temperature}: greedy decoding gives n "
            "identical answers (and n times the cost)"
        )
    prompts = list(prompts)
    samples = draft_only(draft, prompts * n, config)
    best: list[RSDOutput] = []
    d = config.step_delimiter
    for i, prompt in enumerate(prompts):
        cands = [samples[j * len(prompts) + i] for j in range(n)]
        calls: list[CallRecord] = []
        scores = []
        for c in cands:
            steps = [s.text[: -len(d)] if s.text.endswith(d) else s.text for s in c.steps]
            r = check_scores(prm, prm.score(prompt, steps), len(steps)) if steps else [0.0]
            scores.append(min(r) if aggregate == "min" else r[-1] if aggregate == "last" else math.prod(r))
            prompt_len = c.calls[0].context_len if c.calls else 0
            answer = len(c.token_ids)
            calls += c.calls + [CallRecord("prm", 0, prompt_len + answer, 0, scored=answer)]
        k = max(range(n), key=lambda j: scores[j])
        chosen = cands[k]
        counts = {key: sum(c.counts[key] for c in cands) for key in chosen.counts}
        counts["prm_calls"] = counts.get("prm_calls", 0) + n
        best.append(replace(chosen, counts=counts, calls=calls))
    return best


@dataclass
class AssistedOutput:
    """One answer of :func:`assisted_generation`: token ids, text and every forward pass of each model (as
    scoring-style :class:`rsd.flops.CallRecord`: ``cached_prefix`` = the cache length, ``context_len`` = cache +
    new input tokens), from which ``FlopCounter(...).total(outs, "cached")`` counts processed tokens exactly."""

    token_ids: list[int]
    text: str
    calls: list[CallRecord] = field(default_factory=list)


def _counting_hook(name: str, log: list[CallRecord]):
    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        cache = kwargs.get("past_key_values")
        past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        new = int(ids.shape[-1])
        log.append(CallRecord(name, past, past + new, 0, scored=new))

    return hook


@torch.no_grad()
def assisted_generation(
    target_model: Any,
    draft_model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_total_tokens: int = 4096,
    num_assistant_tokens: int | None = None,
) -> list[AssistedOutput]:
    """Greedy token-level speculative decoding with ``transformers``: ``target_model.generate(...,
    assistant_model=draft_model)``, one prompt at a time (assisted generation takes batch size 1), until EOS or
    ``max_total_tokens`` prompt + answer tokens."""
    max_total_tokens = check_int("max_total_tokens", max_total_tokens, min=1)
    if isinstance(prompts, str) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of strings, got {prompts!r}")
    eos = tokenizer.eos_token_id
    pad = getattr(tokenizer, "pad_token_id", None)
    outs = []
    # the candidate-length heuristic fits an ROC curve with scikit-learn when it is importable: switched off so
    # the baseline behaves the same with or without scikit-learn (its greedy output is the target's either way)
    gcfg = draft_model.generation_config
    saved = getattr(gcfg, "assistant_confidence_threshold", None)
    gcfg.assistant_confidence_threshold = 0.0
    try:
        for prompt in prompts:
            outs.append(
                _assisted_one(
                    target_model, draft_model, tokenizer, prompt, eos, pad, max_total_tokens, num_assistant_tokens
                )
            )
    finally:
        gcfg.assistant_confidence_threshold = saved
    return outs


def _assisted_one(
    target_model: Any,
    draft_model: Any,
    tokenizer: Any,
    prompt: str,
    eos: int,
    pad: Any,
    max_total_tokens: int,
    nat: Any,
) -> AssistedOutput:
    log: list[CallRecord] = []
    handles = [
        m.register_forward_pre_hook(_counting_hook(n, log), with_kwargs=True)
        for n, m in (("target", target_model), ("draft", draft_model))
    ]
    try:
        ids = torch.tensor([tokenizer.encode(prompt)], device=next(target_model.parameters()).device)
        if ids.shape[1] >= max_total_tokens:
            raise ValueError(
                f"a prompt is {ids.shape[1]} tokens long, leaving no room to generate within max_total_tokens="
                f"{max_total_tokens}; shorten it to at most {max_total_tokens - 1} tokens or raise max_total_tokens"
            )
        kw: dict[str, Any] = {}
        if nat is not None:
            kw["num_assistant_tokens"] = check_int("num_assistant_tokens", nat, min=1)
            kw["num_assistant_tokens_schedule"] = "constant"
        seq = target_model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=draft_model,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            max_new_tokens=max_total_tokens - ids.shape[1],
            eos_token_id=eos,
            pad_token_id=pad if pad is not None else eos,
            **kw,
        )[0, ids.shape[1] :].tolist()
    finally:
        for h in handles:
            h.remove()
    if eos in seq:
        seq = seq[: seq.index(eos) + 1]
    return AssistedOutput(seq, tokenizer.decode(seq, skip_special_tokens=True), log)
