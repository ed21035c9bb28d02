"""FLOPs accounting: the worked example (prompt of 5 tokens, one accepted and one rejected draft step), counts."""

from __future__ import annotations

import pytest
from rsd_testing import ReplayBackend

from rsd import CallablePRM, CallRecord, FlopCounter, ModelCost, RewardGuidedDecoder, RSDConfig
from rsd.baselines import target_only
from rsd.tasks.arithmetic import make_model

DRAFT, TARGET = ModelCost(1000, 1, 8), ModelCost(10000, 2, 16)
PROMPT = "Q:12"  # bos + 4 symbols = 5 tokens


def _example():
    cfg = RSDConfig(step_delimiter="\n")
    draft = ReplayBackend({PROMPT: ["3+4\n", "5+6\n"]}, lambda c: PROMPT)
    target_steps = ["3+4\n", [10, 15, 11, 2]]  # "7=8" then EOS
    target = ReplayBackend({PROMPT: target_steps[1:]}, lambda c: PROMPT)
    prm = CallablePRM(lambda p, steps: [1.0] + [0.0] * (len(steps) - 1), name="first-step-only")
    rsd = RewardGuidedDecoder(draft, target, prm, cfg).generate([PROMPT])
    base = target_only(ReplayBackend({PROMPT: target_steps}, lambda c: PROMPT), [PROMPT], cfg)
    return rsd, base


def test_worked_example_all_modes():
    rsd, base = _example()
    out = rsd[0]
    assert [s.source for s in out.steps] == ["draft", "target"] and out.finish_reason == "eos"
    fc = FlopCounter(draft=DRAFT, target=TARGET, prm=ModelCost.free())  # a rule-based PRM, priced at 0 explicitly
    by_model = fc.per_model(rsd, "generated")
    assert by_model == {"draft": 8_416 + 8_672, "target": 82_688, "prm": 0}
    assert fc.total(rsd, "generated") == 99_776
    assert fc.total(base, "generated") == 81_664 + 82_688 == 164_352
    assert fc.per_model(rsd, "cached") == {"draft": 16_576 + 8_672, "target": 244_992, "prm": 0}
    assert fc.total(rsd, "cached") == 270_240
    assert fc.total(rsd, "uncached") == 16_576 + 25_248 + 244_992 == 286_816
    assert fc.total(base, "cached") == 162_304 + 82_688 == 244_992


def test_counts_match_token_ids():
    rsd, base = _example()
    c = rsd[0].counts
    assert c["accepted_draft_tokens"] + c["discarded_draft_tokens"] == sum(
        r.generated for r in rsd[0].calls if r.model == "draft"
    )
    assert c["accepted_draft_tokens"] == sum(len(s.token_ids) for s in rsd[0].steps if s.source == "draft") == 4
    assert c["target_tokens"] == sum(len(s.token_ids) for s in rsd[0].steps if s.source == "target") == 4
    assert c["discarded_draft_tokens"] == len(rsd[0].steps[1].rejected_ids) == 4
    assert (c["draft_steps"], c["accepted_steps"], c["target_steps"], c["prm_calls"]) == (2, 1, 1, 2)
    assert base[0].counts["target_tokens"] == len(base[0].token_ids) == 8


def test_prm_cost_and_closed_form_span():
    fc = FlopCounter(draft=DRAFT, target=TARGET, prm=ModelCost(500, 1, 4))
    rec = CallRecord("prm", 5, 9, 0, scored=4)  # scores a 4-token step after a 5-token prefix
    assert fc.call(rec, "generated") == fc.call(rec, "cached") == sum(1000 + 8 * (p + 1) for p in range(5, 9))
    assert fc.call(rec, "uncached") == sum(1000 + 8 * (p + 1) for p in range(9))
    with pytest.raises(ValueError, match="mode"):
        fc.call(rec, "prefill")
    with pytest.raises(ValueError, match="ModelCost"):
        FlopCounter(target=TARGET).call(CallRecord("draft", 0, 3, 1))


def test_every_model_call_must_be_priced():
    """A PRM left without a cost is refused, not counted as free (the paper's PRM is a 1.5B model)."""
    rsd, base = _example()
    with pytest.raises(ValueError, match=r"no ModelCost for model 'prm'.*counted as 0 FLOPs.*ModelCost.free\(\)"):
        FlopCounter(draft=DRAFT, target=TARGET).total(rsd, "generated")
    assert FlopCounter(draft=DRAFT, target=TARGET).total(base, "generated") == 164_352  # no PRM call: no PRM cost
    priced = FlopCounter(draft=DRAFT, target=TARGET, prm=DRAFT).per_model(rsd, "generated")
    # the PRM reads each scored 4-token step once: positions 5..8, then 9..12 (the draft's size)
    assert priced["prm"] == sum(2_000 + 16 * (p + 1) for p in (*range(5, 9), *range(9, 13)))
    assert ModelCost.free().span(0, 100) == 0


def test_model_cost_from_model_counts_non_embedding_parameters():
    d, t = ModelCost.from_model(make_model(1, 48, 2)), ModelCost.from_model(make_model(2, 96, 4))
    assert (d.n_nonembedding, d.n_layers, d.d_model) == (28_368, 1, 48)
    assert (t.n_nonembedding, t.n_layers, t.d_model) == (223_872, 2, 96)


def test_total_takes_one_output_or_a_list_and_names_anything_else():
    from rsd import RSDOutput

    one = RSDOutput("Q", calls=[CallRecord("target", 0, 5, 4)])
    fc = FlopCounter(target=ModelCost(10000, 2, 16))
    assert fc.total(one) == fc.total([one]) == fc.call(one.calls[0])  # one output used to raise "not iterable"
    with pytest.raises(TypeError, match="outputs must hold decoding outputs with .calls .*got str"):
        fc.total(["Q"])
