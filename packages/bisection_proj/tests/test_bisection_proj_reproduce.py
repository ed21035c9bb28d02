"""The reproduction machinery in a reduced form (the full quick run is `icml25 reproduce bisection_proj`)."""

from __future__ import annotations

import pytest

from bisection_proj.experiments import PipelineSettings, run_pipeline
from bisection_proj.problems import ConvexQP
from bisection_proj.reproduce import _headline


def test_tiny_pipeline_is_consistent():
    pytest.importorskip("cvxpy")
    prob = ConvexQP.random(n=12, n_eq=5, n_ineq=5, seed=0, n_subsets=50)
    s = PipelineSettings(n_train=256, n_test=24, solver_iters=30, solver_hidden=16, ipnn_iters=60, ipnn_hidden=16)
    r = run_pipeline(prob, s)
    assert 0 <= r["feas_raw"] <= 1 and r["n_infeasible"] == round((1 - r["feas_raw"]) * 24)
    # every row whose prediction or interior point is feasible comes out feasible
    assert r["feas_bp"] >= max(r["feas_raw"], r["ip_validity"]) - 1e-12
    assert r["gap_proj"] >= 0 and r["dist_proj"] <= r["dist_bp"] + 1e-6  # the orthogonal projection is nearest
    assert r["history"]["step"][0] == 0 and len(r["history"]["gamma"]) == len(r["history"]["step"])


BASE = {"feas_raw": 0.5, "feas_bp": 1.0, "speedup_post": 200.0, "gap_raw": 0.02, "gap_bp": 0.03, "gap_proj": 0.02,
        "gap_ip": 1.0, "dist_bp": 0.2, "dist_proj": 0.05}  # fmt: skip


def _runs(**per_seed):
    """Two seeds' results: BASE with each key's list of per-seed values."""
    runs = [dict(BASE), dict(BASE)]
    for k, vals in per_seed.items():
        for r, v in zip(runs, vals):
            r[k] = v
    return runs


@pytest.mark.parametrize(
    ("change", "verdicts"),
    [
        ({}, ["holds", "holds", "holds"]),
        ({"feas_bp": [1.0, 0.99]}, ["does not hold", "holds", "holds"]),  # one unrepaired point at one seed
        ({"speedup_post": [10.0, 12.0]}, ["holds", "does not hold", "holds"]),
        ({"speedup_post": [20.0, 400.0]}, ["holds", "inconclusive", "holds"]),  # the interval straddles 50x
        ({"gap_bp": [0.2, 0.21]}, ["holds", "holds", "does not hold"]),
        ({"gap_bp": [0.03, 0.12]}, ["holds", "holds", "inconclusive"]),
    ],
)
def test_headline_verdicts_come_from_the_interval_over_seeds(change, verdicts):
    claims = _headline(_runs(**change), [0, 1], "QP 50/25/25")
    assert [c.verdict for c in claims] == verdicts
    assert all("2 seeds" in c.measured for c in claims if c.details.get("seeds", {}).get("n") == 2)


def test_headline_is_not_judged_when_the_raw_solver_is_already_feasible():
    claims = _headline(_runs(feas_raw=[1.0, 0.5]), [0, 1], "QP 50/25/25")
    assert claims[0].verdict == "shown" and "nothing to repair" in claims[0].measured


@pytest.mark.slow  # ~20 CPU-s; the Parts mechanism itself is tested by default in icml25-shared
def test_full_resumes_without_redoing_finished_parts(tmp_path, monkeypatch):
    """A --full killed inside the JCCIM pipelines reuses the finished QP/QCQP parts when run again."""
    pytest.importorskip("cvxpy")
    import bisection_proj.reproduce as rep

    tiny = PipelineSettings(n_train=64, n_test=8, solver_iters=2, solver_hidden=8, ipnn_iters=2, ipnn_hidden=8)
    calls: list[str] = []
    real = rep.run_pipeline

    def counting(prob, s):
        calls.append(type(prob).__name__)
        if type(prob).__name__ == "JCCIM" and kill:
            raise KeyboardInterrupt("killed")
        return real(prob, s)

    monkeypatch.setattr(rep, "run_pipeline", counting)
    monkeypatch.setattr(rep, "ratio_steps", lambda prob, seed=1: {"0.5": {"steps": 3}, "0.9": {"steps": 5}})
    kill = True
    with pytest.raises(KeyboardInterrupt):
        rep.reproduce(True, tmp_path, setup=tiny)
    first = list(calls)
    assert first.count("ConvexQCQP") == 3 and first.count("JCCIM") == 1
    calls.clear()
    kill = False
    res = rep.reproduce(True, tmp_path, setup=tiny)
    # the quick pipelines always run; the six finished QP/QCQP 100/50/50 parts are reused, JCCIM runs
    assert calls.count("ConvexQCQP") == 0 and calls.count("JCCIM") == 3 and calls.count("ConvexQP") == 3
    assert len(res.settings["parts"]["reused"]) == 6
    again = rep.reproduce(True, tmp_path, setup=tiny)
    # the quick claims are re-measured (their timing moves); every claim from reused parts is the same
    assert [c.measured for c in again.claims[4:]] == [c.measured for c in res.claims[4:]]
    assert len(again.settings["parts"]["reused"]) == 11  # 9 pipelines, the toys and the ρ steps
