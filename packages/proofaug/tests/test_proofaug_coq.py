"""ProofAug on Coq: MCSP rules, cuts, equivalences, soundness, accounting, budgets, ERP (live coqtop/coqc)."""

from __future__ import annotations

import pytest

from proofaug import CoqBackend, Problem, ProofAug, ProofAugConfig
from proofaug.augment import Cut
from proofaug.backends.base import StatementError
from proofaug.backends.coq import hammer_available
from proofaug.structure import parse_proof

H = (
    "From Coq Require Import Arith Lia.\n"
    "Fixpoint sum_n (n : nat) : nat := match n with 0 => 0 | S k => S k + sum_n k end."
)
P = Problem("t", H, "Theorem t : forall n : nat, n + 0 = n /\\ (True /\\ 2 + 2 = 4).")
SUM = Problem("sum", H, "Theorem sum : forall n : nat, 2 * sum_n n = n * (n + 1).")
LADDER = ProofAugConfig(hammers=("lia", "nia", "ring", "auto", "easy"), hammer_timeout=1.0, step_timeout=5.0)

CORRECT = "Proof.\n  intros n.\n  split.\n  - lia.\n  - split.\n    + exact I.\n    + reflexivity.\nQed."
WRONG_LEAF = CORRECT.replace("- lia.", "- apply no_such_lemma.")
EXTRA_BULLET = CORRECT.replace("Qed.", "  - lia.\nQed.")
MISSING_CASE = "Proof.\n  intros n.\n  split.\n  - lia.\nQed."
INLINE = "Proof.\n  intros n.\n  assert (h : n + 0 = n) by apply bogus.\n  split.\n  - exact h.\n  - auto.\nQed."
SUM_NEEDS_INDUCTION = "Proof.\n  intros n.\n  simpl.\n  lia.\nQed."
SUM_OK = "Proof.\n  induction n as [|k IH].\n  - reflexivity.\n  - simpl. nia.\nQed."


def kept(semi):
    return [s.code for s in semi.body]


def test_wrong_leaf_becomes_exactly_one_admit(coq):
    semi = ProofAug(coq, LADDER).mcsp(P, WRONG_LEAF)
    original = [s.code for s in _script_text(WRONG_LEAF).body]
    assert kept(semi) == [c if c != "apply no_such_lemma." else "admit." for c in original]
    assert len(semi.holes) == 1 and kept(semi)[semi.holes[0]] == "admit."


def test_extra_bullet_dropped_and_missing_case_admitted(coq):
    pa = ProofAug(coq, LADDER)
    assert kept(pa.mcsp(P, EXTRA_BULLET)) == kept(pa.mcsp(P, CORRECT))
    semi = pa.mcsp(P, MISSING_CASE)
    assert kept(semi) == ["intros n.", "split.", "-", "lia.", "-", "admit."]  # R4: next bullet, then admit
    assert semi.holes == [5]


def test_inline_keeps_its_assert(coq):
    semi = ProofAug(coq, LADDER).mcsp(P, INLINE)
    assert kept(semi)[1] == "assert (h : n + 0 = n) by admit." and semi.holes == [1]
    res = ProofAug(coq, LADDER).augment(P, INLINE)
    assert res.success and "assert (h : n + 0 = n) by lia." in res.proof and res.stage == "init_atp"


def test_failing_statement_raises(coq):
    bad = Problem("b", H, "Theorem b : forall n : nat, n + true = n.")
    with pytest.raises(StatementError, match="b"):
        ProofAug(coq, LADDER).augment(bad, "Proof. auto. Qed.")


def test_mcsp_is_maximal(coq):
    pa = ProofAug(coq, LADDER)
    for proposal in (WRONG_LEAF, INLINE, SUM_NEEDS_INDUCTION):
        prob = SUM if proposal is SUM_NEEDS_INDUCTION else P
        semi = pa.mcsp(prob, proposal)
        original = {s.code for s in pa.mcsp(prob, proposal.replace("bogus", "bogus")).script.body}
        assert semi.holes
        for h in semi.holes:
            restored = [s.code for s in semi.body]
            back = [c for c in original if c not in restored and c.split(" by ")[0] == restored[h].split(" by ")[0]]
            restored[h] = back[0] if back else ("apply no_such_lemma." if proposal is WRONG_LEAF else "lia.")
            # restoring the sentence the MCSP replaced breaks plain execution (None) ...
            assert pa._mcsp(prob, _script(" ".join(restored)), "holes") is None
        # ... while the MCSP itself executes plainly, holes allowed
        assert pa._mcsp(prob, _script(" ".join(kept(semi))), "holes") is not None


def _script(body):
    return parse_proof("Proof. " + body + " Qed.")


