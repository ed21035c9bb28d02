"""transformers integration: HFBackend against a plain greedy loop (no cache, no padding), stop strings, the text
path with a different vocabulary, assisted generation, and the HF process reward model."""

from __future__ import annotations

import pytest
import torch
from rsd_testing import TOK, random_gpt2

from rsd import CallablePRM, HFBackend, HFProcessRewardModel, RewardGuidedDecoder, RSDConfig, weighting
from rsd.baselines import assisted_generation, target_only
from rsd.tasks.arithmetic import ArithmeticTokenizer

NL = TOK.convert_tokens_to_ids("\n")
EOS = TOK.eos_token_id


@pytest.fixture(scope="module")
def models():
    return random_gpt2(1, 32, 2, seed=1), random_gpt2(2, 32, 2, seed=2)


@torch.no_grad()
def greedy_reference(model, ctx, budget, stop_ids=(), stop_text=None):
    """Greedy decoding by full forwards (no KV cache, no batch, no padding)."""
    out = []
    for _ in range(budget):
        logits = model(input_ids=torch.tensor([ctx + out])).logits[0, -1]
        out.append(int(logits.argmax()))
        if out[-1] in stop_ids or (stop_text and stop_text in TOK.decode(out)):
            break
    return out


CONTEXTS = [TOK.encode(p) for p in ["Q:1+2\n", "Q:3-4+5-6\n", "Q:7\n", "Q:8+9-1\n", "Q:0-5+5\n", "Q:2+2\n"]]


@pytest.mark.parametrize("batching", ["bucket", "pad"])
def test_hf_backend_equals_unpadded_greedy(models, batching):
    _, target = models
    budgets = [6, 3, 8, 5, 8, 1]
    got = HFBackend(target, TOK, batching=batching).generate_steps(CONTEXTS, max_new_tokens=budgets, stop_ids=[NL, EOS])
    want = [greedy_reference(target, c, k, (NL, EOS)) for c, k in zip(CONTEXTS, budgets)]
    assert got == want
    assert any(g and g[-1] == NL for g in got) or any(len(g) == k for g, k in zip(got, budgets))


def test_multi_token_delimiter_stop_string(models):
    draft, _ = models
    tok = TOK
    cfg = RSDConfig(step_delimiter="+1", max_step_tokens=10, max_total_tokens=30, max_steps=3)
    outs = target_only(HFBackend(draft, tok), ["Q:1+2\n", "Q:7\n"], cfg)
    for o in outs:
        ctx = tok.encode(o.prompt)
        for s in o.steps:
            want = greedy_reference(draft, ctx, min(10, 30 - len(ctx)), (EOS,), "+1")
            assert s.token_ids == want
            ctx = ctx + s.token_ids
    with pytest.raises(ValueError, match="tokenizer"):
        HFBackend(draft).generate_steps([CONTEXTS[0]], max_new_tokens=[3], stop_ids=[EOS], stop_strings=["+1"])


class PermutedTokenizer(ArithmeticTokenizer):
    """The arithmetic tokenizer with its ids permuted (a different vocabulary for the same text)."""

    def __init__(self, perm):
        super().__init__()
        self.perm = perm
        self.inv = {v: k for k, v in perm.items()}
        self.eos_token_id, self.pad_token_id, self.bos_token_id = perm[2], perm[0], perm[1]

    def get_vocab(self):
        return {k: self.perm[v] for k, v in super().get_vocab().items()}

    def encode(self, text, add_special_tokens=True):
        return [self.perm[i] for i in super().encode(text, add_special_tokens)]

    def decode(self, ids, skip_special_tokens=True):
        return super().decode([self.inv[int(i)] for i in ids], skip_special_tokens)

    def convert_tokens_to_ids(self, token):
        return self.perm[super().convert_tokens_to_ids(token)]


def test_text_path_with_a_permuted_vocabulary(models):
    draft, target = models
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(20, generator=g).tolist()
    perm = dict(enumerate(order))
    permuted = random_gpt2(1, 32, 2, seed=1)
    with torch.no_grad():
        permuted.transformer.wte.weight[torch.tensor(order)] = draft.transformer.wte.weight.clone()
    ptok = PermutedTokenizer(perm)
    prm = CallablePRM(lambda p, s: [(len(x) % 3) / 2 for x in s], name="length")
    cfg = RSDConfig(weighting=weighting.binary(0.5), step_delimiter="\n", max_step_tokens=5, max_total_tokens=24)
    prompts = ["Q:1+2\n", "Q:3-4+5-6\n", "Q:7\n"]
    token_path = RewardGuidedDecoder(HFBackend(draft, TOK), HFBackend(target, TOK), prm, cfg).generate(prompts)
    text_path = RewardGuidedDecoder(HFBackend(permuted, ptok), HFBackend(target, TOK), prm, cfg, path="text")
    got = text_path.generate(prompts)
    assert [o.text for o in got] == [o.text for o in token_path]
    assert [[s.source for s in o.steps] for o in got] == [[s.source for s in o.steps] for o in token_path]
    assert {s.source for o in got for s in o.steps} == {"draft", "target"}
    with pytest.raises(ValueError, match="path='text'"):
        RewardGuidedDecoder(HFBackend(permuted, ptok), HFBackend(target, TOK), prm, cfg)


def test_assisted_generation_equals_target_greedy(models):
    draft, target = models
    prompts = ["Q:1+2\n", "Q:3-4+5-6\n", "Q:7\n"]
    cfg = RSDConfig(step_delimiter="\n", max_step_tokens=64, max_total_tokens=22, max_steps=64)
    want = [o.token_ids for o in target_only(HFBackend(target, TOK), prompts, cfg)]
    got = assisted_generation(target, draft, TOK, prompts, max_total_tokens=22, num_assistant_tokens=3)
    assert [o.token_ids for o in got] == want
    assert all(any(c.model == "draft" for c in o.calls) for o in got)


