"""The reproduction's verdicts come from intervals over seeds (or banks), and no rule sits on the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from amortized_irt.reproduce import CAT_RATIO, ORACLE_GAP, cat_claim, recovery_claim
from icml25_shared.verdict import judge


def _recs(mml, oracle, rmse):
    return [
        {"spearman_b": m, "oracle_spearman_b": o, "rmse_theta": r} for m, o, r in zip(mml, oracle, rmse, strict=True)
    ]


def test_recovery_verdict_is_the_interval_of_the_gap_to_the_oracle():
    # the figures of this simulation: MML ends 1e-4 below the oracle, which itself sits near 0.98
    oracle = [0.9797, 0.9792, 0.9802]
    mml = [0.9796, 0.9790, 0.9801]
    c = recovery_claim(_recs(mml, oracle, [0.10, 0.11, 0.10]), [0, 1, 2])
    assert c.verdict == "holds" and c.holds is True
    # a rule at the oracle (gap <= 0), or on the Spearman itself at 0.98, could not hold here: ours does
    assert judge(np.subtract(oracle, mml), "<=", 0.0)[0] != "holds"
    assert judge(mml, ">=", 0.98)[0] != "holds"
    assert 0.0 < ORACLE_GAP < 0.02
    gap = c.details["seeds"]
    assert gap["per_seed"] == {"0": pytest.approx(1e-4), "1": pytest.approx(2e-4), "2": pytest.approx(1e-4)}
    assert gap["interval"][1] <= ORACLE_GAP
    assert "MML 0.9796" in c.measured and "oracle 0.9797" in c.measured  # absolute figures shown


def test_recovery_verdict_follows_the_interval_not_the_mean():
    oracle = [0.98, 0.98, 0.98]
    # mean gap 0.004 (below 0.005), but the interval reaches past it: inconclusive, not holds
    c = recovery_claim(_recs([0.976, 0.9785, 0.9735], oracle, [0.1] * 3), [3, 4, 5])
    assert c.verdict == "inconclusive" and c.holds is None
    far = recovery_claim(_recs([0.95, 0.951, 0.949], oracle, [0.1] * 3), [0, 1, 2])
    assert far.verdict == "does not hold" and far.holds is False
    rmse_bad = recovery_claim(_recs([0.9799] * 3, oracle, [0.2, 0.21, 0.19]), [0, 1, 2])
    assert rmse_bad.verdict == "does not hold"


def _cat(ratios):
    per = {
        f"s{k}": {"max_info": {"items": 100 * r}, "random": {"items": 100.0}, "ratio": r} for k, r in enumerate(ratios)
    }
    red = 1 - np.asarray(ratios)
    return {"per_scenario": per, "ratio_of_means": float(np.mean(ratios)), "mean_reduction": float(red.mean()),
            "max_reduction": float(red.max())}  # fmt: skip


def test_cat_verdict_is_the_interval_over_banks():
    # the 22 full-mode banks average 0.63, the two quick ones 0.71: one bank decides nothing alone
    assert cat_claim(_cat([0.62, 0.60, 0.66, 0.63, 0.61, 0.64])).verdict == "holds"
    assert cat_claim(_cat([0.64, 0.80, 0.58, 0.57, 0.58, 0.67])).verdict == "inconclusive"
    assert cat_claim(_cat([0.78, 0.80, 0.75, 0.79])).verdict == "does not hold"
    c = cat_claim(_cat([0.64, 0.80, 0.58, 0.57, 0.58, 0.67]))
    assert c.details["rule_threshold"] == CAT_RATIO and c.details["seeds"]["n"] == 6
    assert "6 banks" in c.measured
