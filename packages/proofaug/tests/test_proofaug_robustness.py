"""Calls that used to hang or mislead: a Lean problem on CoqBackend, a header without its period, unbalanced
proofs (each must return within its configured timeouts: guarded by a wall-clock alarm, not a timing assertion),
body-only proposals, and the proposer contract."""

from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest
from conftest import needs_coq

from proofaug import CoqBackend, Problem, ProofAug, ProofAugConfig
from proofaug.pool import prove
from proofaug.proposers import check_proposals

H = "From Coq Require Import Arith Lia."
GOOD = Problem("g", H, "Theorem g : forall n : nat, n + 0 = n.")
CFG = ProofAugConfig(hammers=("lia", "auto"), hammer_timeout=1.0, step_timeout=2.0)
GUARD_S = 90  # far above the configured timeouts (2 s steps, 5 s watchdog) plus coqtop start-up under load


class WallClockExceeded(AssertionError):
    pass


@contextmanager
def wall_clock_guard(seconds: int):
    """Fail (instead of hanging the suite) when the block runs past ``seconds``."""

    def _raise(*_):
        raise WallClockExceeded(f"call still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def fast_coq():
    pytest.importorskip("proofaug")
    from proofaug.backends.coq import coq_available

    if not coq_available():
        pytest.skip("coqtop not installed (apt-get install coq)")
    backend = CoqBackend(fresh_check=False, watchdog=5.0)
    yield backend
    backend.close()


def test_lean_problem_on_coq_backend_fails_fast(fast_coq):
    lean = Problem("t", "import Mathlib", "theorem t (a : ℕ) (h : a = 2) : a + a = 4", language="lean")
    with wall_clock_guard(GUARD_S):
        with pytest.raises(ValueError, match="language='lean'.*LeanReplBackend"):
            ProofAug(fast_coq, CFG).augment(lean, ":= by\n  omega")
        with pytest.raises(ValueError, match="CoqBackend runs Coq problems only"):
            fast_coq.check(lean, ":= by omega")


def test_header_without_period_is_rejected_at_construction():
    with pytest.raises(ValueError, match="header must end every sentence with a period.*Require Import Arith Lia"):
        Problem("t", "Require Import Arith Lia", "Theorem t : 1 = 1.")


UNBALANCED = [
    "Proof. intros n. { lia. Qed.",
    "Proof. intros n. (* lia. Qed.",
    'Proof. intros n. idtac "abc. lia. Qed.',
    "Proof. intros n. apply (f_equal (fun x => x). Qed.",
    "Proof. intros n. } } lia. Qed.",
    "Proof. intros n. lia",
]


@needs_coq
@pytest.mark.parametrize("text", UNBALANCED)
def test_unbalanced_proofs_return_within_their_timeouts(fast_coq, text):
    with wall_clock_guard(GUARD_S):
        res = ProofAug(fast_coq, CFG).augment(GOOD, text)
        chk = fast_coq.check(GOOD, text)
    assert res.stage in ("init_proof", "init_atp", "coarse_atp", "failed")
    assert res.success or res.message
    assert not chk.ok and chk.message  # none of these texts is a complete proof as written


@needs_coq
def test_body_only_proposal_equals_the_same_body_in_proof_qed(fast_coq):
    pa = ProofAug(fast_coq, CFG)
    body = pa.augment(GOOD, "intros n. lia.")
    wrapped = pa.augment(GOOD, "Proof. intros n. lia. Qed.")
    assert body.success and wrapped.success and body.stage == wrapped.stage == "init_proof"
    assert body.proof.startswith("Proof.\n") and "Proof.intros" not in body.proof


def test_proposer_contract():
    assert check_proposals(["a", "b"], 2) == ["a", "b"]
    assert check_proposals((), 1) == []
    with pytest.raises(TypeError, match="proposer must return a list of proof strings.*got str 'intros"):
        check_proposals("intros n. lia.", 1)
    with pytest.raises(TypeError, match="got NoneType None at index 0"):
        check_proposals([None], 1)
    with pytest.raises(ValueError, match="at most n=1 proposals, got 2"):
        check_proposals(["a", "b"], 1)


@needs_coq
def test_erp_and_prove_validate_the_proposer(fast_coq):
    sum_p = Problem(
        "s",
        H + "\nFixpoint sum_n (n : nat) : nat := match n with 0 => 0 | S k => S k + sum_n k end.",
        "Theorem s : forall n : nat, 2 * sum_n n = n * (n + 1).",
    )
    erp_cfg = ProofAugConfig(hammers=("lia",), hammer_timeout=1.0, step_timeout=2.0, erp=True)
    with pytest.raises(TypeError, match=r"proposer \(ERP\) must return a list.*NoneType None at index 0"):
        ProofAug(fast_coq, erp_cfg, proposer=lambda prompt, n: [None]).augment(sum_p, "Proof. intros n. lia. Qed.")
    with pytest.raises(TypeError, match=r"proposer \(ERP\) must return a list.*got str"):
        ProofAug(fast_coq, erp_cfg, proposer=lambda prompt, n: "induction n.").augment(
            sum_p, "Proof. intros n. lia. Qed."
        )
    with pytest.raises(TypeError, match="proposer must return a list.*got str"):
        prove(GOOD, lambda prompt, n: "Proof. intros n. lia. Qed.", ProofAug(fast_coq, CFG), budget=1)