def test_hf_process_reward_model():
    from transformers import GPT2Config, GPT2ForTokenClassification

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=20, n_positions=64, n_embd=32, n_layer=1, n_head=2, num_labels=1, pad_token_id=0)
    prm = HFProcessRewardModel(GPT2ForTokenClassification(cfg).eval(), TOK, step_token="\n")
    steps = ["7-4=3", "3+8=1", "1+7=8"]
    full = prm.score("Q:7-4+8+7", steps)
    assert len(full) == 3 and all(0 < s < 1 for s in full)
    assert prm.score("Q:7-4+8+7", steps[:2]) == pytest.approx(full[:2], abs=1e-6)  # causal: prefix scores stay
    assert prm.score("Q:7-4+8+7", [*steps[:2], "1+7=9"])[2] != pytest.approx(full[2], abs=1e-6)
    ids, reads = prm.layout_ids("Q:7", ["1+1=8", "A:8"])
    assert TOK.decode([ids[r] for r in reads]) == "\n\n" and ids[0] == TOK.bos_token_id
    assert TOK.decode(ids) == "Q:7\n1+1=8\nA:8\n"


# ------------------------------------------------------------------------------- key/value reuse across steps


def _tokens_read(model):
    """A hook counting the input tokens every forward of ``model`` reads (batch x length)."""
    seen = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen.append(ids.numel())

    return seen, model.transformer.register_forward_pre_hook(hook, with_kwargs=True)


def test_kv_reuse_reads_only_new_tokens_and_equals_greedy_reference(models):
    _, target = models
    backend = HFBackend(target, TOK)  # reuse is on by default with bucketing
    assert backend.reuse_cache and not HFBackend(target, TOK, reuse_cache=False).reuse_cache
    first = backend.generate_steps(CONTEXTS, max_new_tokens=[4] * 6, stop_ids=[NL, EOS])
    other = TOK.encode("1+2=3\n", add_special_tokens=False)  # a step written by the other model
    ctxs = [c + s + other for c, s in zip(CONTEXTS, first)]
    seen, handle = _tokens_read(target)
    try:
        second = backend.generate_steps(ctxs, max_new_tokens=[5] * 6, stop_ids=[NL, EOS])
    finally:
        handle.remove()
    assert second == [greedy_reference(target, c, 5, (NL, EOS)) for c in ctxs]
    # the prefill read at most the new step and the previous step's last token (not whole contexts): the first
    # forward of each bucket reads len(other) + 1 .. + (len of the step) tokens per row, never the prompt
    assert sum(len(c) for c in ctxs) > sum(seen)
    assert len(backend.cache) == len(ctxs)  # each extended entry replaced its source
    backend.clear_cache()
    assert len(backend.cache) == 0


def test_kv_reuse_gives_the_uncached_outputs_in_rsd_and_baselines(models):
    draft, target = models

    def prm(prompt, steps):  # deterministic, rejects about half the steps
        return [float(sum(map(ord, s)) % 2) for s in steps]

    prompts = ["Q:1+2\n", "Q:3-4+5-6\n", "Q:7\n", "Q:8+9-1\n", "Q:0-5+5\n", "Q:2+2+2+2\n"]
    cfg = RSDConfig(step_delimiter="\n", max_step_tokens=6, max_total_tokens=40, max_steps=6)
    runs = {}
    for reuse in (False, True):
        d, t = HFBackend(draft, TOK, reuse_cache=reuse), HFBackend(target, TOK, reuse_cache=reuse)
        dec = RewardGuidedDecoder(d, t, CallablePRM(prm), cfg)
        with torch.inference_mode():  # kept tensors made under inference mode are reused outside it
            a = dec.generate(prompts[:3])
        b, c = dec.generate(prompts), dec.generate(prompts, batched=False)
        base = target_only(t, prompts, cfg)
        runs[reuse] = [[(o.token_ids, [s.source for s in o.steps]) for o in r] for r in (a, b, c, base)]
        if reuse:
            assert len(d.cache) == 0 and len(t.cache) == 0  # emptied at the end of every generate
    assert runs[True] == runs[False]
    assert {src for o in runs[True][1] for src in o[1]} == {"draft", "target"}


def test_prefix_cache_lookup_and_bound():
    from rsd.backends import PrefixCache

    kv = [(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))]
    cache = PrefixCache(max_entries=2)
    cache.store([1, 2, 3], [1, 2, 3, 4, 5], kv)
    assert cache.lookup([1, 2, 3, 4, 9, 9]) == ((1, 2, 3), 4)  # context, then one matching generated token
    assert cache.lookup([1, 2, 3, 4, 5]) == ((1, 2, 3), 4)  # at least one token is left to read
    assert cache.lookup([1, 2]) == (None, 0) and cache.lookup([7, 2, 3, 4]) == (None, 0)
    cache.store([5], [5], kv)
    cache.store([6], [6], kv)
    assert len(cache) == 2 and cache.lookup([1, 2, 3, 4]) == (None, 0)  # least recently used dropped


def test_kv_reuse_bad_input(models):
    _, target = models
    with pytest.raises(ValueError, match="reuse_cache"):
        HFBackend(target, TOK, batching="pad", reuse_cache=True)
    with pytest.raises(ValueError, match="reuse_cache"):
        HFBackend(target, TOK, reuse_cache="yes")
    with pytest.raises(ValueError, match="max_cached"):
        HFBackend(target, TOK, max_cached=0)
