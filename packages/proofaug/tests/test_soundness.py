"""Adversarial proposals: a language model will find any text the final check accepts.

Every proposal below tries to "prove" a false theorem (or a true one by a forbidden route) by changing the
statement, editing the environment, bypassing a kernel check, spoofing the checker's output, adding axioms by any
route, redefining the statement's symbols, or ending the proof a second time. Each must fail, with a reason, in
``ProofAug.augment`` (warm pre-screen and fresh kernel check) and in ``CoqBackend.check``. A second layer of tests
sends the worst of them past the sentence screen straight to ``coqc`` + ``coqchk`` (``kernel_check``) and to the
reproduction's independent re-check, which shares no code with the backend: the kernel alone must reject them.
"""

from __future__ import annotations

import pytest
from conftest import needs_coq

from proofaug import CoqBackend, Problem, ProofAug, ProofAugConfig
from proofaug.backends.kernel import kernel_check, screen_proof, statement_type
from proofaug.experiments import SuiteRun, independent_check
from proofaug.suite import SuiteItem

H = "From Coq Require Import Arith Lia."
TRAP = Problem("trap", H, "Theorem trap : forall n : nat, n = n + 1.")
TRUE = Problem("fine", H, "Theorem fine : forall n : nat, n + 0 = n.")
LADDER = ProofAugConfig(hammers=("lia", "auto"), hammer_timeout=1.0, step_timeout=3.0)

