"""Backends: how the decoder asks a model for one reasoning step per context.

A backend turns token-id contexts into continuations that end at the first stop (the step delimiter or EOS),
inclusive. :class:`HFBackend` wraps ``model.generate()`` of any ``transformers`` causal LM; :class:`OpenAIBackend`
speaks to an OpenAI-compatible completions server (vLLM, SGLang), as the official code does with one server per
model. Anything with the same ``generate_steps`` method works (tests use scripted backends).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from icml25_shared.validate import check_bool, check_choice, check_int

__all__ = ["Backend", "HFBackend", "OpenAIBackend", "PrefixCache", "cut_at_stop"]

logger = logging.getLogger(__name__)


@runtime_checkable
class Backend(Protocol):
    """What :class:`rsd.RewardGuidedDecoder` needs from a model.

    ``tokenizer`` (``encode``/``decode``/``eos_token_id``) may be ``None`` when the other backend has one and both
    share the vocabulary; ``vocab_size`` is compared between draft and target on the token path.
    """

    tokenizer: Any
    vocab_size: int | None

    def generate_steps(
        self,
        contexts: list[list[int]],
        *,
        max_new_tokens: list[int],
        stop_ids: Sequence[int],
        stop_strings: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]: ...


def cut_at_stop(
    ids: list[int], stop_ids: Sequence[int], limit: int, stop_strings: Sequence[str] = (), tokenizer: Any = None
) -> list[int]:
    """``ids`` up to and including the first stop id (or the token that completes a stop string), at most
    ``limit`` tokens."""
    stops = set(stop_ids)
    ids = list(ids[:limit])
    for i, t in enumerate(ids):
        if t in stops:
            return ids[: i + 1]
        if stop_strings and tokenizer is not None:
            tail = tokenizer.decode(ids[max(0, i - 7) : i + 1])
            if any(s in tail for s in stop_strings) and any(s in tokenizer.decode(ids[: i + 1]) for s in stop_strings):
                return ids[: i + 1]
    return ids


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """Key/value tensors of earlier ``generate`` calls, one entry per sequence, found again by token prefix.

    RSD calls a model once per step on a context that extends an earlier context of the same problem by one step
    (its own accepted step, or the other model's): Alg. 1 re-reads the whole prefix at every round unless the keys
    and values of that prefix are kept. An entry holds the tokens it covers (the context and the generated tokens
    but the last, which no forward processed) and, per layer, keys and values of shape ``(1, heads, len, head_dim)``.
    Entries are keyed by their context; a lookup tries the stored context lengths, longest first, then extends the
    match over the entry's generated tokens. Reuse is exact in tokens (a cached key is only reused for the very
    token at the very position it was computed for). At most ``max_entries`` entries are kept (least recently
    used dropped first); an entry extended by a later call is replaced by the longer one.
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = check_int("max_entries", max_entries, min=1)
        self._entries: OrderedDict[tuple[int, ...], tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]]
        self._entries = OrderedDict()
        self._lengths: dict[int, int] = {}  # context length -> entries with that length

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._lengths.clear()

    def lookup(self, context: Sequence[int]) -> tuple[tuple[int, ...] | None, int]:
        """``(key, n)``: the entry sharing the longest stored-context prefix with ``context`` and how many of its
        tokens match (at most ``len(context) - 1``: the model must read at least one token); ``(None, 0)``."""
        for length in sorted(self._lengths, reverse=True):
            if length > len(context):
                continue
            key = tuple(context[:length])
            if key in self._entries:
                covered = self._entries[key][0]
                n = length + common_prefix(covered[length:], context[length:])
                self._entries.move_to_end(key)
                return key, min(n, len(context) - 1)
        return None, 0

    def layers(self, key: tuple[int, ...], n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first ``n`` positions of an entry's keys and values, per layer."""
        return [(k[:, :, :n], v[:, :, :n]) for k, v in self._entries[key][1]]

    def store(self, context: Sequence[int], covered: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        key = tuple(context)
        if key not in self._entries:
            self._lengths[len(key)] = self._lengths.get(len(key), 0) + 1
        self._entries[key] = (covered, kv)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self.drop(next(iter(self._entries)))

    def drop(self, key: tuple[int, ...]) -> None:
        if self._entries.pop(key, None) is not None:
            self._lengths[len(key)] -= 1
            if not self._lengths[len(key)]:
                del self._lengths[len(key)]


def _cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Per-layer (keys, values) of a ``transformers`` cache, or ``None`` when it is not a plain full-attention
    ``DynamicCache`` (sliding-window or recurrent layers cannot be cut back to a prefix)."""
    from transformers import DynamicCache

    if type(cache) is not DynamicCache:
        return None
    dc: Any = cache  # the layer classes differ across transformers versions: read by duck typing
    if hasattr(dc, "layers"):  # transformers >= 4.56
        if any(getattr(layer, "is_sliding", False) or not hasattr(layer, "keys") for layer in dc.layers):
            return None
        return [(layer.keys, layer.values) for layer in dc.layers]
    return list(zip(dc.key_cache, dc.value_cache))  # pragma: no cover - older transformers


def _generate_cache_arguments() -> tuple[str, str]:
    """The name of ``generate``'s cache argument and of the output's cache field (``cache`` since transformers 5.x,
    ``past_key_values`` before)."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    fields = getattr(GenerateDecoderOnlyOutput, "__dataclass_fields__", {})
    return ("cache", "cache") if "cache" in fields else ("past_key_values", "past_key_values")


class _StopStringCriteria:
    """A ``StoppingCriteria`` that ends a row once its generated text contains one of ``stop_strings`` (for
    multi-token delimiters; rows already stopped just wait for the rest of the batch)."""

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str], prompt_len: int):
        self.tokenizer, self.stop_strings, self.prompt_len = tokenizer, tuple(stop_strings), prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        done = []
        for row in input_ids[:, self.prompt_len :].tolist():
            text = self.tokenizer.decode(row[-8:])
            done.append(any(s in text for s in self.stop_strings))
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _position_limit(model: Any) -> int | None:
    """Most tokens a model can read: the size of its learned position table (GPT-2's ``n_positions``, or
    ``max_position_embeddings`` of a model with a position-embedding module); ``None`` for rotary models, whose
    ``max_position_embeddings`` is a training length, not an index bound."""
    cfg = getattr(model, "config", None)
    n = getattr(cfg, "n_positions", None)
    mpe = getattr(cfg, "max_position_embeddings", None)
    if n is None and mpe is not None:
        names = (name for name, _ in model.named_modules())
        if any(name.endswith(("wpe", "embed_positions", "position_embeddings")) for name in names):
            n = mpe
    return int(n) if n is not None else None


