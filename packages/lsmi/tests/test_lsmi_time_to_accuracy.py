"""The time-to-accuracy comparison (`--full`'s efficiency-vs-PID-Batch claims and the benchmark)."""

import numpy as np
import pytest

from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import noisy_discrete
from lsmi.experiments import accuracy_joint, common_accuracy, time_to_accuracy
from lsmi.reproduce import _pid_batch_claim


def _row(lsmi_s, curve, lsmi_err=0.01, c=10):
    """A time_to_accuracy row: LSMI's fit (CPU-s, error) and PID-Batch's error curve [(CPU-s, error), ...]."""
    return {
        "C": c,
        "n": 4000,
        "tol": 0.05,
        "lsmi": {"cpu_s": lsmi_s, "error": lsmi_err, "time_to_tol": lsmi_s if lsmi_err <= 0.05 else None},
        "pid_batch": {"curve": curve, "cpu_s": curve[-1][0], "error": curve[-1][1]},
        "pid_cvx": {"time_to_tol": 0.1},
    }


# the committed --full run's C = 10 cell: PID-Batch plateaus at 0.077, never within 0.05
PLATEAU = [(0.88, 0.09106), (6.57, 0.07851), (11.91, 0.07729), (17.25, 0.07718), (22.53, 0.07686)]


def test_common_accuracy_compares_at_a_level_both_reach_not_at_a_budget():
    ca = common_accuracy(_row(5.91, PLATEAU))
    # the level is PID-Batch's floor (+ 0.001), not 0.05; its time is when it gets there (11.9 s), not its budget
    assert ca["floor_limited"] and ca["level"] == pytest.approx(0.07786)
    assert ca["pid_batch_s"] == 11.91 and ca["ratio"] == pytest.approx(11.91 / 5.91)
    # a longer run on the plateau changes nothing (the old budget ratio grew with every extra epoch)
    longer = common_accuracy(_row(5.91, [*PLATEAU, (40.0, 0.07690), (60.0, 0.07688)]))
    assert longer["pid_batch_s"] == 11.91
    # PID-Batch within 0.05: compared at 0.05 (its first point there)
    ca = common_accuracy(_row(2.0, [(1.0, 0.09), (4.0, 0.04), (8.0, 0.03)]))
    assert (ca["level"], ca["pid_batch_s"], ca["floor_limited"]) == (0.05, 4.0, False)
    # LSMI worse than both: the level is LSMI's error
    ca = common_accuracy(_row(2.0, [(1.0, 0.09), (4.0, 0.07)], lsmi_err=0.08))
    assert ca["level"] == 0.08 and ca["pid_batch_s"] == 4.0


def test_pid_batch_claim_is_judged_on_the_interval_over_seeds():
    fast = {s: [_row(1.0, PLATEAU), _row(2.0, PLATEAU, c=30)] for s in (0, 1, 2)}  # 11.9x, 6.0x: min 5.96
    c = _pid_batch_claim(fast)
    assert c.verdict == "holds" and c.details["seeds"]["mean"] == pytest.approx(11.91 / 2.0)
    slow = {s: [_row(5.91, PLATEAU)] for s in (0, 1, 2)}  # 2.0x at every seed
    assert _pid_batch_claim(slow).verdict == "does not hold"
    mixed = {0: [_row(1.0, PLATEAU)], 1: [_row(5.91, PLATEAU)], 2: [_row(3.0, PLATEAU)]}  # 11.9x, 2.0x, 4.0x
    assert _pid_batch_claim(mixed).verdict == "inconclusive"