NESTED = "Proof. Set Nested Proofs Allowed. Lemma helper : False. Admitted. intros n. destruct helper. Qed."
GUARD = "#[bypass_check(guard)] Fixpoint loop (m : nat) {struct m} : False := loop m."
EXPLOITS = {
    # statement change
    "reset_redefine": "Proof. Reset trap. #[global] Theorem trap : True. exact I. Qed.",
    "reset_initial": "Proof. Reset Initial. Theorem trap : True. exact I. Qed.",
    "abort_redefine": "Proof. Abort. Theorem trap : True. Proof. exact I. Qed.",
    "back_redefine": "Proof. Back 2. Theorem trap : True. exact I. Qed.",
    "undo": "Proof. Undo 1. exact I. Qed.",
    "selector_reset": "Proof. 1: Reset trap. #[global] Theorem trap : True. exact I. Qed.",
    "comment_hidden_reset": "Proof. (* harmless *) Reset (* ! *) trap. Theorem trap : True. exact I. Qed.",
    "goal_redefine": "Proof. Abort. Goal True. exact I. Qed.",
    "ellipsis_reset": "Proof. idtac... Reset trap. Theorem trap : True. exact I. Qed.",  # `...` ends a sentence
    # check bypass
    "bypass_guard": f"Proof.\n{GUARD}\nintros n. destruct (loop 0).\nQed.",
    "bypass_positivity": "Proof. #[bypass_check(positivity)] Inductive bad := C : (bad -> False) -> bad. "
    "intros n. exfalso. admit. Qed.",
    "bypass_universes": "Proof. #[bypass_check(universes)] Definition U := Type : Type. intros. lia. Qed.",
    "unset_guard": "Proof. Unset Guard Checking. intros n. exfalso. "
    "exact ((fix f (m : nat) {struct m} : False := f m) 0). Qed.",
    "local_unset_guard": "Proof. Local Unset Guard Checking. intros n. exfalso. "
    "exact ((fix f (m : nat) {struct m} : False := f m) 0). Qed.",
    "unset_positivity": "Proof. Unset Positivity Checking. intros n. lia. Qed.",
    "unset_universes": "Proof. Unset Universe Checking. intros n. lia. Qed.",
    # output spoofing
    "spoof_closed": 'Proof. idtac "Closed under the global context". #[local] Axiom cheat : False. '
    "intros n. destruct cheat. Qed.",
    "spoof_qed": 'Proof. intros n. idtac "No more goals." "Closed under the global context". Qed.',
    # axioms by any route
    "local_axiom": "Proof. #[local] Axiom cheat : False. intros n. destruct cheat. Qed.",
    "axiom": "Proof. Axiom cheat : False. intros n. destruct cheat. Qed.",
    "parameter": "Proof. Parameter cheat : False. intros n. destruct cheat. Qed.",
    "conjecture": "Proof. Conjecture cheat : False. intros n. destruct cheat. Qed.",
    "admit_subgoal": "Proof. intros n. assert (h : False). { admit. } destruct h. Qed.",
    "admit_in_ltac": "Proof. intros n. exact ltac:(admit). Qed.",
    "give_up": "Proof. intros n. give_up. Qed.",
    "admitted_helper": "Proof. Lemma helper : False. Admitted. intros n. destruct helper. Qed.",
    "exact_no_check": "Proof. intros n. exact_no_check (eq_refl n). Qed.",
    "vm_cast_no_check": "Proof. intros n. vm_cast_no_check (eq_refl n). Qed.",
    "declare_ml": 'Proof. Declare ML Module "ltac_plugin". intros n. lia. Qed.',
    # notation / Ltac redefinition of the statement's symbols
    "notation_plus": 'Proof. Notation "x + y" := (x * 1) : nat_scope. intros n. lia. Qed.',
    "local_notation": 'Proof. Local Notation "x = y" := (True) : type_scope. intros n. exact I. Qed.',
    "infix": 'Proof. Infix "+" := Nat.max : nat_scope. intros n. lia. Qed.',
    "ltac_lia": "Proof. Ltac lia := admit. intros n. lia. Qed.",
    "tactic_notation": 'Proof. Tactic Notation "lia" := admit. intros n. lia. Qed.',
    "opaque": "Proof. Opaque Nat.add. intros n. lia. Qed.",
    # ending the proof a second time
    "admitted": "Proof. intros n. Admitted.",
    "nested_admitted": NESTED,
    "admitted_then_theorem": "Proof. Admitted. Theorem trap2 : True. Proof. exact I. Qed.",
    "qed_then_text": "Proof. intros n. lia. Qed. Theorem x : True. exact I. Qed.",
    "save": "Proof. intros n. Save trap.",
    "defined_twice": "Proof. exact I. Defined. Defined.",
    # files and non-tactic characters
    "redirect": 'Proof. Redirect "out" Print Assumptions trap. intros n. lia. Qed.',
    "unicode_reset": "Proof. Ｒeset trap. Theorem trap : True. exact I. Qed.",
    "zero_width_space": "Proof. idtac.\u200bReset trap. Theorem trap : True. exact I. Qed.",
    "nbsp_terminator": "Proof. idtac.\u00a0Reset trap. Theorem trap : True. exact I. Qed.",
    "all_brace_reset": "Proof. all:{ Reset trap. } Theorem trap : True. exact I. Qed.",
    "unterminated": "Proof. intros n. lia",
    "unclosed_comment": "Proof. intros n. (* lia. Qed.",
}


def test_suite_has_25_exploits_of_every_family():
    assert len(EXPLOITS) >= 25


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_screen_rejects_with_a_reason(name):
    """Pure Python: the sentence screen names why (no exploit reaches a prover as a final proof)."""
    if name in ("exact_no_check", "vm_cast_no_check", "spoof_qed"):
        pytest.skip("legal tactics: left to the kernel (see test_kernel_alone_rejects)")
    why = screen_proof(EXPLOITS[name])
    assert why, name


@needs_coq
@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_every_exploit_fails_in_augment_and_check(fresh):
    with CoqBackend(fresh_check=fresh) as coq:
        pa = ProofAug(coq, LADDER)
        for name, text in EXPLOITS.items():
            res = pa.augment(TRAP, text)
            assert not res.success and res.message, (name, res)
            chk = coq.check(TRAP, text)
            assert not chk.ok and chk.message, (name, chk)


