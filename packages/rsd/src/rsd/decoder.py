"""Reward-guided speculative decoding (Alg. 1 with the acceptance rule of Alg. 2).

For each problem, until the answer ends (EOS) or a limit is reached: the draft model writes one whole step, the
PRM scores it in its context, the step is accepted with probability ω(r), and a rejected step is rewritten by the
target model from the same prefix. Like the official code, all unfinished problems advance together: one draft call
for all of them per round, one target call for the rejected ones (``generate``); ``generate(..., batched=False)``
decodes each problem alone, with the same result under greedy decoding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch

from icml25_shared.validate import check_bool, check_choice
from rsd.backends import common_prefix
from rsd.config import RSDConfig
from rsd.flops import CallRecord
from rsd.prm import check_scores

__all__ = ["RSDOutput", "RewardGuidedDecoder", "Step", "StepDecoder"]

logger = logging.getLogger(__name__)

Source = Literal["draft", "target"]


@dataclass
class Step:
    """One reasoning step of an answer: its text (with its delimiter), token ids, who wrote it, and the PRM's
    reward (of the draft step; ``None`` for an unscored target step). A rejected draft step is kept in
    ``rejected_ids`` / ``rejected_reward`` of the target step that replaced it."""

    text: str
    token_ids: list[int]
    source: Source
    reward: float | None = None
    rejected_ids: list[int] | None = None
    rejected_reward: float | None = None


@dataclass
class RSDOutput:
    """The answer to one prompt: ``text`` (the steps joined), ``steps``, token ``counts``, every model ``calls``
    (for :class:`rsd.FlopCounter`) and why decoding stopped (``"eos"``, ``"max_steps"``, ``"max_total_tokens"``,
    ``"empty"``, ``"patience"``)."""

    prompt: str
    text: str = ""
    steps: list[Step] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.steps for t in s.token_ids]


_COUNTS = (
    "draft_steps",
    "accepted_steps",
    "target_steps",
    "accepted_draft_tokens",
    "discarded_draft_tokens",
    "target_tokens",
    "prm_calls",
)


class _State:
    """Decoding state of one problem."""

    def __init__(self, index: int, prompt: str, ctx: dict[str, list[int]], seed: int):
        self.index, self.prompt, self.ctx = index, prompt, ctx
        self.out = RSDOutput(prompt, counts=dict.fromkeys(_COUNTS, 0))
        self.processed: dict[str, list[int]] = {}  # tokens whose keys each model holds (cached FLOPs accounting)
        self.seed = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) % 2**63
        self._rng: torch.Generator | None = None
        self.prm_steps: list[str] = []
        self.done = False

    @property
    def rng(self) -> torch.Generator:
        """This problem's generator of acceptance draws (made on first use: binary rules never draw)."""
        if self._rng is None:
            self._rng = torch.Generator().manual_seed(self.seed)
        return self._rng

    def finish(self, reason: str) -> None:
        self.done, self.out.finish_reason = True, reason


