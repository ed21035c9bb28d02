"""Test helpers: scripted backends that replay or sample fixed steps, and tiny random GPT-2s."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rsd.backends import cut_at_stop
from rsd.tasks.arithmetic import ArithmeticTokenizer, make_model

TOK = ArithmeticTokenizer()


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


class ScriptedBackend:
    """Answers each context with ``script(context)`` (token ids), cut at the first stop and the budget; records
    every call's batch."""

    def __init__(self, script: Callable[[list[int]], list[int]], tokenizer=TOK, vocab_size: int | None = 20):
        self.script, self.tokenizer, self.vocab_size = script, tokenizer, vocab_size
        self.batches: list[int] = []

    def generate_steps(
        self, contexts, *, max_new_tokens, stop_ids, stop_strings=(), temperature=0.0, top_p=1.0, generator=None
    ):
        self.batches.append(len(contexts))
        return [
            cut_at_stop(self.script(list(c)), stop_ids, k, stop_strings, self.tokenizer)
            for c, k in zip(contexts, max_new_tokens)
        ]


class ReplayBackend(ScriptedBackend):
    """Replays, for each prompt (the context's first ``prompt_len`` tokens), its list of steps in order."""

    def __init__(self, steps_by_prompt: dict[str, Sequence[str | list[int]]], prompt_of: Callable[[list[int]], str]):
        self.calls_per_prompt: dict[str, int] = {}

        def script(ctx: list[int]) -> list[int]:
            p = prompt_of(ctx)
            k = self.calls_per_prompt.get(p, 0)
            self.calls_per_prompt[p] = k + 1
            s = steps_by_prompt[p][min(k, len(steps_by_prompt[p]) - 1)]
            return ids(s) if isinstance(s, str) else list(s)

        super().__init__(script)


class SamplingBackend(ScriptedBackend):
    """Each step is one outcome token drawn from ``probs`` (over ``outcomes``) then EOS: an enumerable step space."""

    def __init__(self, probs: Sequence[float], outcomes: Sequence[int]):
        self.probs = torch.tensor(probs, dtype=torch.float64)
        self.outcomes = list(outcomes)
        super().__init__(lambda c: [])

    def generate_steps(
        self, contexts, *, max_new_tokens, stop_ids, stop_strings=(), temperature=0.0, top_p=1.0, generator=None
    ):
        self.batches.append(len(contexts))
        draws = torch.multinomial(self.probs, len(contexts), replacement=True, generator=generator)
        return [[self.outcomes[int(k)], TOK.eos_token_id] for k in draws]


def random_gpt2(n_layer: int = 1, n_embd: int = 32, n_head: int = 2, seed: int = 0, scale: float = 6.0):
    """A random GPT-2 over the arithmetic vocabulary whose greedy outputs depend on position and content (weights
    scaled up so that it does not repeat one token); pad and bos have zero embeddings so they are never emitted."""
    m = make_model(n_layer, n_embd, n_head, seed=seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(scale)
        m.transformer.wte.weight[[TOK.pad_token_id, TOK.bos_token_id]] = 0.0  # never emitted: logit 0 vs large ones
    return m
