"""The proposal suite: shape and proportions (fast), and every method's outcome on the whole suite (slow)."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from proofaug.backends.coq import coq_available
from proofaug.suite import load_minif2f_rocq, load_problems, load_suite


def test_suite_shape_and_kinds():
    items = load_suite()
    assert len(items) == 96 and len(load_problems()) == 24
    assert Counter(it.kind for it in items) == {"K0": 16, "K1": 14, "K2": 14, "K3": 14, "K4": 14, "K5": 12, "K6": 12}
    quick = load_suite(quick=True)
    assert Counter(it.kind for it in quick) == {"K0": 4, "K1": 4, "K2": 4, "K3": 4, "K4": 3, "K5": 2, "K6": 3}
    assert all(set(it.expected) >= {"plain", "proofaug"} for it in items)
    assert Counter(it.problem.name for it in items) == dict.fromkeys(load_problems(), 4)


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
    """Every method on all 96 proposals (quick ladder) reproduces the outcomes recorded in ``outcomes.json``."""
    from proofaug.experiments import QUICK, run_suite

    recorded = json.loads(resources.files("proofaug.suite").joinpath("outcomes.json").read_text())
    items = load_suite()
    run = run_suite(items, QUICK)
    got = {it.id: {m: run.results[m][i].success for m in run.results} for i, it in enumerate(items)}
    assert got == {k: {m: v[m] for m in run.results} for k, v in recorded.items()}


def test_missing_coq_names_the_debian_packages():
    from proofaug import CoqBackend

    with pytest.raises(FileNotFoundError, match="apt-get install coq"):
        CoqBackend(coqtop="no-such-coqtop-binary")


@pytest.mark.slow
@pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")
def test_reproduce_quick(tmp_path):
    from proofaug.reproduce import reproduce

    res = reproduce(False, tmp_path)
    main = res.claims[0]
    rates = main.details["rates"]
    assert set(rates) == {"plain", "theorem_ladder", "dsp_holes", "first_error", "proofaug"}
    assert main.holds == (rates["proofaug"] > max(v for k, v in rates.items() if k != "proofaug"))
    assert main.details["false_positives"] == 0 and all(len(c.short) <= 32 for c in res.claims)
    assert (tmp_path / "pass_rates.png").is_file()