#: exploits sent past the screen: the kernel files alone must reject them
KERNEL = {
    "reset_redefine": "Proof. Reset trap. #[global] Theorem trap : True. exact I. Qed.",
    "bypass_guard": EXPLOITS["bypass_guard"],
    "spoof_local_axiom": EXPLOITS["spoof_closed"],
    "admitted_helper": NESTED,
    "admitted_theorem": "Proof. intros n. exfalso. admit. Admitted.",
    "exact_no_check": EXPLOITS["exact_no_check"],
    "bypass_positivity": "Proof. #[bypass_check(positivity)] Inductive bad := C : (bad -> False) -> bad. "
    "Definition nb (b : bad) : False := match b with C f => f b end. intros n. destruct (nb (C nb)). Qed.",
    # a correct proof of a true statement followed by a universe-check bypass: coqchk's summary alone rejects it
    "unset_universe_after": "Proof. lia. Qed. Unset Universe Checking. Definition U := Type : Type.",
}
#: what the kernel layer's message names for each
REASON = {
    "reset_redefine": "does not have the problem's statement",
    "bypass_guard": "guarded",
    "spoof_local_axiom": "cheat",
    "admitted_helper": "helper",
    "admitted_theorem": "ProofAugSubmission.trap",
    "exact_no_check": "coqc rejects the file",
    "bypass_positivity": "assumed to be positive",
    "unset_universe_after": "coqchk: Constants/Inductives relying on type-in-type",
}
KERNEL_SLOW = {"bypass_positivity", "unset_universe_after", "exact_no_check", "admitted_theorem"}


@needs_coq
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in KERNEL_SLOW else n for n in sorted(KERNEL)]
)
def test_kernel_alone_rejects(name):
    """Defence in depth: ``coqc`` + statement by type + ``coqchk`` reject what the screen would have caught."""
    problem = TRUE if name == "unset_universe_after" else TRAP
    res = kernel_check(problem.header, problem.statement, KERNEL[name], timeout=120)
    assert not res.ok and REASON[name] in res.message, (name, res)


@needs_coq
def test_kernel_check_accepts_real_proofs_and_rejects_library_axioms():
    ok = Problem("ok", H, "Theorem ok (a b : nat) (h : a <= b) : 2 * a <= 2 * b + 1.")
    assert statement_type(ok.statement) == ("ok", "forall (a b : nat) (h : a <= b), 2 * a <= 2 * b + 1")
    assert kernel_check(ok.header, ok.statement, "Proof. lia. Qed.", timeout=120).ok
    classical = Problem("em", "From Coq Require Import Classical.", "Theorem em : forall P : Prop, P \\/ ~ P.")
    rejected = kernel_check(classical.header, classical.statement, "Proof. intros P. apply classic. Qed.", timeout=120)
    assert not rejected.ok and "classic" in rejected.message  # a library axiom outside the (empty) allow-list


@needs_coq
def test_independent_check_catches_what_the_backend_would_screen(monkeypatch):
    """The reproduction's re-check has no screen: a false success smuggled into a run is counted by the kernel,
    and no code of the backend's final check runs (each piece is replaced by a tripwire)."""
    import proofaug.backends.coq as coq_mod
    import proofaug.backends.kernel as kernel_mod

    def tripwire(*args, **kwargs):
        raise AssertionError("independent_check used the backend's final-check code")

    for mod, names in ((kernel_mod, ("kernel_check", "screen_proof", "screen_body", "parse_coqchk", "_assumptions")),
                       (coq_mod, ("final_prefilter", "kernel_check", "screen_proof"))):  # fmt: skip
        for name in names:
            monkeypatch.setattr(mod, name, tripwire)
    monkeypatch.setattr(coq_mod.CoqBackend, "check", tripwire)
    good = Problem("g", H, "Theorem g : forall n : nat, n + 0 = n.")
    cases = [(good, "Proof. intros n. lia. Qed."), (TRAP, KERNEL["bypass_guard"])]
    items = [SuiteItem(f"x/{i}", p, "K0", text, {}) for i, (p, text) in enumerate(cases)]
    fake = [_Res(True, text) for _, text in cases]
    bad, checked = independent_check(SuiteRun(items, {"proofaug": fake}))
    assert (bad, checked) == (1, 2)


class _Res:
    def __init__(self, success: bool, proof: str) -> None:
        self.success, self.proof = success, proof