def _script_text(text):
    return parse_proof(text)


@pytest.mark.parametrize("mode", ["partial_first", "entry", "entry_then_partial"])
def test_cuts_order_coarser_dedup_theorem_last(coq, mode):
    text = "Proof.\n  intros n.\n  split.\n  - lia.\n  - split.\n    + exact I.\n    + simpl. apply nope.\nQed."
    pa = ProofAug(coq, ProofAugConfig(hammers=("lia",), cuts=mode))
    semi = pa.mcsp(P, text)
    # body: 0 intros 1 split 2 - 3 lia 4 - 5 split 6 + 7 exact 8 + 9 simpl 10 admit
    assert semi.holes == [10]
    cuts = pa.cuts(semi, 10)
    expect = {
        "partial_first": [Cut(10, 11), Cut(9, 11), Cut(5, 11), Cut(1, 11), Cut(0, 11)],
        "entry": [Cut(10, 11), Cut(9, 11), Cut(5, 11), Cut(0, 11)],
        "entry_then_partial": [Cut(10, 11), Cut(9, 11), Cut(5, 11), Cut(0, 11), Cut(1, 11)],
    }[mode]
    assert cuts == expect
    assert len(set(cuts)) == len(cuts) and cuts[-1 if mode != "entry_then_partial" else -2] == Cut(0, 11)
    if mode != "entry_then_partial":
        spans = [set(range(c.start, c.end)) for c in cuts]
        assert all(a < b for a, b in zip(spans, spans[1:], strict=False))  # strictly coarser


def test_empty_ladder_without_sorry_equals_plain(coq):
    plain_cfg = ProofAugConfig(hammers=(), use_sorry=False)
    for prob, prop in [(P, CORRECT), (P, WRONG_LEAF), (P, EXTRA_BULLET), (SUM, SUM_OK), (SUM, SUM_NEEDS_INDUCTION)]:
        a = ProofAug(coq, plain_cfg).augment(prob, prop)
        b = ProofAug(coq, LADDER).run_method(prob, prop, "plain")
        assert a.success == b.success


def test_correct_proposal_unchanged_and_idempotent(coq):
    before = len([e for e in coq.log if e[0] == "hammer"])
    res = ProofAug(coq, LADDER).augment(P, CORRECT)
    assert res.success and res.stage == "init_proof" and res.proof == CORRECT
    assert len([e for e in coq.log if e[0] == "hammer"]) == before  # no ladder call
    for prop in (WRONG_LEAF, MISSING_CASE):
        first = ProofAug(coq, LADDER).augment(P, prop)
        assert first.success and first.proof != prop
        again = ProofAug(coq, LADDER).augment(P, first.proof)
        assert again.proof == first.proof and again.stage == "init_proof"


def test_coarsening_needed_and_accounting(coq):
    # `simpl. lia.` fails; lia at the hole fails too, the cut at the theorem's entry cannot help either
    # (needs induction), so this fails; with the induction skeleton the hole is local
    before = coq.calls
    res = ProofAug(coq, LADDER).augment(SUM, SUM_NEEDS_INDUCTION)
    assert not res.success and res.stage == "failed"
    assert res.checker_calls == coq.calls - before
    # false intermediate claim in a sub-proof: only a coarser cut (the bullet's entry) succeeds
    text = "Proof.\n  intros n.\n  split.\n  - assert (h : n = 0) by lia.\n    rewrite h. reflexivity.\n  - auto.\nQed."
    before, log_before = coq.calls, len(coq.log)
    res = ProofAug(coq, LADDER).augment(P, text)
    assert res.success and res.stage == "coarse_atp"
    assert res.checker_calls == coq.calls - before == len(coq.log) - log_before