class StepDecoder:
    """Step-by-step decoding with draft, PRM and target (RSD), or with one model alone (``draft=None``: the
    target-only / draft-only baselines). Use :class:`RewardGuidedDecoder` for RSD."""

    def __init__(
        self,
        draft: Any,
        target: Any,
        prm: Any,
        config: RSDConfig | None = None,
        *,
        path: str = "token",
        target_name: Source = "target",
    ):
        self.draft, self.target, self.prm = draft, target, prm
        self.config = config if config is not None else RSDConfig()
        if not isinstance(self.config, RSDConfig):
            raise ValueError(f"config must be an RSDConfig, got {type(self.config).__name__}")
        self.path = check_choice("path", path, ("token", "text"))
        self.target_name = target_name
        if target is None:
            raise ValueError("target backend must be given")
        if draft is not None and prm is None:
            raise ValueError("RSD needs a PRM (an object with score(prompt, steps) -> list[float])")
        if prm is not None and not callable(getattr(prm, "score", None)):
            raise ValueError(f"prm must have a score(prompt, steps) method, got {prm!r}")
        models = [m for m in (draft, target) if m is not None]
        toks = [getattr(m, "tokenizer", None) for m in models]
        if self.path == "token":
            if draft is not None:
                vd, vt = getattr(draft, "vocab_size", None), getattr(target, "vocab_size", None)
                if vd is not None and vt is not None and vd != vt:
                    raise ValueError(
                        f"draft and target vocabularies differ ({vd} vs {vt}): the token path needs one "
                        "vocabulary; use path='text' with a tokenizer on each backend"
                    )
                vocabs = [t.get_vocab() for t in toks if t is not None and hasattr(t, "get_vocab")]
                if len(vocabs) == 2 and vocabs[0] != vocabs[1]:
                    raise ValueError("draft and target tokenizers differ: use path='text'")
            tok = next((t for t in toks if t is not None), None)
            if tok is None:
                raise ValueError("at least one backend needs a tokenizer (encode/decode/eos_token_id)")
            self.tokenizers: dict[str, Any] = {"draft": tok, "target": tok}
        else:
            if any(t is None for t in toks):
                raise ValueError("path='text' needs a tokenizer on every backend")
            self.tokenizers = {"draft": toks[0], "target": toks[-1]}
        self._stops = {name: self._stop_spec(tok) for name, tok in self.tokenizers.items()}
        # the per-problem token limit: max_total_tokens, or less when a model's position table is shorter
        self._limit = {"draft": self.config.max_total_tokens, "target": self.config.max_total_tokens}
        self._why = dict.fromkeys(self._limit, f"max_total_tokens={self.config.max_total_tokens}")
        for role, backend in (("draft", draft), ("target", target)) if draft is not None else ((target_name, target),):
            pos = getattr(backend, "max_positions", None)
            if pos is not None and pos < self._limit[role]:
                self._limit[role] = int(pos)
                self._why[role] = f"the {role} model's {pos} positions"
        if self.path == "token":  # one shared context: the tighter limit applies to both
            r = min(self._limit, key=lambda k: self._limit[k])
            self._limit = dict.fromkeys(self._limit, self._limit[r])
            self._why = dict.fromkeys(self._why, self._why[r])

    # ---------------------------------------------------------------------------------------------- helpers
    def _stop_spec(self, tok: Any) -> tuple[list[int], list[str], int | None]:
        eos = getattr(tok, "eos_token_id", None)
        delim = tok.encode(self.config.step_delimiter, add_special_tokens=False)
        stop_ids = [eos] if eos is not None else []
        stop_strings: list[str] = []
        if len(delim) == 1:
            stop_ids.insert(0, delim[0])
        else:
            stop_strings = [self.config.step_delimiter]
        return stop_ids, stop_strings, eos

    def _key(self, role: str) -> str:
        """Context key of a role: on the token path draft and target share one context."""
        return "shared" if self.path == "token" else role

    def _init_states(self, prompts: Sequence[str]) -> list[_State]:
        if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError(f"prompts must be a non-empty list of strings, got {prompts!r}")
        states = []
        for i, p in enumerate(prompts):
            if not isinstance(p, str) or not p:
                raise ValueError(f"prompts[{i}] must be a non-empty string, got {p!r}")
            if self.path == "token":
                ctx = {"shared": list(self.tokenizers["target"].encode(p))}
            else:
                ctx = {r: list(self.tokenizers[r].encode(p)) for r in ("draft", "target")}
            for role in ("draft", "target") if self.draft is not None else (self.target_name,):
                n = len(ctx[self._key(role)])
                if n >= self._limit[role]:
                    raise ValueError(
                        f"prompts[{i}] is {n} tokens long ({role} tokenizer), leaving no room to generate within "
                        f"{self._why[role]}; shorten it to at most {self._limit[role] - 1} tokens"
                        + (" or raise max_total_tokens" if self._why[role].startswith("max_total") else "")
                    )
            states.append(_State(i, p, ctx, self.config.seed))
        return states

    def _budget(self, st: _State, role: str) -> int:
        return min(self.config.max_step_tokens, self._limit[role] - len(st.ctx[self._key(role)]))

    def _call(
        self, backend: Any, role: str, record_as: str, states: list[_State], gen: torch.Generator
    ) -> list[list[int]]:
        key = self._key(role)
        ctxs = [st.ctx[key] for st in states]
        stop_ids, stop_strings, _ = self._stops[role]
        budgets = [self._budget(st, role) for st in states]
        res = backend.generate_steps(
            ctxs,
            max_new_tokens=budgets,
            stop_ids=stop_ids,
            stop_strings=stop_strings,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            generator=gen,
        )
        if len(res) != len(states):
            raise ValueError(f"backend {backend!r} returned {len(res)} results for {len(states)} contexts")
        for st, ids, ctx in zip(states, res, ctxs):
            ids = [int(t) for t in ids]
            s = common_prefix(st.processed.get(record_as, []), ctx)
            st.out.calls.append(CallRecord(record_as, s, len(ctx), len(ids)))
            st.processed[record_as] = ctx + ids[:-1] if ids else list(ctx)
        return [[int(t) for t in ids] for ids in res]

    def _step_text(self, role: str, ids: list[int]) -> str:
        return self.tokenizers[role].decode(ids, skip_special_tokens=True)

    def _prm_view(self, text: str) -> str:
        d = self.config.step_delimiter
        return text[: -len(d)] if text.endswith(d) else text

    def _score(self, states: list[_State], role: str, steps: list[list[int]]) -> list[float]:
        rewards = []
        for st, ids in zip(states, steps):
            cand = [*st.prm_steps, self._prm_view(self._step_text(role, ids))]
            scores = check_scores(self.prm, self.prm.score(st.prompt, cand), len(cand))
            rewards.append(scores[-1])
            st.out.counts["prm_calls"] += 1
            ctx = st.ctx[self._key(role)] + ids  # PRM cost counted on the draft's tokenisation
            s = common_prefix(st.processed.get("prm", []), ctx)
            st.out.calls.append(CallRecord("prm", s, len(ctx), 0, scored=len(ids)))
            st.processed["prm"] = ctx
        return rewards

    def _accept(self, st: _State, reward: float) -> bool:
        w = self.config.weighting(reward)
        if w in (0.0, 1.0):  # binary rules need no draw
            return w == 1.0
        return bool(torch.rand((), generator=st.rng) < w)

    def _append(self, st: _State, role: Source, ids: list[int], reward: float | None, rejected: tuple | None) -> None:
        text = self._step_text(role, ids)
        step = Step(text, ids, role, reward)
        if rejected is not None:
            step.rejected_ids, step.rejected_reward = rejected
        st.out.steps.append(step)
        st.out.text += text
        st.prm_steps.append(self._prm_view(text))
        if self.path == "token":
            st.ctx["shared"] = st.ctx["shared"] + ids
        else:
            for r in ("draft", "target"):
                add = ids if r == role else list(self.tokenizers[r].encode(text, add_special_tokens=False))
                st.ctx[r] = st.ctx[r] + add
        eos = self._stops[role][2]
        if ids and eos is not None and ids[-1] == eos:
            st.finish("eos")
        elif len(st.out.steps) >= self.config.max_steps:
            st.finish("max_steps")
        elif min(self._budget(st, r) for r in ("draft", "target")) <= 0:
            st.finish("max_total_tokens")

    # ---------------------------------------------------------------------------------------------- rounds
    def _round(self, states: list[_State], gen: torch.Generator) -> None:
        """One round of Alg. 1 for every problem in ``states`` (all unfinished)."""
        if self.draft is None:  # single-model step decoding (baselines)
            role = cast(Source, self.target_name)
            for st, ids in zip(states, self._call(self.target, role, role, states, gen)):
                if not ids:
                    st.finish("empty")
                    continue
                st.out.counts[f"{role}_steps" if role == "target" else "draft_steps"] += 1
                if role == "target":
                    st.out.counts["target_tokens"] += len(ids)
                else:
                    st.out.counts["accepted_steps"] += 1
                    st.out.counts["accepted_draft_tokens"] += len(ids)
                reward = None
                if self.prm is not None and self.config.score_target_steps:
                    reward = self._score([st], role, [ids])[0]
                self._append(st, role, ids, reward, None)
            return
        drafts = self._call(self.draft, "draft", "draft", states, gen)
        live = [(st, ids) for st, ids in zip(states, drafts) if ids or st.finish("empty")]
        rewards = self._score([s for s, _ in live], "draft", [i for _, i in live]) if live else []
        rejected: list[tuple[_State, list[int], float]] = []
        for (st, ids), r in zip(live, rewards):
            st.out.counts["draft_steps"] += 1
            if self._accept(st, r):  # Alg. 2: keep the draft step
                st.out.counts["accepted_steps"] += 1
                st.out.counts["accepted_draft_tokens"] += len(ids)
                self._append(st, "draft", ids, r, None)
            else:
                st.out.counts["discarded_draft_tokens"] += len(ids)
                rejected.append((st, ids, r))
        if not rejected:
            return
        rst = [st for st, _, _ in rejected]
        for (st, d_ids, d_r), ids in zip(rejected, self._call(self.target, "target", "target", rst, gen)):
            if not ids:
                st.finish("empty")
                continue
            st.out.counts["target_steps"] += 1
            st.out.counts["target_tokens"] += len(ids)
            reward = self._score([st], "target", [ids])[0] if self.config.score_target_steps else None
            self._append(st, "target", ids, reward, (d_ids, d_r))

    def _run(self, states: list[_State], gen: torch.Generator) -> None:
        patience, stall = self.config.patience, 0
        for st in states:
            if min(self._budget(st, r) for r in ("draft", "target")) <= 0:
                st.finish("max_total_tokens")
        while True:
            active = [st for st in states if not st.done]
            if not active:
                return
            # the official script's batch-level cut-off: in a round that starts after patience - 1 rounds in a row
            # without a newly finished problem, every problem still running ends after this round's step
            cut = patience is not None and stall >= patience - 1
            self._round(active, gen)
            newly = sum(st.done for st in active)
            if cut:
                for st in active:
                    if not st.done:
                        st.finish("patience")
            stall = 0 if newly else stall + 1

    def generate(self, prompts: Sequence[str], *, batched: bool = True) -> list[RSDOutput]:
        """Decode every prompt with reward-guided speculative decoding (Alg. 1 + 2).

        Args:
            prompts: one non-empty string per problem.
            batched: advance all unfinished problems together (one model call per round); ``False`` decodes them
                one after another (the same greedy outputs).

        Returns:
            One :class:`RSDOutput` per prompt (text, steps with their source and reward, counts, model calls).

        Raises:
            ValueError: for an empty prompt list or prompt, or a prompt that leaves no room to generate.
        """
        batched = check_bool("batched", batched)
        states = self._init_states(prompts)
        gen = torch.Generator().manual_seed(self.config.seed)
        try:
            if batched:
                self._run(states, gen)
            else:
                for st in states:
                    self._run([st], gen)
        finally:  # kept keys and values (HFBackend's prefix cache) live for one generate call
            for backend in (self.draft, self.target):
                if callable(getattr(backend, "clear_cache", None)):
                    backend.clear_cache()
        return [st.out for st in states]


class RewardGuidedDecoder(StepDecoder):
    """Reward-guided speculative decoding (Alg. 1): ``RewardGuidedDecoder(draft, target, prm, config)``.

    ``draft`` and ``target`` are backends (:class:`rsd.HFBackend`, :class:`rsd.OpenAIBackend`, or anything with
    ``generate_steps``), ``prm`` has ``score(prompt, steps) -> list[float]``. On the token path (default) both
    models share one vocabulary and one token context; ``path="text"`` lets them have different tokenizers (each
    step's text is re-tokenised for the other model).
    """

    def __init__(self, draft: Any, target: Any, prm: Any, config: RSDConfig | None = None, *, path: str = "token"):
        if draft is None:
            raise ValueError("draft backend must be given (for target-only decoding use rsd.baselines.target_only)")
        super().__init__(draft, target, prm, config, path=path)
