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


def test_full_resumes_without_retraining_finished_parts(tmp_path, monkeypatch, etth1_data) -> None:
    """A --full killed in its PatchTST runs reuses every finished TimeBase training when run again (the headline's
    ETTh1 H=96 runs are the table's); PatchTST is replaced by a stand-in (tens of CPU-s per epoch)."""
    import timebase.experiments as ex

    calls: list[tuple] = []
    real = ex.train_timebase
    kill = True

    def counting(splits, dataset, horizon, seed, epochs=None):
        calls.append((dataset, horizon, seed))
        return real(splits, dataset, horizon, seed, epochs)

    def patchtst(splits, basis_num, seed, epochs):
        calls.append(("patchtst", basis_num, seed))
        if kill:
            raise KeyboardInterrupt("killed")
        return {"mse": 0.4 if basis_num is None else 0.41, "macs": 1000 if basis_num is None else 200, "params": 1}

    monkeypatch.setattr(ex, "train_timebase", counting)
    monkeypatch.setattr(ex, "_train_patchtst", patchtst)
    setup = Setup(seeds=(0, 1), epochs=1, horizons=(96, 192), datasets=("ETTh1",))
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path, setup=setup)
    # the headline trains ETTh1 H=96 once per seed; the table reuses them and trains H=192
    assert calls == [("ETTh1", 96, 0), ("ETTh1", 96, 1), ("ETTh1", 192, 0), ("ETTh1", 192, 1), ("patchtst", None, 0)]
    calls.clear()
    kill = False
    res = reproduce(True, tmp_path, setup=setup)
    assert calls == [("patchtst", None, 0), ("patchtst", 8, 0)]
    assert res.settings["parts"]["computed"] == ["patchtst_seed0", "patchtst_reduced_seed0"]
    assert len(res.settings["parts"]["reused"]) == 6  # 2 headline runs, then 4 table runs (2 of them the same)
    by_short = {c.short: c for c in res.claims}
    assert by_short["ETTh1 H=96 MSE vs DLinear"].details["seeds"]["n"] == 2
    assert by_short["PatchTST reducer MACs cut"].verdict == "holds"  # 1000 -> 200 MACs
    calls.clear()
    again = reproduce(True, tmp_path, setup=setup)
    assert calls == [] and [c.measured for c in again.claims] == [c.measured for c in res.claims]


def test_headline_verdict_comes_from_the_interval_over_seeds(tmp_path, monkeypatch) -> None:
    import timebase.reproduce as rp
    from timebase import TimeBaseConfig

    def fake(mses):
        def headline(setup, download=False, part=None):
            return {"timebase_runs": [{"mse": m, "mae": 0.4} for m in mses],
                    "dlinear_closed_form": {"mse": 0.40, "mae": 0.41}, "seasonal_naive": {"mse": 0.9, "mae": 0.7},
                    "timebase_params": 214, "dlinear_params": 138432,
                    "timebase_config": TimeBaseConfig.preset("ETTh1", 96)}  # fmt: skip

        return headline

    monkeypatch.setattr(rp, "plot_headline", lambda h, out: tmp_path / "x.png")
    verdicts = {}
    for name, mses in {"holds": (0.39, 0.40, 0.395), "fails": (0.45, 0.46, 0.455), "wide": (0.38, 0.44, 0.41)}.items():
        monkeypatch.setattr(rp, "headline", fake(mses))
        verdicts[name] = rp.reproduce(False, tmp_path, setup=Setup(seeds=(0, 1, 2))).claims[0].verdict
    assert verdicts == {"holds": "holds", "fails": "does not hold", "wide": "inconclusive"}
    monkeypatch.setattr(rp, "headline", fake((0.39, 0.40, 0.395)))
    seeded = rp.reproduce(False, tmp_path, seed=1, setup=Setup(seeds=(0, 1, 2)))
    assert seeded.settings["seeds"] == [3, 4, 5]  # seed_list(1, 3)