class HFBackend:
    """A ``transformers`` causal LM as a step generator, through ``model.generate()``.

    Stop ids (the delimiter's single token and EOS) go to ``generate`` as ``eos_token_id``; a delimiter of several
    tokens is a stop-string criterion. Batching: ``"bucket"`` (default) groups contexts of equal length into one
    ``generate`` call each -- no padding, so every row sees exactly its unpadded positions; ``"pad"`` left-pads
    all contexts into one call with an attention mask (positions then come from the mask: checked against
    unpadded generation by the tests). Sampling (``temperature > 0``) draws from a torch seed taken from
    ``generator``, so runs are reproducible without touching the global RNG.

    ``reuse_cache`` (default: on with ``"bucket"`` batching) keeps each sequence's keys and values between calls
    (:class:`PrefixCache`, at most ``max_cached`` sequences), so a context that extends an earlier one -- the next
    step of the same problem -- is not re-encoded: only the new tokens are read. Rows of one call share the
    shortest reusable prefix among them. Greedy outputs equal the uncached path's (tested). The decoder empties
    the cache at the end of each ``generate`` (:meth:`clear_cache`). Models whose cache is not a plain
    full-attention ``DynamicCache`` fall back to re-encoding.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        batching: str = "bucket",
        max_batch_size: int | None = None,
        reuse_cache: bool | None = None,
        max_cached: int = 4096,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.batching = check_choice("batching", batching, ("bucket", "pad"))
        self.max_batch_size = None if max_batch_size is None else check_int("max_batch_size", max_batch_size, min=1)
        if reuse_cache is None:
            reuse_cache = self.batching == "bucket"
        self.reuse_cache = check_bool("reuse_cache", reuse_cache)
        if self.reuse_cache and self.batching == "pad":
            raise ValueError("reuse_cache=True needs batching='bucket' (left-padded rows do not share positions)")
        max_cached = check_int("max_cached", max_cached, min=1)
        self.cache = PrefixCache(max_cached) if self.reuse_cache else None
        self._kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # the last call's keys and values
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.vocab_size = int(out.weight.shape[0]) if out is not None else getattr(model.config, "vocab_size", None)
        self.name = type(model).__name__
        self.max_positions = _position_limit(model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def clear_cache(self) -> None:
        """Forget every kept key/value (the decoder calls this when a ``generate`` ends)."""
        if self.cache is not None:
            self.cache.clear()

    def _pad_id(self, stop_ids: Sequence[int]) -> int:
        for src in (self.tokenizer, getattr(self.model, "generation_config", None), self.model.config):
            pid = getattr(src, "pad_token_id", None) if src is not None else None
            if pid is not None:
                return int(pid)
        return int(stop_ids[0])

    @torch.no_grad()
    def generate_steps(
        self,
        contexts: list[list[int]],
        *,
        max_new_tokens: list[int],
        stop_ids: Sequence[int],
        stop_strings: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        if stop_strings and self.tokenizer is None:
            raise ValueError("a multi-token step delimiter needs HFBackend(model, tokenizer) to detect it")
        # kept keys and values: looked up once for the whole call, before any entry is replaced
        cache = self.cache
        found = [cache.lookup(c) for c in contexts] if cache is not None else None
        kv = (
            [cache.layers(key, n) if key is not None else None for key, n in found]
            if found and cache is not None
            else None
        )
        if self.batching == "bucket":  # equal lengths; rows with and without a reusable prefix apart
            groups: dict[tuple[int, bool], list[int]] = {}
            for i, c in enumerate(contexts):
                groups.setdefault((len(c), bool(found and found[i][1])), []).append(i)
            batches = list(groups.values())
        else:
            batches = [list(range(len(contexts)))]
        if self.max_batch_size:
            batches = [b[j : j + self.max_batch_size] for b in batches for j in range(0, len(b), self.max_batch_size)]
        out: list[list[int]] = [[] for _ in contexts]
        stored: set[tuple[int, ...]] = set()
        for rows in batches:
            budget = max(max_new_tokens[i] for i in rows)
            ctxs = [list(contexts[i]) for i in rows]
            past = (
                self._reusable([found[i][1] for i in rows], [kv[i] for i in rows]) if found and kv is not None else None
            )
            gen = self._generate(ctxs, budget, stop_ids, stop_strings, temperature, top_p, generator, past)
            for i, g in zip(rows, gen):
                out[i] = cut_at_stop(g, stop_ids, max_new_tokens[i], stop_strings, self.tokenizer)
            if self._kept is not None:
                stored.update(self._keep(ctxs, [out[i] for i in rows]))
        if found and self.cache is not None:  # an entry extended by this call is replaced by the longer one
            for key in {key for key, _ in found if key is not None} - stored:
                self.cache.drop(key)
        return out

    @staticmethod
    def _reusable(lengths: list[int], kv: list[Any]) -> Any:
        """A ``DynamicCache`` over the prefix every row of one bucket can reuse (the shortest), or ``None``."""
        n = min(lengths)
        if n == 0:
            return None
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer in range(len(kv[0])):
            keys = torch.cat([row[layer][0][:, :, :n] for row in kv])
            values = torch.cat([row[layer][1][:, :, :n] for row in kv])
            cache.update(keys, values, layer)
        return cache

    def _keep(self, ctxs: list[list[int]], steps: list[list[int]]) -> list[tuple[int, ...]]:
        """Store each row's keys and values over its context and step (the step's last token was never read);
        rows are views of the call's cache tensors (no copy)."""
        kept, cache = self._kept, self.cache
        assert kept is not None and cache is not None, "_keep runs after a generate call that kept its cache"
        length = kept[0][0].shape[2]
        for r, (c, ids) in enumerate(zip(ctxs, steps)):
            n = min(length, len(c) + max(len(ids) - 1, 0))
            cache.store(c, (c + ids)[:n], [(k[r : r + 1, :, :n], v[r : r + 1, :, :n]) for k, v in kept])
        self._kept = None
        return [tuple(c) for c in ctxs]

    def _generate(
        self, ctxs, budget, stop_ids, stop_strings, temperature, top_p, generator, past=None
    ) -> list[list[int]]:
        width = max(len(c) for c in ctxs)
        pad = self._pad_id(stop_ids)
        ids = torch.full((len(ctxs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ctxs), width), dtype=torch.long)
        for r, c in enumerate(ctxs):  # left padding ("bucket" never pads)
            ids[r, width - len(c) :] = torch.tensor(c, dtype=torch.long)
            mask[r, width - len(c) :] = 1
        kwargs: dict[str, Any] = {
            "max_new_tokens": budget,
            "eos_token_id": list(stop_ids),
            "pad_token_id": pad,
            "do_sample": temperature > 0,
        }
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop_strings:
            from transformers import StoppingCriteriaList

            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [_StopStringCriteria(self.tokenizer, stop_strings, width)]
            )
        device = self.device
        self._kept = None
        if self.cache is not None:
            arg, field = _generate_cache_arguments()
            kwargs["return_dict_in_generate"] = True
            if past is not None:
                kwargs[arg] = past
        seed = int(torch.randint(0, 2**62, (1,), generator=generator)) if temperature > 0 and generator else None
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            res = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        if self.cache is None:
            return res[:, width:].tolist()
        self._kept = _cache_layers(getattr(res, field, None))
        if self._kept is None:
            logger.info("%s: the model's cache cannot be cut to a prefix; re-encoding every call", self.name)
            self.cache = None
        return res.sequences[:, width:].tolist()


