"""The proposal suite: shape and proportions (fast), and every method's outcome on the whole suite (slow)."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from proofaug.backends.coq import coq_available
from proofaug.suite import QUICK_QUOTA, load_minif2f_rocq, load_problems, load_suite, sample_quick


def test_suite_shape_and_kinds():
    items = load_suite()
    assert len(items) == 109 and len(load_problems()) == 24
    assert Counter(it.kind for it in items) == {
        "K0": 16, "K1": 14, "K2": 14, "K3": 14, "K4": 14, "K5": 15, "K6": 12, "K7": 6, "K8": 4
    }  # fmt: skip
    quick = load_suite(quick=True)  # the original fixed subset (the benchmark's)
    assert Counter(it.kind for it in quick) == {"K0": 4, "K1": 4, "K2": 4, "K3": 4, "K4": 3, "K5": 2, "K6": 3}
    assert all(set(it.expected) >= {"plain", "proofaug"} for it in items)
    assert Counter(it.problem.name for it in items)["rev_len"] == 7
    assert sum(it.erp is not None for it in items) == 6


def test_sample_quick_is_stratified_seeded_and_varies():
    a, b = sample_quick(0), sample_quick(1)
    assert [it.id for it in a] == [it.id for it in sample_quick(0)]  # deterministic per seed
    assert {it.id for it in a} != {it.id for it in b}  # the seed draws another sample
    for sample in (a, b):
        got = Counter(it.kind + ("+erp" if it.kind == "K5" and it.erp else "") for it in sample)
        assert got == QUICK_QUOTA and len(sample) == 24


def test_load_minif2f_rocq(tmp_path):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "mathd_algebra_10.v").write_text(
        "Require Import Reals.\nOpen Scope R_scope.\n\n(* comment. *)\nTheorem mathd_algebra_10 :\n  2 + 2 = 4.\n"
        "Proof.\nAdmitted.\n"
    )
    (prob,) = load_minif2f_rocq(tmp_path)
    assert prob.name == "mathd_algebra_10" and prob.statement == "Theorem mathd_algebra_10 : 2 + 2 = 4."
    assert prob.header.startswith("Require Import Reals.") and "Theorem" not in prob.header
    with pytest.raises(FileNotFoundError, match="valid"):
        load_minif2f_rocq(tmp_path, split="valid")


@pytest.mark.slow
@pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")
def test_whole_suite_reaches_recorded_outcomes():
    """Every method on all 109 proposals (quick ladder) reproduces the outcomes recorded in ``outcomes.json``."""
    from proofaug.experiments import QUICK, run_suite

    recorded = json.loads(resources.files("proofaug.suite").joinpath("outcomes.json").read_text())
    items = load_suite()
    run = run_suite(items, QUICK)
    methods = [m for m in run.results if m != "proofaug+erp"]  # the recording has no scripted-ERP row
    got = {it.id: {m: run.results[m][i].success for m in methods} for i, it in enumerate(items)}
    assert got == {k: {m: v[m] for m in methods} for k, v in recorded.items()}


def test_missing_coq_names_the_debian_packages():
    from proofaug import CoqBackend

    with pytest.raises(FileNotFoundError, match="apt-get install coq"):
        CoqBackend(coqtop="no-such-coqtop-binary")


@pytest.mark.slow
@pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")
def test_reproduce_quick(tmp_path):
    from icml25_shared.verdict import judge
    from proofaug.reproduce import reproduce

    res = reproduce(False, tmp_path, seed=0)
    main = res.claims[0]
    assert set(main.details["rates"]) == {
        "plain",
        "theorem_ladder",
        "dsp_holes",
        "first_error",
        "proofaug",
        "proofaug+erp",
    }
    values = list(main.details["seeds"]["per_seed"].values())
    assert len(values) == 5 and main.verdict == judge(values, ">", 0.0)[0]
    assert main.details["false_positives"] == 0 and "re-checked by coqchk: 0 of" in main.measured
    assert all(len(c.short) <= 32 for c in res.claims) and (tmp_path / "pass_rates.png").is_file()


def test_reproduce_without_coq_is_a_missing_prerequisite(tmp_path, monkeypatch):
    from icml25_shared.report import MissingPrerequisite
    from proofaug.reproduce import reproduce

    monkeypatch.setenv("PATH", str(tmp_path))  # no coqtop, coqc or coqchk
    with pytest.raises(MissingPrerequisite) as err:
        reproduce(False, tmp_path, seed=0)
    assert (err.value.program, err.value.install) == ("coqtop", "apt-get install coq")


def test_the_command_reports_proofaug_skipped_without_coq(tmp_path, monkeypatch):
    """Through the icml25 runner (what `icml25 reproduce --all` runs): skipped with the reason, not crashed."""
    from icml25_shared.runner import run_in_process

    monkeypatch.setenv("PATH", str(tmp_path))
    res = run_in_process("proofaug", "proofaug.reproduce:reproduce", tmp_path / "out", seed=0)
    assert not res.crashed and "coqtop" in res.skipped and "apt-get install coq" in res.skipped
    assert [c.verdict for c in res.claims] == ["skipped"] and (tmp_path / "out" / "result_quick.json").is_file()


def _fake_run(items, wins: set[str]):
    """Every method succeeds on the same proposals (the K0 ones); proofaug also on ``wins``."""
    from proofaug.experiments import SuiteRun

    class R:
        def __init__(self, ok: bool) -> None:
            self.success, self.stage, self.checker_calls, self.seconds = ok, "init_atp", 1, 0.0
            self.proof = "Proof. Qed."

    methods = ("plain", "theorem_ladder", "dsp_holes", "first_error", "proofaug", "proofaug+erp")
    res = {m: [R(it.kind == "K0" or (m.startswith("proofaug") and it.id in wins)) for it in items] for m in methods}
    return SuiteRun(items, res)


@pytest.mark.parametrize("case", ["tie", "one_win", "every_k7", "false_positive"])
def test_headline_verdict_is_computed_from_the_interval(tmp_path, monkeypatch, case):
    """The headline margin is judged on the t-interval over the seeded samples: a tie does not hold, a win that only
    some samples contain is inconclusive, a win in every sample holds, and a false positive overrides all."""
    from icml25_shared.verdict import judge
    from proofaug import reproduce as rep

    k7 = [it.id for it in load_suite() if it.kind == "K7"]
    seen = Counter(i.id for s in range(5) for i in sample_quick(s) if i.kind == "K7")
    partial = next(i for i in k7 if 0 < seen[i] < 5)  # drawn by some of the five samples only
    wins = {"tie": set(), "one_win": {partial}, "every_k7": set(k7), "false_positive": set(k7)}[case]
    monkeypatch.setattr(rep.shutil, "which", lambda prog: f"/usr/bin/{prog}")
    monkeypatch.setattr(rep, "run_suite", lambda items, st: _fake_run(items, wins))
    monkeypatch.setattr(rep, "independent_check", lambda run, **kw: (int(case == "false_positive"), 9))
    monkeypatch.setattr(rep, "plot_rates", lambda run, out: out / "p.png")
    main = rep.reproduce(False, tmp_path, seed=0).claims[0]
    values = list(main.details["seeds"]["per_seed"].values())
    expected = {
        "tie": "does not hold",
        "one_win": "inconclusive",
        "every_k7": "holds",
        "false_positive": "does not hold",
    }
    assert main.verdict == expected[case]
    if case != "false_positive":
        assert main.verdict == judge(values, ">", 0.0)[0]
        lo, hi = main.details["seeds"]["interval"]
        assert (lo > 0) == (main.verdict == "holds") and (hi <= 0) == (main.verdict == "does not hold")
