"""The reproduction machinery in reduced form (the full quick run is ``slow``)."""

import math

import pytest

from fsl_sage.experiments import run_method
from fsl_sage.reproduce import reproduce


def test_run_method_reduced():
    hist, ledger_ok = run_method("cse_fsl", seed=0, alpha=1.0, rounds=2)
    assert ledger_ok
    assert len(hist.records) == 2
    assert hist.records[1].cumulative_bytes == 2 * 3 * 276_048  # CSE-FSL, per client per round, B = 32, q = 5
    assert not math.isnan(hist.records[1].grad_cosine)


@pytest.mark.slow
def test_quick_reproduce_returns_claims_and_plot(tmp_path):
    res = reproduce(full=False, out_dir=tmp_path)
    assert len(res.claims) >= 3
    assert (tmp_path / "accuracy_vs_bytes.png").exists() and res.artifacts == [str(tmp_path / "accuracy_vs_bytes.png")]
    assert res.claims[2].holds is True  # ledger == closed form (the icml25 command writes the JSON)
