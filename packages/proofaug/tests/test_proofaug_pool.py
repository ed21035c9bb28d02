"""ProverPool (two workers give the results of one), prove() with budget and resumable log, the CLI, and a coqtop
crash that must surface as ``backend_error`` (never a success)."""

from __future__ import annotations

import json
import os
import signal
from functools import partial

import pytest

from proofaug import ProofAug, ProofAugConfig
from proofaug.backends.coq import CoqBackend, coq_available
from proofaug.cli import main as cli_main
from proofaug.pool import Job, ProverPool, pass_at_k, prove
from proofaug.suite import load_problems, load_suite

pytestmark = pytest.mark.skipif(not coq_available(), reason="coqtop not installed (apt-get install coq)")
CFG = ProofAugConfig(hammers=("lia", "nia", "ring", "auto", "easy"), hammer_timeout=1.0, step_timeout=5.0)


WARM = partial(CoqBackend, fresh_check=False)


def _jobs(n):
    items = [it for it in load_suite(quick=True) if it.kind in ("K0", "K2", "K3")][:n]
    return [Job(it.problem, it.proposal, m, key=it.id) for it in items for m in ("plain", "proofaug")]


def _same(jobs):
    with ProverPool(WARM, 1, config=CFG) as one:
        a = one.map(jobs)
    with ProverPool(WARM, 2, config=CFG) as two:
        b = two.map(jobs, group=lambda j: j.key)
    assert [(r.success, r.stage, r.proof) for r in a] == [(r.success, r.stage, r.proof) for r in b]
    assert any(r.success for r in a) and not all(r.success for r in a)


def test_two_workers_equal_one():
    _same(_jobs(3))


def test_memo_stats_of_consecutive_in_process_pools():
    # the second pool builds a new backend in this process, which resets the memo statistics mid-map
    jobs = _jobs(3)
    stats = []
    for _ in range(2):
        with ProverPool(WARM, 1, config=CFG) as pool:
            pool.map(jobs)
            stats.append(pool.memo_stats())
    assert stats[0] == stats[1] and stats[0][1] > 0


@pytest.mark.slow
def test_two_workers_equal_one_quick_subset():
    items = load_suite(quick=True)
    _same([Job(it.problem, it.proposal, m, key=it.id) for it in items for m in ("plain", "first_error", "proofaug")])


def test_prove_budget_and_resume(tmp_path, coq):
    prob = load_problems()["alg_linear"]
    props = iter(["Proof. apply nothing. Qed.", "Proof. intros x h. lia. Qed.", "Proof. lia. Qed."])
    calls = []

    def proposer(prompt, n=1):
        calls.append(prompt)
        return [next(props)]

    pa = ProofAug(coq, ProofAugConfig(hammers=(), use_sorry=False))  # plain checking
    log = tmp_path / "log.jsonl"
    res = prove(prob, proposer, pa, budget=1, log=log)
    assert not res.success and res.attempts == 1 and len(calls) == 1
    res = prove(prob, proposer, pa, budget=5, log=log)  # resumes: one attempt already made
    assert res.success and res.attempts == 2 and len(calls) == 2
    assert len(log.read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="budget"):
        prove(prob, proposer, pa, budget=0)


def test_pass_at_k_closed_form():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_cli_run_and_cumulative(tmp_path, capsys):
    prob = load_problems()["alg_mul"]
    rows = [
        {"id": "a", "problem": prob.name, "header": prob.header, "statement": prob.statement, "proposal": p}
        for p in ("Proof. intros x y hx hy. subst. apply bogus. Qed.", "Proof. intros. subst. reflexivity. Qed.")
    ]
    rows[1]["id"] = "b"
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("\n".join(json.dumps(r) for r in rows))
    assert cli_main(["run", "--input", str(inp), "--out", str(out), "--hammers", "lia,easy"]) == 0
    res = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["success"] for r in res] == [True, True] and res[0]["stage"] == "init_atp"
    cli_main(["run", "--input", str(inp), "--out", str(out)])  # resumable: nothing left to do
    assert len(out.read_text().splitlines()) == 2
    assert cli_main(["cumulative", str(out)]) == 0
    assert "cumulative 1/1" in capsys.readouterr().out


def test_coqtop_crash_is_backend_error_then_restart():
    prob = load_problems()["alg_linear"]
    with CoqBackend(fresh_check=False) as backend:
        pa = ProofAug(backend, CFG)
        assert pa.augment(prob, "Proof. intros x h. lia. Qed.").success

        real_run = backend.run

        def crashing(state, sentence, timeout):
            os.killpg(backend._proc.pid, signal.SIGKILL)  # our own coqtop only
            backend._proc.wait()
            return real_run(state, sentence, timeout)

        backend.run = crashing
        res = pa.augment(prob, "Proof. intros x h. lia. Qed.")
        assert not res.success and res.stage == "backend_error" and "restarted" in res.message
        backend.run = real_run
        assert pa.augment(prob, "Proof. intros x h. lia. Qed.").success and backend.restarts == 1


def test_any_executor_plugs_in():
    from concurrent.futures import ThreadPoolExecutor

    jobs = _jobs(2)
    with ProverPool(WARM, 1, config=CFG) as one:
        a = one.map(jobs)
    with ThreadPoolExecutor(2) as ex, ProverPool(WARM, 2, executor=ex, config=CFG) as pool:
        b = pool.map(jobs, group=lambda j: j.key)  # one backend per thread
    assert [(r.success, r.proof) for r in a] == [(r.success, r.proof) for r in b]