class OpenAIBackend:
    """A model behind an OpenAI-compatible completions server (vLLM, SGLang), one server per model as in the
    official code; the server receives token-id prompts and returns text, which is tokenised back here.

    ``stop_ids`` go as vLLM's ``stop_token_ids``, stop strings as ``stop`` with ``include_stop_str_in_output``;
    a finish other than a stop on the delimiter counts as EOS when the server reports ``finish_reason="stop"``
    without a matched stop string. Needs ``pip install icml25-rsd[serve]`` (the ``openai`` client).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        *,
        api_key: str = "EMPTY",
        timeout: float = 60.0,
        client: Any = None,
    ):
        if tokenizer is None:
            raise ValueError("OpenAIBackend needs the model's tokenizer (token counts and contexts are token ids)")
        if client is None:
            try:
                from openai import OpenAI
            except ImportError as err:  # pragma: no cover - depends on the environment
                raise ImportError("OpenAIBackend needs the openai client: pip install 'icml25-rsd[serve]'") from err
            client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self.client, self.model, self.tokenizer = client, model, tokenizer
        self.vocab_size = getattr(tokenizer, "vocab_size", None)
        self.name = f"OpenAIBackend({model})"

    def generate_steps(
        self,
        contexts: list[list[int]],
        *,
        max_new_tokens: list[int],
        stop_ids: Sequence[int],
        stop_strings: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        out: list[list[int]] = []
        # one request per distinct budget keeps max_tokens exact per row; rows are batched within a request
        groups: dict[int, list[int]] = {}
        for i, k in enumerate(max_new_tokens):
            groups.setdefault(int(k), []).append(i)
        results: dict[int, list[int]] = {}
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if temperature > 0 and generator else None
        for budget, rows in groups.items():
            extra: dict[str, Any] = {"stop_token_ids": list(stop_ids), "skip_special_tokens": True}
            if stop_strings:
                extra["include_stop_str_in_output"] = True
            resp = self.client.completions.create(
                model=self.model,
                prompt=[contexts[i] for i in rows],
                max_tokens=budget,
                temperature=temperature,
                top_p=top_p,
                stop=list(stop_strings) or None,
                seed=seed,
                extra_body=extra,
            )
            got = sorted(int(c.index) for c in resp.choices)
            if got != list(range(len(rows))):
                raise ValueError(
                    f"{self.name}: the server answered {len(rows)} prompts with choices of indices {got}; expected one "
                    f"choice per prompt, indices 0..{len(rows) - 1} (is n > 1 or best_of set on the server?)"
                )
            for choice in sorted(resp.choices, key=lambda c: c.index):
                i = rows[choice.index]
                ids = list(self.tokenizer.encode(choice.text, add_special_tokens=False))
                # vLLM reports the matched stop token id in stop_reason, and None when the model's EOS ended it
                stop_reason = getattr(choice, "stop_reason", None)
                if choice.finish_reason == "stop":
                    end = stop_reason if isinstance(stop_reason, int) else eos if stop_reason is None else None
                    if end is not None and (not ids or ids[-1] != end):
                        ids.append(int(end))
                results[i] = cut_at_stop(ids, stop_ids, budget, stop_strings, self.tokenizer)
        for i in range(len(contexts)):
            out.append(results[i])
        return out