def test_extra_lsmi_variant_is_the_same_fit_on_the_same_samples():
    pytest.importorskip("sklearn")
    r = time_to_accuracy(2, 600, pid_batch_epochs=0, extra_lsmi={"gmm": {"density": "gmm"}})
    assert {"lsmi", "lsmi_gmm", "pid_batch", "pid_cvx"} <= set(r)
    assert r["lsmi_gmm"]["options"] == {"density": "gmm"} and r["lsmi"]["options"] == {}
    assert len(r["pid_batch"]["curve"]) == 1  # epochs=0: the point after its classifiers only
    x1, x2, y = noisy_discrete(accuracy_joint(2), 600, seed=0)
    est = LSMIEstimator(LSMIConfig(n_classes=2, density="gmm")).fit(x1, x2, y, verbose=False)
    np.testing.assert_allclose(r["lsmi_gmm"]["means"], est.score(x1, x2, y), atol=1e-9)
    for key in ("lsmi", "lsmi_gmm"):
        ref = np.array(r[key]["reference"])
        assert r[key]["error"] == pytest.approx(np.abs(np.array(r[key]["means"]) - ref).max())


def test_time_to_accuracy_plot_draws_each_run(tmp_path):
    def row(c, n, lsmi_cpu, err):
        r = _row(lsmi_cpu, [(1.0, 0.09), (20.0, 0.08)], lsmi_err=err, c=c) | {"n": n}
        r["pid_cvx"] |= {"cpu_s": 0.05, "error": 0.03}
        return r

    from lsmi.experiments import plot_time_to_accuracy

    runs = {"KNIFE": [row(2, 1000, 3.0, 0.01), row(10, 1000, 5.0, 0.04)], "GMM": [row(2, 1000, 0.4, 0.01)]}
    path = plot_time_to_accuracy(tmp_path, runs)
    assert path.endswith("time_to_accuracy.png")
    assert (tmp_path / "time_to_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gate_claim_verdict_comes_from_the_interval_over_seeds():
    from lsmi.reproduce import EXACT, _gate_claims

    def means(off):  # the exact gates shifted by ``off`` nats on OR's R
        return {"xor": list(EXACT["xor"]), "or": [EXACT["or"][0] + off, *EXACT["or"][1:]]}

    c = _gate_claims({0: means(0.01), 1: means(0.012), 2: means(0.011)})[2]
    assert c.verdict == "holds" and c.details["rule_threshold"] == 0.05
    assert _gate_claims({0: means(0.08), 1: means(0.09), 2: means(0.085)})[2].verdict == "does not hold"
    assert _gate_claims({0: means(0.01), 1: means(0.09), 2: means(0.04)})[2].verdict == "inconclusive"


def _fake_experiments(monkeypatch, calls=None):
    """Replace the --full experiments by fixed rows of an earlier --full run (``tests/full_rows.json``: its efficiency
    sweep and time-to-accuracy cells), counting the calls in ``calls``."""
    import json
    from pathlib import Path

    import lsmi.experiments as ex

    fixed = json.loads((Path(__file__).parent / "full_rows.json").read_text())
    gauss = {0.9: {"estimated": [0.0, 0.0, 0.0, 0.011], "exact_plugin": [0.0, 0.0, 0.0, 0.007]},
             0.5: {"estimated": [0.0, 0.0, 0.0, 0.057], "exact_plugin": [0.0, 0.0, 0.0, 0.062]}}  # fmt: skip
    real = {"digits": [2.04, 0.01, 0.02, 0.20], "digits_shuffled": [-0.03, 2.08, -0.0, -0.13],
            "breast_cancer": [0.52, -0.03, 0.04, 0.0]}  # fmt: skip
    calls = [] if calls is None else calls

    def counted(name, value):
        def fn(*args, **kw):
            calls.append((name, kw.get("seed")))
            return value(*args) if callable(value) else value

        return fn

    monkeypatch.setattr(ex, "gate_means", counted("gates", {"xor": [0.0, 0.0, 0.0, 0.69], "or": [0.21, 0, 0, 0.35]}))
    monkeypatch.setattr(ex, "gaussian_sweep", counted("gaussian", gauss))
    monkeypatch.setattr(ex, "real_data_means", counted("real", real))
    monkeypatch.setattr(ex, "efficiency_sweep", counted("efficiency", fixed["efficiency"]))
    tta = fixed["time_to_accuracy"]
    monkeypatch.setattr(ex, "time_to_accuracy", counted("tta", lambda c, n: next(r for r in tta if r["C"] == c)))
    return calls


def test_full_reproduction_path_runs_on_fixed_rows(tmp_path, monkeypatch):
    """The --full claim code end to end, with the experiments replaced by an earlier run's rows (no training):
    three seeds, the Gaussian, digits, efficiency and both PID-Batch claims, with the verdicts the rules give."""
    from lsmi.reproduce import reproduce

    _fake_experiments(monkeypatch)
    res = reproduce(True, tmp_path, seed=0)
    got = {c.short: c.verdict for c in res.claims}
    assert got["PID-Batch/LSMI time ≥ 3x"] == "does not hold"  # 2.0x at C = 10 at every (identical) seed
    assert got['PID-Batch/LSMI time ≥ 3x (density="gmm")'] == "holds"  # 13.7x
    assert got["Gaussian vs exact plug-in"] == "holds" and got["digits halves: R dominant"] == "holds"
    assert res.settings["seeds"] == [0, 1, 2]


def test_full_resumes_without_redoing_finished_parts(tmp_path, monkeypatch):
    """A --full killed in its time-to-accuracy runs reuses every finished unit when run again; the claims of a
    resumed run equal those of an uninterrupted one."""
    from lsmi.reproduce import reproduce

    calls = _fake_experiments(monkeypatch)
    import lsmi.experiments as ex

    finished = ex.time_to_accuracy
    state = {"left": 2}

    def dies(*args, **kw):
        if state["left"] == 0:
            raise KeyboardInterrupt("killed")
        state["left"] -= 1
        return finished(*args, **kw)

    monkeypatch.setattr(ex, "time_to_accuracy", dies)
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path / "run", seed=0)
    assert sorted({n for n, _ in calls}) == ["efficiency", "gates", "gaussian", "real", "tta"]
    calls.clear()
    state["left"] = 100
    res = reproduce(True, tmp_path / "run", seed=0)
    # only the four time-to-accuracy units not finished before run: (C=10, 30) x seeds 1, 2
    assert calls == [("tta", 1), ("tta", 1), ("tta", 2), ("tta", 2)]
    assert len(res.settings["parts"]["reused"]) == 12 and len(res.settings["parts"]["computed"]) == 4
    calls.clear()
    fresh = reproduce(True, tmp_path / "fresh", seed=0)
    assert len(calls) == 16 and [c.measured for c in fresh.claims] == [c.measured for c in res.claims]
    assert [c.verdict for c in fresh.claims] == [c.verdict for c in res.claims]


def test_pid_batch_stopped_at_tol_is_a_prefix_of_the_whole_run_with_the_same_common_accuracy():
    whole = time_to_accuracy(2, 600, pid_batch_epochs=3)
    cut = time_to_accuracy(2, 600, pid_batch_epochs=3, pid_batch_stop_at_tol=True)
    full_err = [e for _, e in whole["pid_batch"]["curve"]]
    cut_err = [e for _, e in cut["pid_batch"]["curve"]]
    assert whole["pid_batch"]["stopped_at_tol"] is False and cut["pid_batch"]["stopped_at_tol"] is True
    # the same training up to the first epoch within 0.05, then nothing more
    first = next(i for i, e in enumerate(full_err) if e <= 0.05)
    assert len(full_err) > first + 1  # the whole run goes on past it (else the test shows nothing)
    np.testing.assert_allclose(cut_err, full_err[: first + 1], atol=1e-12)
    a, b = common_accuracy(whole), common_accuracy(cut)
    assert a["level"] == b["level"] and a["floor_limited"] == b["floor_limited"] is False
