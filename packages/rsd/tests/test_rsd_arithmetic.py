"""The arithmetic task: tokenizer, exact and noisy PRMs, shipped fixtures, and RSD end to end on them."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
import torch

from rsd import FlopCounter, HFBackend, ModelCost, RewardGuidedDecoder
from rsd.baselines import assisted_generation, target_only
from rsd.experiments import QUICK, config
from rsd.tasks.arithmetic import (
    FIXTURE_DIR,
    FIXTURE_SHA256,
    FIXTURE_SPECS,
    ArithmeticTokenizer,
    ExactArithmeticPRM,
    FixtureSpec,
    NoisyPRM,
    load_fixture_models,
    make_problems,
    step_accuracy,
    train_model,
)

TOK = ArithmeticTokenizer()


def test_tokenizer_and_problems():
    p = make_problems(1, seed=0)[0]
    ids = TOK.encode(p.prompt + p.gold_text)
    assert ids[0] == TOK.bos_token_id and TOK.decode(ids) == p.prompt + p.gold_text and TOK.vocab_size == 20
    with pytest.raises(ValueError, match="vocabulary"):
        TOK.encode("Q:1*2")
    assert make_problems(5, seed=3) == make_problems(5, seed=3) != make_problems(5, seed=4)
    assert {len(q.ops) for q in make_problems(200, min_ops=2, max_ops=4, seed=1)} == {2, 3, 4}


def test_exact_prm():
    prm = ExactArithmeticPRM()
    prompt = "Q:7-4+8+7\n"
    assert prm.score(prompt, ["7-4=3", "3+8=1", "1+7=8", "A:8"]) == [1.0] * 4
    # malformed, wrong result, early answer, extra step, wrong operand, delimiter left in
    assert prm.score(prompt, ["7-4="]) == [0.0]
    assert prm.score(prompt, ["7-4=4"]) == [0.0]
    assert prm.score(prompt, ["A:3"]) == [0.0]
    assert prm.score(prompt, ["", "7-4=3"]) == [0.0, 0.0]
    assert prm.score(prompt, ["7-5=2"]) == [0.0]
    assert prm.score(prompt, ["7-4=3", "3+8=1", "1+7=8", "A:8", "8+1=9"])[-1] == 0.0
    # a step is judged against what was written before it: an error propagates consistently
    assert prm.score(prompt, ["7-4=4", "4+8=2", "2+7=9", "A:9"]) == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="arithmetic prompt"):
        prm.score("what is 2+2?", ["4"])


def test_noisy_prm_is_deterministic_and_informative():
    prm = NoisyPRM(seed=1)
    prompt = "Q:7-4+8+7\n"
    good = prm.score(prompt, ["7-4=3", "3+8=1"])
    assert good == prm.score(prompt, ["7-4=3", "3+8=1"]) and good[0] == prm.score(prompt, ["7-4=3"])[0]
    assert good != NoisyPRM(seed=2).score(prompt, ["7-4=3", "3+8=1"])
    ps = make_problems(200, seed=5)
    right = [r for p in ps for r in prm.score(p.prompt, p.gold_steps)]
    wrong = [prm.score(p.prompt, ["A:0"])[0] for p in ps]
    assert 0.75 < sum(right) / len(right) < 0.85 and 0.15 < sum(wrong) / len(wrong) < 0.25  # Beta means 0.8 / 0.2


def test_fixture_hashes():
    for name in ("draft", "target"):
        data = (FIXTURE_DIR / name / "model.safetensors").read_bytes()
        assert hashlib.sha256(data).hexdigest() == FIXTURE_SHA256[name]


def test_curriculum_draws_short_problems_first(monkeypatch):
    import rsd.tasks.arithmetic as arith

    spec = FixtureSpec("t", n_layer=1, n_embd=8, n_head=2, steps=6, batch_size=4, max_ops=6, curriculum_steps=4)
    assert [spec.ops_at(i) for i in (0, 3, 4, 5)] == [(2, 4), (2, 4), (2, 6), (2, 6)]
    assert replace(spec, curriculum_steps=None).ops_at(0) == (2, 6)
    drawn = []
    real = arith.make_problems

    def spy(n, *, min_ops, max_ops, seed):
        drawn.append((min_ops, max_ops))
        return real(n, min_ops=min_ops, max_ops=max_ops, seed=seed)

    monkeypatch.setattr(arith, "make_problems", spy)
    train_model(spec, log_every=0)
    assert drawn == [(2, 4)] * 4 + [(2, 6)] * 2
    with pytest.raises(ValueError, match="curriculum_steps"):
        FixtureSpec("t", 1, 8, 2, steps=6, curriculum_steps=-1)
    with pytest.raises(ValueError, match="curriculum_max_ops"):
        FixtureSpec("t", 1, 8, 2, steps=6, max_ops=6, curriculum_steps=2, curriculum_max_ops=7)


def test_curriculum_over_all_steps_equals_training_on_the_short_range():
    # a curriculum that never switches is the plain recipe on min_ops..curriculum_max_ops (same draws, same weights);
    # one that switches is not
    base = FixtureSpec("t", n_layer=1, n_embd=8, n_head=2, steps=6, batch_size=4, seed=3, max_ops=4)
    cur = replace(base, max_ops=6, curriculum_steps=6)
    sd = [train_model(s, log_every=0).state_dict() for s in (base, cur, replace(cur, curriculum_steps=2))]
    assert all(torch.equal(sd[0][k], sd[1][k]) for k in sd[0])
    assert not all(torch.equal(sd[0][k], sd[2][k]) for k in sd[0])


@pytest.fixture(scope="module")
def fixtures():
    return load_fixture_models()


def test_fixture_step_accuracies_meet_the_bar(fixtures):
    draft, target = fixtures
    # the bar's measure: 200 probes of 2-4 operations (README "The fixtures", the quick run's fixture claim)
    acc_d, acc_t = step_accuracy(draft), step_accuracy(target)
    assert acc_t >= 0.95 and 0.60 <= acc_d <= 0.95, (acc_d, acc_t)


def test_rsd_on_fixtures_batched_equals_per_problem_and_assisted_equals_target(fixtures):
    draft_m, target_m = fixtures
    problems = make_problems(24, min_ops=2, max_ops=4, seed=11)  # mixed prompt lengths
    prompts = [p.prompt for p in problems]
    draft, target = HFBackend(draft_m, TOK), HFBackend(target_m, TOK)
    dec = RewardGuidedDecoder(draft, target, NoisyPRM(0), config(QUICK))
    a, b = dec.generate(prompts), dec.generate(prompts, batched=False)
    assert [(o.text, [s.source for s in o.steps], o.counts) for o in a] == [
        (o.text, [s.source for s in o.steps], o.counts) for o in b
    ]
    assert {s.source for o in a for s in o.steps} == {"draft", "target"}
    d_cost = ModelCost.from_model(draft_m)
    fc = FlopCounter(draft=d_cost, target=ModelCost.from_model(target_m), prm=d_cost)
    assert fc.total(a, "generated") <= fc.total(a, "cached") <= fc.total(a, "uncached")
    greedy = target_only(target, prompts[:6], config(QUICK))
    assisted = assisted_generation(target_m, draft_m, TOK, prompts[:6], max_total_tokens=64)
    assert [x.token_ids for x in assisted] == [g.token_ids for g in greedy]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["draft", "target"])
def test_retraining_reproduces_the_fixture_accuracies(fixtures, name):
    model = dict(zip(("draft", "target"), fixtures))[name]
    fresh = train_model(FIXTURE_SPECS[name])
    assert abs(step_accuracy(fresh) - step_accuracy(model)) <= 0.03


def test_tokenizer_names_ids_outside_its_vocabulary():
    from rsd.tasks.arithmetic import ArithmeticTokenizer

    tok = ArithmeticTokenizer()
    assert tok.decode(tok.encode("Q:1+2\n")) == "Q:1+2\n"
    with pytest.raises(ValueError, match=r"ids \[999\] are outside the arithmetic vocabulary \(ids 0..19\)"):
        tok.decode([5, 999])  # was a bare KeyError
