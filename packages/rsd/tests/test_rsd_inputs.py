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


def test_values_that_used_to_pass_silently_or_crash_late_are_named():
    import numpy as np

    from rsd import FlopCounter, HFProcessRewardModel, ModelCost, mixture_distribution, weighting

    pm, r = [0.5, 0.5], [0.9, 0.1]
    with pytest.raises(ValueError, match="p_target must be a probability vector .* got None"):
        mixture_distribution(pm, None, r, weighting.binary(0.7))  # was [nan, nan]
    for w in (weighting.clip(0.5), weighting.binary(0.5), weighting.sigmoid(0.5)):
        with pytest.raises(ValueError, match=r"needs a reward in \[0, 1\], got nan"):
            w(float("nan"))  # clip accepted a NaN reward with probability 1
        with pytest.raises(ValueError, match=r"needs a reward in \[0, 1\], got 1.5"):
            w(1.5)
    assert weighting.clip(np.float32(0.5))(np.float32(0.25)) == 0.5
    with pytest.raises(TypeError, match="draft must be a ModelCost or None, got GPT2LMHeadModel .*from_model"):
        FlopCounter(draft=make_model(1, 16, 2), target=ModelCost(10, 1, 4))  # was an AttributeError at the count
    with pytest.raises(
        ValueError, match=r"seed must be an int in \[0, 18446744073709551615\], got 1180591620717411303424"
    ):
        RSDConfig(seed=2**70)  # was torch's "Overflow when unpacking long long" inside generate
    assert RSDConfig(seed=np.uint64(2**64 - 1)).seed == 2**64 - 1
    for bad in (float("nan"), 1.5):
        with pytest.raises(
            ValueError, match=r"PRM p returned the score (nan|1.5); expected a finite value in \[0, 1\]"
        ):
            CallablePRM(lambda p, s, v=bad: v, per_step=True, name="p").score("Q:1+1\n", ["1+1=2"])
    model = make_model(1, 16, 2)
    with pytest.raises((ValueError, TypeError), match="value_index"):
        HFProcessRewardModel(model, TOK, value_index=1.7)  # was truncated to 1
    with pytest.raises(ValueError, match="value_index=1000 is out of range: the model's logits have 20 channels"):
        HFProcessRewardModel(model, TOK, value_index=1000).score("Q:1+1\n", ["1+1=2"])


def test_best_of_n_refuses_greedy_sampling():
    from rsd.baselines import best_of_n

    draft, _ = _models()
    prm = CallablePRM(lambda p, s: [1.0] * len(s))
    with pytest.raises(ValueError, match=r"best_of_n with n=4 needs config.temperature > 0, got 0.0"):
        best_of_n(draft, prm, ["Q:1+1\n"], 4, RSDConfig(step_delimiter="\n", max_steps=2))  # 4 identical answers
    (one,) = best_of_n(draft, prm, ["Q:1+1\n"], 1, RSDConfig(step_delimiter="\n", max_steps=2))  # n = 1: fine
    assert one.steps


def test_assisted_generation_refuses_a_prompt_at_max_total_tokens():
    from rsd.baselines import assisted_generation

    model = make_model(1, 16, 2)
    with pytest.raises(ValueError, match=r"a prompt is 7 tokens long, leaving no room .* max_total_tokens=5"):
        assisted_generation(model, model, TOK, ["Q:1+1\n"], max_total_tokens=5)  # generated one token past the cap
