"""The reproduction runs end to end on a shrunken setup, takes a seed, and judges its noisy claims on the interval
over seeds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from downscaling.experiments import QUICK, ModelSize, sweep_claims
from downscaling.reproduce import reproduce
from icml25_shared.data import DataNotFoundError

TINY = replace(QUICK, large=ModelSize(2, 32, 64), small=ModelSize(1, 16, 32), large_steps=4, val_batches=2,
               calib_windows=4)  # fmt: skip


@pytest.mark.slow  # trains eight tiny models on Tiny Shakespeare
def test_reproduce_tiny_setup(tmp_path):
    try:
        res = reproduce(False, tmp_path, setup=TINY, seed=1)
    except DataNotFoundError as err:
        pytest.skip(f"Tiny Shakespeare not available: {err}")
    assert [len(c.short) <= 32 for c in res.claims] == [True] * 3
    assert all(c.verdict in ("holds", "does not hold", "inconclusive") for c in res.claims)
    assert res.settings["seeds"] == [3, 4, 5]  # seed_list(1, 3): disjoint from base seed 0's [0, 1, 2]
    assert res.claims[0].details["flopcounter_equals_analytic"]
    assert res.claims[0].details["seeds"]["n"] == 3
    assert (tmp_path / "pareto.png").exists()


def _sweep(margins_by_budget):
    """A fake sweep: bpc(2x32) = 3 + margin, bpc(4x64) = 3 at each budget and seed."""
    st = replace(QUICK, full_sizes=(ModelSize(2, 32, 96), ModelSize(4, 64, 192)), full_budgets=(1e10, 1e11))
    runs = []
    for c, margins in zip(st.full_budgets, margins_by_budget):
        for seed, m in enumerate(margins):
            runs.append({"seed": seed, "C": c, "size": "2x32", "bpc": 3 + m})
            runs.append({"seed": seed, "C": c, "size": "4x64", "bpc": 3.0})
    mean = {c: {"2x32": 3.0, "4x64": 3.0} for c in st.full_budgets}
    sw = {"seeds": [0, 1, 2], "runs": runs, "law": {"alpha": 0.3, "beta": 0.3}, "mean_bpc": mean,
          "best_size": dict.fromkeys(st.full_budgets, "2x32"),
          "wanda_minus_magnitude": {"2x32": [0.1, 0.2, 0.1]}}  # fmt: skip
    return sweep_claims(sw, st), st


def test_claim_one_across_budgets_is_judged_on_each_budgets_interval():
    (c, *_), _ = _sweep([[-0.5, -0.4, -0.6], [-0.3, -0.2, -0.25]])
    assert c.verdict == "holds" and c.details["budgets_where_it_holds"] == [1e10, 1e11]
    (c, *_), _ = _sweep([[-0.5, -0.4, -0.6], [-0.1, 0.3, 0.1]])  # straddles 0.02 at the larger budget
    assert c.verdict == "inconclusive" and c.details["budgets_where_it_holds"] == [1e10]
    assert "holds at 1e+10-1e+10 FLOPs" in c.measured
    (c, *_), _ = _sweep([[-0.5, -0.4, -0.6], [0.3, 0.4, 0.35]])  # the large model wins at the larger budget
    assert c.verdict == "does not hold"
