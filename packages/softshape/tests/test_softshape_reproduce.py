"""The reproduction machinery in reduced form (the whole quick run is marked slow)."""

from __future__ import annotations

import pytest

from softshape.experiments import iou as _iou


def test_iou_closed_form():
    assert _iou((0, 16), (0, 16)) == 1.0
    assert _iou((4, 20), (0, 16)) == pytest.approx(12 / 20)
    assert _iou((20, 36), (0, 16)) == 0.0


@pytest.mark.slow
def test_quick_reproduction_runs(tmp_path):
    pytest.importorskip("aeon")
    from softshape.reproduce import reproduce

    res = reproduce(full=False, out_dir=tmp_path)
    assert len(res.claims) == 6
    assert all(c.measured is not None for c in res.claims)
    assert (tmp_path / "accuracy.png").exists() and (tmp_path / "interpretability.png").exists()


def test_task_runs_one_thread_and_restores(monkeypatch):
    import torch

    from softshape import experiments as rep

    seen = []
    real = rep.interpretability

    def spy(epochs, n_cases, seed=0):
        seen.append(torch.get_num_threads())
        return real(epochs, n_cases, seed)

    monkeypatch.setattr(rep, "interpretability", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = rep.run_task("interp", 2, 40)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert 0.0 <= out["mean_iou"] <= 1.0 and 0.0 <= out["accuracy"] <= 1.0
    assert out["scores"].shape == out["centres"].shape


def test_occlude_replaces_the_span_by_a_line():
    import numpy as np

    from softshape.experiments import occlude

    X = np.arange(20, dtype=np.float32).reshape(1, 1, 20) ** 2
    out = occlude(X, np.array([[5, 10]]))
    np.testing.assert_allclose(out[0, 0, 5:10], np.linspace(16, 100, 7)[1:-1], rtol=1e-6)
    assert np.array_equal(out[0, 0, :5], X[0, 0, :5]) and np.array_equal(out[0, 0, 10:], X[0, 0, 10:])
    edge = occlude(X, np.array([[0, 4]]))  # at the start: the level of the first value after the span
    np.testing.assert_allclose(edge[0, 0, :4], 16.0)


def test_interpretability_claims_are_judged_over_seeds(monkeypatch, tmp_path):
    """Claims 3 and 4 come from the interval over the interpretability seeds (seed_list(seed, 3)): a spread that
    straddles the line is inconclusive, whatever the first seed says."""
    import numpy as np

    import softshape.reproduce as rep

    def fake_tasks(tasks, n_jobs=None, parts=None):
        outs = []
        for t in tasks:
            if t[0] == "fit":
                v = t[3]
                outs.append([{"dataset": t[1], "fold": t[2], "variant": k, "accuracy": 1.0, "n_test": 10, "fit_s": 1.0,
                              "expert_utilisation": [0.5, 0.5]} for k in v])  # fmt: skip
            elif t[0] == "efficiency":
                outs.append({"dataset": t[1], "whole": {}, "layers": {}})
            else:
                s = t[3]
                iou = {3: 0.95, 4: 0.2, 5: 0.9}[s]
                outs.append({"seed": s, "mean_iou": iou, "faithfulness": {"margin": 0.1 + 0.01 * s},
                             "series": np.zeros(4), "scores": np.zeros(2), "centres": np.zeros(2), "span": (0, 1),
                             "window": (0, 1), "accuracy": 1.0})  # fmt: skip
        return outs

    monkeypatch.setattr(rep, "run_tasks", fake_tasks)
    monkeypatch.setattr(rep, "efficiency_ratios", lambda e: {"depth 3: whole model, MoE in every layer": 0.8})
    monkeypatch.setattr(rep, "plot_accuracy", lambda *a: "a.png")
    monkeypatch.setattr(rep, "plot_steps", lambda *a: "s.png")
    monkeypatch.setattr(rep, "plot_interpretability", lambda *a: "i.png")
    monkeypatch.setattr(rep, "QUICK", {**rep.QUICK, "datasets": ["GunPoint"]})
    monkeypatch.setattr(rep, "_beside", lambda ratios, d: "")
    res = rep.reproduce(False, tmp_path, seed=1)
    by = {c.short: c for c in res.claims}
    assert by["top shape IoU with window"].verdict == "inconclusive"
    assert by["top shape IoU with window"].details["seeds"]["per_seed"] == {"3": 0.95, "4": 0.2, "5": 0.9}
    assert by["occlusion top - random"].verdict == "holds"
    assert res.settings["interpretability_seeds"] == [3, 4, 5]


@pytest.mark.parametrize(
    ("soft", "verdict"), [((1.0, 1.0), "holds"), ((1.0, 0.975), "inconclusive"), ((0.975, 0.975), "does not hold")]
)
def test_claim_1_accuracy_part_is_judged_on_the_interval_over_folds(soft, verdict):
    """Dense at 1.0 on both folds; soft - dense per fold: (0, 0) holds, (0, -2.5) straddles -1 pt, (-2.5, -2.5)."""
    from softshape.experiments import FitRows
    from softshape.reproduce import _equal_accuracy

    rows = [{"dataset": "GunPoint", "fold": f, "variant": v, "accuracy": a, "n_test": 40, "fit_s": 1.0}
            for f in (0, 1) for v, a in (("soft", soft[f]), ("dense", 1.0))]  # fmt: skip
    got, spread = _equal_accuracy(FitRows(rows))
    assert got == verdict and spread.n == 2


def _fake_task(kind, *args):
    """A stand-in for :func:`softshape.experiments.run_task` with the shape of its outputs (no training)."""
    if kind == "fit":
        name, fold, variants = args[:3]
        acc = {"soft": 0.95, "hard": 0.9, "dense": 0.95}
        return [{"dataset": name, "fold": fold, "variant": v, "accuracy": acc.get(v, 0.9) - 0.01 * fold, "n_test": 40,
                 "fit_s": 1.0, "expert_utilisation": [0.5, 0.5]} for v in variants]  # fmt: skip
    if kind == "efficiency":
        return {"dataset": args[0], "whole": {}, "layers": {}}
    if kind == "steps":
        return {"dataset": args[0], **{v: {"ratio_median_of_rounds": 1.0} for v in args[1]}}
    s = args[2]
    return {"seed": s, "mean_iou": 0.8 + 0.01 * s, "faithfulness": {"margin": 0.1 + 0.01 * s}, "series": [0.0] * 4,
            "scores": [0.0, 1.0], "centres": [1, 2], "span": [0, 1], "window": [0, 1], "accuracy": 1.0}  # fmt: skip


def test_full_resumes_without_redoing_finished_parts(monkeypatch, tmp_path):
    """A --full killed after some tasks reuses them when run again (they are not run twice); a resumed run's claims
    equal an uninterrupted one's; another seed is another fingerprint."""
    import softshape.experiments as ex
    import softshape.reproduce as rep

    calls: list[str] = []
    budget = {"left": 5}

    def counting(*task):
        if budget["left"] == 0:
            raise KeyboardInterrupt("killed")
        budget["left"] -= 1
        calls.append(ex.task_name(task))
        return _fake_task(*task)

    monkeypatch.setattr(ex, "run_task", counting)
    monkeypatch.setattr(rep, "efficiency_ratios", lambda e: {"depth 3: whole model, MoE in every layer": 0.8})
    for name in ("plot_accuracy", "plot_steps", "plot_interpretability", "plot_rates"):
        monkeypatch.setattr(rep, name, lambda *a: "x.png")
    monkeypatch.setattr(rep, "_beside", lambda ratios, d: "")
    monkeypatch.setattr(rep, "FULL", {**rep.FULL, "datasets": ["GunPoint"], "folds": [0, 1]})
    with pytest.raises(KeyboardInterrupt):
        rep.reproduce(True, tmp_path / "run")
    first = list(calls)
    assert first == ["fit_GunPoint_fold0_shared", "fit_GunPoint_fold0_no_inception", "fit_GunPoint_fold1_shared",
                     "fit_GunPoint_fold1_no_inception", "efficiency_GunPoint"]  # fmt: skip
    calls.clear()
    budget["left"] = 100
    res = rep.reproduce(True, tmp_path / "run")
    assert not set(calls) & set(first) and res.settings["parts"]["reused"] == first
    assert len(calls) == len(res.settings["parts"]["computed"]) == 11 - 5  # 2 folds x 3 fits, 2 timings, 3 interp
    calls.clear()
    fresh = rep.reproduce(True, tmp_path / "fresh")
    assert len(calls) == 11 and [c.measured for c in fresh.claims] == [c.measured for c in res.claims]
    assert [c.verdict for c in fresh.claims] == [c.verdict for c in res.claims]
    by = {c.short: c for c in res.claims}
    assert (
        by["soft - hard accuracy (pt)"].verdict == "holds"
        and by["soft - hard accuracy (pt)"].details["seeds"]["n"] == 2
    )
    calls.clear()
    rep.reproduce(True, tmp_path / "run", seed=1)
    assert len(calls) == 11
