"""Alg. 1 on scripted backends and tiny random GPT-2s: limits, termination, batching, bad input."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from rsd_testing import TOK, ReplayBackend, ScriptedBackend, ids, random_gpt2

from rsd import CallablePRM, HFBackend, RewardGuidedDecoder, RSDConfig, weighting
from rsd.baselines import draft_only, target_only

EOS = TOK.eos_token_id
PROMPTS = ["Q:1+2\n", "Q:3-4+5-6\n", "Q:7\n", "Q:8+9-1\n", "Q:0-5+5\n"]


def _hash_reward(prompt, steps):
    """A deterministic pseudo-reward of each step in its context (in [0, 1])."""
    out = []
    for i in range(len(steps)):
        h = hashlib.sha256(("|".join([prompt, *steps[: i + 1]])).encode()).digest()
        out.append(h[0] / 255)
    return out


HASH_PRM = CallablePRM(_hash_reward, name="hash")


@pytest.fixture(scope="module")
def models():
    return random_gpt2(1, 32, 2, seed=1), random_gpt2(2, 32, 2, seed=2)


def _cfg(**kw):
    base = {"step_delimiter": "\n", "max_step_tokens": 5, "max_total_tokens": 24, "max_steps": 6}
    return RSDConfig(**{**base, **kw})


def _key(outs):
    return [(o.text, o.token_ids, [s.source for s in o.steps], o.finish_reason, o.counts) for o in outs]


@pytest.mark.parametrize("batching", ["bucket", "pad"])
def test_batched_equals_per_problem_greedy(models, batching):
    d, t = models
    dec = RewardGuidedDecoder(
        HFBackend(d, TOK, batching=batching),
        HFBackend(t, TOK, batching=batching),
        HASH_PRM,
        _cfg(weighting=weighting.binary(0.5)),
    )
    batched, single = dec.generate(PROMPTS), dec.generate(PROMPTS, batched=False)
    assert _key(batched) == _key(single)
    sources = {s.source for o in batched for s in o.steps}
    assert sources == {"draft", "target"}  # both branches exercised


def test_limits_delta_zero_one_and_always_one_prm(models):
    d, t = models
    db, tb = HFBackend(d, TOK), HFBackend(t, TOK)
    d_only, t_only = draft_only(db, PROMPTS, _cfg()), target_only(tb, PROMPTS, _cfg())
    assert [o.token_ids for o in d_only] != [o.token_ids for o in t_only]  # the two models differ
    zero = RewardGuidedDecoder(db, tb, HASH_PRM, _cfg(weighting=weighting.binary(0.0))).generate(PROMPTS)
    assert [o.token_ids for o in zero] == [o.token_ids for o in d_only]
    w_all = weighting.binary(1.01, allow_always_target=True)
    always_target = RewardGuidedDecoder(db, tb, HASH_PRM, _cfg(weighting=w_all)).generate(PROMPTS)
    assert [o.token_ids for o in always_target] == [o.token_ids for o in t_only]
    assert all(o.counts["accepted_draft_tokens"] == 0 for o in always_target)
    one = CallablePRM(lambda p, s: [1.0] * len(s), name="one")
    ones = RewardGuidedDecoder(db, tb, one, _cfg(weighting=weighting.sigmoid(0.7, 0.05))).generate(PROMPTS)
    assert sum(o.counts["target_tokens"] for o in ones) == 0 < sum(o.counts["accepted_draft_tokens"] for o in ones)


def _replay(steps_by_prompt):
    return ReplayBackend(steps_by_prompt, lambda c: TOK.decode(c[: c.index(TOK.encode("\n", False)[0]) + 1]))


def test_termination_eos_empty_delimiter_first():
    eos_step = [*ids("1+2"), EOS, *ids("99")]  # EOS inside the step: the rest is never seen
    draft = _replay({"Q:1+2\n": ["\n", eos_step], "Q:7\n": [[]], "Q:3\n": ["3+1\n"]})
    target = _replay({"Q:1+2\n": ["x"], "Q:7\n": ["x"], "Q:3\n": [[]]})
    outs = RewardGuidedDecoder(
        draft, target, CallablePRM(lambda p, s: [1.0] * len(s)), _cfg(max_total_tokens=400)
    ).generate(["Q:1+2\n", "Q:7\n", "Q:3\n"])
    a, b, c = outs
    assert [s.text for s in a.steps] == ["\n", "1+2"] and a.finish_reason == "eos"  # delimiter-only step kept
    assert a.steps[-1].token_ids[-1] == EOS and a.counts["accepted_draft_tokens"] == 1 + 4
    assert b.steps == [] and b.finish_reason == "empty"
    assert len(c.steps) == 6 and c.finish_reason == "max_steps"  # per-problem max_steps


def test_max_total_tokens_per_problem():
    step = ScriptedBackend(lambda c: ids("1+1=2\n"))
    outs = target_only(step, ["Q:1\n", "Q:1+1+1+1+1\n"], _cfg(max_total_tokens=20, max_steps=100))
    for o, p in zip(outs, ["Q:1\n", "Q:1+1+1+1+1\n"]):
        assert o.finish_reason == "max_total_tokens"
        assert len(TOK.encode(p)) + len(o.token_ids) == 20
    assert len(outs[0].token_ids) > len(outs[1].token_ids)


def test_patience_reproduces_the_batch_cut_off():
    fast = [*ids("A:1"), EOS]
    draft = _replay({"Q:1\n": [fast], "Q:2\n": ["1+1=2\n"]})
    prm = CallablePRM(lambda p, s: [1.0] * len(s))
    a, b = RewardGuidedDecoder(draft, draft, prm, _cfg(patience=5, max_steps=50, max_total_tokens=400)).generate(
        ["Q:1\n", "Q:2\n"]
    )
    # as the official script: round 0 finishes "Q:1"; rounds 1-4 finish nothing; round 5 starts after
    # patience - 1 = 4 such rounds, so it is the last: "Q:2" ends with 6 steps
    assert a.finish_reason == "eos" and len(a.steps) == 1
    assert b.finish_reason == "patience" and len(b.steps) == 6
    (d,) = RewardGuidedDecoder(draft, draft, prm, _cfg(patience=5, max_steps=50, max_total_tokens=400)).generate(
        ["Q:2\n"]
    )
    assert len(d.steps) == 5  # nothing ever finishes: rounds 0-3 count, round 4 is the last
    (c,) = RewardGuidedDecoder(draft, draft, prm, _cfg(max_steps=50, max_total_tokens=400)).generate(["Q:2\n"])
    assert c.finish_reason == "max_steps" and len(c.steps) == 50


def test_acceptance_draws_are_per_problem_and_seeded():
    draft = ScriptedBackend(lambda c: ids("1+1=2\n"))
    target = ScriptedBackend(lambda c: ids("3+3=6\n"))
    half = CallablePRM(lambda p, s: [0.5] * len(s))
    cfg = _cfg(weighting=weighting.clip(1.0), max_steps=8, max_total_tokens=400)
    a = RewardGuidedDecoder(draft, target, half, cfg).generate(PROMPTS)
    b = RewardGuidedDecoder(draft, target, half, cfg).generate(PROMPTS, batched=False)
    assert _key(a) == _key(b)
    rate = np.mean([s.source == "draft" for o in a for s in o.steps])
    assert 0.25 < rate < 0.75  # ω = 0.5: about half accepted


@pytest.mark.parametrize(
    ("scores", "match"),
    [([float("nan")], "bad.*nan"), ([1.2], "bad.*1.2"), ([0.5, 0.5, 0.5], "bad.*3 scores"), (["x"], "bad")],
)
def test_bad_prm_output_names_the_prm(scores, match):
    draft = ScriptedBackend(lambda c: ids("1+1=2\n"))
    bad = CallablePRM(lambda p, s: scores, name="bad")
    with pytest.raises(ValueError, match=match):
        RewardGuidedDecoder(draft, draft, bad, _cfg()).generate(["Q:1\n"])


def test_bad_input():
    draft = ScriptedBackend(lambda c: ids("1\n"))
    dec = RewardGuidedDecoder(draft, draft, HASH_PRM, _cfg())
    for prompts in ([], "Q:1\n", ["Q:1\n", ""], [3]):
        with pytest.raises(ValueError, match="prompt"):
            dec.generate(prompts)
    with pytest.raises(ValueError, match="vocabularies differ"):
        RewardGuidedDecoder(draft, ScriptedBackend(lambda c: [], vocab_size=21), HASH_PRM, _cfg())
    with pytest.raises(ValueError, match="PRM"):
        RewardGuidedDecoder(draft, draft, None, _cfg())
    for kw, name in [
        ({"max_steps": 0}, "max_steps"),
        ({"max_step_tokens": 0}, "max_step_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"step_delimiter": ""}, "step_delimiter"),
        ({"weighting": "hard"}, "binary"),
        ({"max_steps": 2.5}, "max_steps"),
    ]:
        with pytest.raises(ValueError, match=name):
            _cfg(**kw)
    cfg = _cfg(max_steps=np.int64(3), temperature=np.float64(0.0), top_p=np.float32(0.5))
    assert type(cfg.max_steps) is int and type(cfg.top_p) is float


def test_config_round_trip():
    cfg = RSDConfig(weighting=weighting.sigmoid(0.6, 0.2), patience=5, seed=4)
    again = RSDConfig.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict() and again.weighting(0.6) == 0.5
    assert RSDConfig().weighting.is_binary and RSDConfig().weighting.delta == 0.7
    always = RSDConfig(weighting=weighting.binary(1.01, allow_always_target=True))
    assert RSDConfig.from_dict(always.to_dict()).weighting(1.0) == 0.0
    with pytest.raises(ValueError, match="unknown"):
        RSDConfig.from_dict({"delta": 0.7})
