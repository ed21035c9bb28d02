"""Inputs that used to fail deep inside torch or Python: a prompt longer than the model's positions, a PRM that
returns None or a scalar."""

from __future__ import annotations

import pytest
from rsd_testing import ScriptedBackend

from rsd import CallablePRM, HFBackend, RewardGuidedDecoder, RSDConfig
from rsd.baselines import target_only
from rsd.tasks.arithmetic import ArithmeticTokenizer, make_model

TOK = ArithmeticTokenizer()


def _models():
    return HFBackend(make_model(1, 16, 2), TOK), HFBackend(make_model(1, 16, 2), TOK)  # n_positions 64


def test_prompt_longer_than_the_models_positions_is_named():
    draft, target = _models()
    assert target.max_positions == 64
    long = "Q:" + "1+" * 40 + "1\n"  # 85 tokens with bos
    prm = CallablePRM(lambda p, s: [1.0] * len(s))
    cfg = RSDConfig(step_delimiter="\n")  # max_total_tokens 4096: the position table is the binding limit
    with pytest.raises(ValueError, match=r"prompts\[1\] is 85 tokens .*draft model.s 64 positions.*at most 63"):
        RewardGuidedDecoder(draft, target, prm, cfg).generate(["Q:1+1\n", long])
    with pytest.raises(ValueError, match=r"prompts\[0\] is 85 tokens long .*the target model's 64 positions"):
        target_only(target, [long], cfg)


def test_prompt_at_max_total_tokens_is_named():
    _, target = _models()
    with pytest.raises(ValueError, match=r"prompts\[0\] is 7 tokens long .*max_total_tokens=5.*raise max_total_tokens"):
        target_only(target, ["Q:1+1\n"], RSDConfig(step_delimiter="\n", max_total_tokens=5))


def test_generation_stops_at_the_position_table():
    class Short(ScriptedBackend):
        max_positions = 20  # a model with a 20-position table

    step = Short(lambda c: TOK.encode("1+1=2\n", add_special_tokens=False))
    cfg = RSDConfig(step_delimiter="\n", max_step_tokens=8, max_steps=100)  # max_total_tokens 4096
    (out,) = target_only(step, ["Q:1+1\n"], cfg)
    assert out.finish_reason == "max_total_tokens"
    assert len(TOK.encode("Q:1+1\n")) + len(out.token_ids) == 20


@pytest.mark.parametrize("bad", [None, 0.7, "0.7"])
def test_prm_returning_none_or_a_scalar_is_named(bad):
    draft, target = _models()
    prm = CallablePRM(lambda p, s: bad, name="my_prm")
    dec = RewardGuidedDecoder(draft, target, prm, RSDConfig(step_delimiter="\n", max_steps=2))
    with pytest.raises(ValueError, match=r"PRM my_prm: score\(prompt, steps\) returned .*expected a list of 1 floats"):
        dec.generate(["Q:1+1\n"])


def test_per_step_prm_returning_none_is_named():
    draft, target = _models()
    prm = CallablePRM(lambda p, s: None, per_step=True, name="step_prm")
    dec = RewardGuidedDecoder(draft, target, prm, RSDConfig(step_delimiter="\n", max_steps=2))
    with pytest.raises(ValueError, match=r"PRM step_prm \(per_step=True\) returned None for step 0"):
        dec.generate(["Q:1+1\n"])
