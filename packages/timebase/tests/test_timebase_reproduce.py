"""The reproduce entry point in reduced form (one seed, one epoch); the real runs are `icml25 reproduce`."""

from __future__ import annotations

import json

import pytest

from timebase.experiments import Setup
from timebase.reproduce import reproduce


def test_quick_reproduce_reduced(tmp_path, etth1_data) -> None:
    res = reproduce(False, tmp_path, setup=Setup(seeds=(0,), epochs=1))
    res.save_json(tmp_path / "result_quick.json")  # what the icml25 command writes after stamping
    assert res.package == "timebase" and res.mode == "quick"
    head = res.claims[0]
    assert head.details["param_ratio"] == pytest.approx(138432 / 214)
    assert 0.3 < head.details["dlinear_closed_form"]["mse"] < 0.4
    exact = [c for c in res.claims if c.rule == "exact"]
    assert len(exact) == 2 and all(c.holds for c in exact)
    elec = next(c for c in res.claims if c.short == "Electricity params/MACs")
    assert elec.holds is None and "396 params = 0.396K" in elec.measured  # shown, not judged by 396 // 10 == 39
    assert (tmp_path / "etth1_h96_quick.png").stat().st_size > 0
    saved = json.loads((tmp_path / "result_quick.json").read_text())
    assert saved["claims"][0]["verdict"] in ("holds", "does not hold")


@pytest.mark.slow
def test_full_reproduce_reduced(tmp_path, etth1_data) -> None:
    res = reproduce(
        True, tmp_path, setup=Setup(seeds=(0,), epochs=1, horizons=(96,), datasets=("ETTh1",), patch_epochs=1)
    )
    texts = [c.text for c in res.claims]
    assert any("PatchTST + TimeBase reducer: MACs" in t for t in texts)
    assert (tmp_path / "ett_full.png").exists()
