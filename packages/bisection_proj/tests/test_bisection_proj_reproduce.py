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


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        ({}, True),
        ({"feas_bp": 0.99}, False),
        ({"feas_raw": 1.0}, False),
        ({"speedup_post": 10.0}, False),
        ({"gap_bp": 0.2}, False),
    ],  # fmt: skip
)
def test_headline_verdict_rule(change, holds):
    r = {"feas_raw": 0.5, "feas_bp": 1.0, "speedup_post": 200.0, "gap_raw": 0.02, "gap_bp": 0.03, "gap_proj": 0.02,
         "gap_ip": 1.0, "dist_bp": 0.2, "dist_proj": 0.05}  # fmt: skip
    r.update(change)
    assert _headline(r, "QP").holds is holds