def test_lying_backend_caught_by_final_check(coq):
    class Liar:
        """Reports every ladder tactic as closing the goal (it runs ``admit`` instead)."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def run_hammer(self, state, tactic, timeout):
            return self.inner.run(state, "admit.", timeout)

    res = ProofAug(Liar(coq), LADDER).augment(SUM, SUM_NEEDS_INDUCTION)
    assert not res.success and res.stage == "failed" and res.message


def test_budget_and_timeout(coq):
    res = ProofAug(coq, ProofAugConfig(hammers=("lia",), max_checker_calls=4)).augment(P, WRONG_LEAF)
    assert not res.success and res.checker_calls <= 4 and "budget" in res.message
    loop = "Proof.\n  intros n m.\n  repeat rewrite Nat.add_comm.\nQed."
    comm = Problem("c", H, "Theorem c : forall n m : nat, n + m = m + n.")
    res = ProofAug(coq, ProofAugConfig(hammers=("lia",), step_timeout=1.0, hammer_timeout=1.0)).augment(comm, loop)
    assert res.has_timeout and res.success and "lia." in res.proof


def test_erp_fixes_a_hole_needing_induction(coq):
    calls = []

    def scripted(prompt, n=1, **kw):
        calls.append(prompt)
        assert "2 * sum_n n = n * (n + 1)" in prompt  # the goal is in the prompt
        return ["induction n as [|k IH].\n  - reflexivity.\n  - simpl. nia.\nQed."]

    text = "Proof.\n  intros n.\n  lia.\nQed."
    res = ProofAug(coq, ProofAugConfig(hammers=("lia",), erp=True), proposer=scripted).augment(SUM, text)
    assert res.success and res.proposer_calls == 1 == len(calls) and res.stage == "erp"
    assert not ProofAug(coq, ProofAugConfig(hammers=("lia",))).augment(SUM, text).success


def test_bad_input(coq):
    pa = ProofAug(coq, LADDER)
    with pytest.raises(ValueError, match="proposal"):
        pa.augment(P, "   ")
    with pytest.raises(TypeError, match="proposal"):
        pa.augment(P, b"Proof. Qed.")
    with pytest.raises(ValueError, match="hammer_timeout"):
        ProofAugConfig(hammer_timeout=0)
    with pytest.raises(ValueError, match="step_timeout"):
        ProofAugConfig(step_timeout=-1.0)
    with pytest.raises(ValueError, match="cuts"):
        ProofAugConfig(cuts="finest")
    with pytest.raises(ValueError, match="statement"):
        Problem("x", H, "   ")
    with pytest.raises(ValueError, match="statement"):
        Problem("x", H, "Definition x := 1.")
    with pytest.raises(ValueError, match="statement"):
        Problem("x", H, "Theorem x : True. Theorem y : True.")
    with pytest.raises(ValueError, match="proposer"):
        ProofAug(coq, ProofAugConfig(erp=True))


def test_proposal_past_qed_is_cut(coq):
    res = ProofAug(coq, LADDER).augment(P, CORRECT + "\n\nTheorem extra : False.\nProof. auto. Qed.")
    assert res.success and res.proof == CORRECT


def test_fresh_check_allow_list_and_assumptions():
    header = H + "\nAxiom cheat : forall n : nat, n = n + 0."
    prob = Problem("ax", header, "Theorem ax : forall n : nat, n = n + 0.")
    with CoqBackend() as fresh:  # coqc + statement by type + coqchk; the allow-list is empty by default
        used = fresh.check(prob, "Proof. exact cheat. Qed.")
        assert not used.ok and "cheat" in used.message  # even the header's own axiom must be allowed explicitly
        calls = fresh.calls
        fresh.check(prob, "Proof. exact cheat. Qed.")
        assert fresh.calls == calls  # memoised
    with CoqBackend(allowed_axioms=("cheat",)) as fresh:
        ok = fresh.check(prob, "Proof. exact cheat. Qed.")
        assert ok.ok and ok.assumptions == ("cheat",)
        bad = fresh.check(prob, "Proof.\n  Axiom extra : False.\n  destruct extra.\nQed.")
        assert not bad.ok and "Axiom extra" in bad.message
        assert not fresh.check(prob, "Proof. intros. admit. Qed.").ok
    from proofaug.backends.kernel import _assumptions

    out = "Axioms:\nClassicalDedekindReals.sig_forall_dec\n  : forall P : nat -> Prop, x\ncheat : False\n"
    assert _assumptions(out) == (["ClassicalDedekindReals.sig_forall_dec", "cheat"], [])
    assert _assumptions("Axioms:\nloop is assumed to be guarded.\n") == ([], ["loop is assumed to be guarded."])
    assert _assumptions("Closed under the global context\nsomething else") is None  # not our output: rejected


@pytest.mark.skipif(
    not hammer_available(), reason="CoqHammer/eprover not installed (apt-get install libcoq-hammer eprover)"
)
def test_sauto_ladder_and_its_final_check(coq):
    prob = Problem("ex", H, "Theorem ex : forall n : nat, exists k, n + n = 2 * k.")
    text = "Proof.\n  intros n.\n  apply no_such_lemma.\nQed."
    assert not ProofAug(coq, ProofAugConfig(hammers=("lia",))).augment(prob, text).success
    for fresh in (False, True):  # both final checks load CoqHammer's tactics when the backend does
        with CoqBackend(hammer=True, fresh_check=fresh) as coq:
            res = ProofAug(coq, ProofAugConfig(hammers=("lia", "sauto"), hammer_timeout=2.0)).augment(prob, text)
            assert res.success and "sauto." in res.proof
