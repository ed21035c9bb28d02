"""Lean 4: the REPL backend against a recorded transcript of its JSON protocol, and ProofAug's algorithm (MCSP,
cuts, repair, idempotence) against a fake REPL replaying recorded tactic outcomes (no Lean binaries here)."""

from __future__ import annotations

import os
import shutil

import pytest
from lean_fake import FakeLeanRepl

from proofaug import Problem, ProofAug, ProofAugConfig
from proofaug.augment import Cut
from proofaug.backends.lean import LeanReplBackend

HEADER = "import Mathlib"
PROB = Problem("t", HEADER, "theorem t (a b : ℕ) (h : a = 2) : a + b ≥ 2", language="lean")

# recorded request -> response pairs (the upstream REPL's format)
TRANSCRIPT = [
    ({"cmd": "import Mathlib"}, {"env": 0}),
    (
        {"cmd": "theorem t (a b : ℕ) (h : a = 2) : a + b ≥ 2 := by sorry", "env": 0},
        {
            "env": 1,
            "sorries": [{"pos": {"line": 1, "column": 50}, "goal": "a b : ℕ\nh : a = 2\n⊢ a + b ≥ 2", "proofState": 0}],
            "messages": [{"severity": "warning", "data": "declaration uses 'sorry'"}],
        },
    ),
    ({"tactic": "rw [h]", "proofState": 0}, {"proofState": 1, "goals": ["a b : ℕ\nh : a = 2\n⊢ 2 + b ≥ 2"]}),
    ({"tactic": "exact foo", "proofState": 1}, {"message": "Lean error:\nunknown identifier 'foo'"}),
    ({"tactic": "focus\n  omega\n  done", "proofState": 1}, {"proofState": 2, "goals": []}),
    (
        {"cmd": "theorem t (a b : ℕ) (h : a = 2) : a + b ≥ 2 := by\n  rw [h]\n  omega", "env": 0},
        {"env": 2},
    ),
    (  # Lean's #print axioms reply (format of Lean 4's `#print axioms`)
        {"cmd": "#print axioms t", "env": 2},
        {"env": 2, "messages": [{"severity": "info", "data": "'t' depends on axioms: [propext]"}]},
    ),
]


class Replay:
    def __init__(self, pairs):
        self.pairs = list(pairs)

    def __call__(self, req):
        want, resp = self.pairs.pop(0)
        assert req == want
        return resp


def test_lean_transcript():
    replay = Replay(TRANSCRIPT)
    lean = LeanReplBackend(transport=replay)
    st = lean.start(PROB)
    assert st.ok and st.state == 0 and "⊢ a + b ≥ 2" in st.goals
    r = lean.run(st.state, "rw [h]", 10)
    assert r.ok and r.state == 1 and "2 + b" in r.goals
    bad = lean.run(r.state, "exact foo", 10)
    assert not bad.ok and bad.state == 1 and "unknown identifier" in bad.message
    done = lean.run_hammer(r.state, "omega", 10)
    assert done.ok and done.goals == "no goals"
    ok = lean.check(PROB, ":= by\n  rw [h]\n  omega")
    assert ok.ok and ok.assumptions == ("propext",)
    assert "sorry" in lean.check(PROB, ":= by\n  sorry").message  # screened: never sent
    assert lean.calls == 6 and not replay.pairs


def test_lean_final_check_rejects_cheats_and_extra_axioms():
    from proofaug.backends.lean import lean_screen

    cheats = [
        ":= by\n  sorry",
        ":= by\n  exact sorryAx _",
        ":= by\n  native_decide",
        ":= by\n  omega\n\naxiom cheat : False",
        ":= by\n  set_option debug.skipKernelTC true in omega",
        ":= by\n  omega\ntheorem t2 : False := by sorry",
        ":= by\n  run_tac Lean.Elab.admitGoal",
        ":= by\n  omega\n@[implemented_by x] def y := 1",
        ":= by\n  omega\nunsafe def z := 1",
        ":= by\n  omega\n#exit",
        ":= by\n  omega\nend",
        ':= by\n  omega\nnotation a " + " b => a * b',
    ]
    assert all(lean_screen(c) for c in cheats), [c for c in cheats if not lean_screen(c)]
    assert lean_screen(":= by\n  rw [h]\n  omega") is None
    strict = LeanReplBackend(transport=Replay([TRANSCRIPT[0], TRANSCRIPT[5], TRANSCRIPT[6]]), allowed_axioms=())
    res = strict.check(PROB, ":= by\n  rw [h]\n  omega")
    assert not res.ok and "propext" in res.message  # the allow-list is explicit


def test_lean_statement_with_trailing_by():
    prob = Problem("t", HEADER, PROB.statement + " := by", language="lean")
    replay = Replay([TRANSCRIPT[0], TRANSCRIPT[1], TRANSCRIPT[5], TRANSCRIPT[6]])
    lean = LeanReplBackend(transport=replay)
    assert lean.start(prob).ok  # the same requests as for the bare statement
    assert lean.check(prob, ":= by\n  rw [h]\n  omega").ok and not replay.pairs


# ---------------------------------------------------------------------------------------------------------------
# ProofAug's algorithm on Lean 4, against a fake REPL replaying recorded tactic outcomes (tests/lean_fake.py)

STMT = "theorem t2 (a b : ℕ) (h₀ : a = 2) (h₁ : b = 3) : a * b = 6 ∧ a + b = 5"
P2 = Problem("t2", HEADER, STMT, language="lean")
HYPS = "a b : ℕ\nh₀ : a = 2\nh₁ : b = 3"
EFFECTS = {
    ("a * b = 6", "subst h₀"): ["2 * b = 6"],
    ("2 * b = 6", "subst h₁"): ["2 * 3 = 6"],
    ("2 * b = 6", "rw [h4]"): ["2 * 4 = 6"],
    ("2 * b = 6", "omega"): [],
    ("2 * 3 = 6", "omega"): [],
    ("a + b = 5", "omega"): [],
    ("a * b = 6", "norm_num [h₀, h₁]"): [],
    ("a * b = 6 ∧ a + b = 5", "exact ⟨h2, h3⟩"): [],
    ("b = 4", "omega"): "omega could not prove the goal",
    ("2 * 4 = 6", "norm_num"): "norm_num failed to prove the goal",
}
LEAN_LADDER2 = ProofAugConfig(hammers=("omega", "norm_num [h₀, h₁]"), hammer_timeout=1.0)

H2 = ":= by\n  have h2 : a * b = 6 := by\n"
REST = "  have h3 : a + b = 5 := by omega\n  exact ⟨h2, h3⟩"
GOOD = H2 + "    subst h₀\n    subst h₁\n    omega\n" + REST
WRONG_LEAF = GOOD.replace("    omega\n", "    exact bogus\n")
MISSING = H2 + "    subst h₀\n" + REST
FALSE_CLAIM = H2 + "    subst h₀\n    have h4 : b = 4 := by omega\n    rw [h4]\n    norm_num\n" + REST
BY_PARTIAL = H2 + "    subst h₀\n    omega\n" + REST  # also MISSING repaired
BY_ENTRY = H2 + "    norm_num [h₀, h₁]\n" + REST


def fake_lean():
    accepted = {f"{STMT} {p}" for p in (GOOD, BY_PARTIAL, BY_ENTRY)}
    return LeanReplBackend(transport=FakeLeanRepl(HYPS, "a * b = 6 ∧ a + b = 5", EFFECTS, accepted))


def test_lean_mcsp_one_wrong_leaf_one_sorry_and_missing_case():
    pa = ProofAug(fake_lean(), LEAN_LADDER2)
    semi = pa.mcsp(P2, WRONG_LEAF)
    assert semi.text == WRONG_LEAF.replace("exact bogus", "sorry") and len(semi.holes) == 1
    assert semi.body[semi.holes[0]].code == "sorry"
    semi = pa.mcsp(P2, MISSING)  # R4: the `have` block ends with its goal open -> one sorry at the body's indent
    assert semi.text == MISSING.replace("subst h₀\n", "subst h₀\n    sorry\n") and len(semi.holes) == 1
    assert pa.mcsp(P2, GOOD).holes == [] and pa.mcsp(P2, GOOD).text == GOOD


def test_lean_augment_repairs_and_is_idempotent():
    lean = fake_lean()
    pa = ProofAug(lean, LEAN_LADDER2)
    assert pa.augment(P2, GOOD).stage == "init_proof"
    res = pa.augment(P2, WRONG_LEAF)
    assert res.success and res.stage == "init_atp" and res.proof == GOOD and res.checker_calls > 0
    again = pa.augment(P2, res.proof)
    assert again.success and again.proof == res.proof and again.stage == "init_proof"
    res = pa.augment(P2, MISSING)
    assert res.success and res.proof == BY_PARTIAL
    assert not pa.run_method(P2, WRONG_LEAF, "plain").success
    calls = lean.calls
    res = ProofAug(lean, LEAN_LADDER2).augment(P2, FALSE_CLAIM)
    assert res.checker_calls == lean.calls - calls  # accounting equals the backend's call log


@pytest.mark.parametrize(
    "mode, want, proof",
    [
        ("partial_first", [Cut(2, 3, "have h4 : b = 4"), Cut(2, 5), Cut(1, 5), Cut(0, 8)], BY_PARTIAL),
        ("entry", [Cut(2, 3, "have h4 : b = 4"), Cut(1, 5), Cut(0, 8)], BY_ENTRY),
        ("entry_then_partial", [Cut(2, 3, "have h4 : b = 4"), Cut(1, 5), Cut(2, 5), Cut(0, 8)], BY_ENTRY),
    ],
)
def test_lean_cuts_order_and_coarsening(mode, want, proof):
    pa = ProofAug(fake_lean(), ProofAugConfig(hammers=LEAN_LADDER2.hammers, cuts=mode))
    semi = pa.mcsp(P2, FALSE_CLAIM)
    # body: 0 have h2 (open) 1 subst 2 have h4 := by sorry 3 rw 4 sorry 5 (close) 6 have h3 7 exact
    assert semi.holes == [2, 4] and semi.body[2].code == "have h4 : b = 4 := by sorry"
    cuts = pa.cuts(semi, 2)
    assert cuts == want and cuts[-1] == Cut(0, len(semi.body))  # the theorem last, no duplicates
    res = pa.augment(P2, FALSE_CLAIM)
    assert res.success and res.stage == "coarse_atp" and res.proof == proof
    assert len(set(res.semi_proofs)) == len(res.semi_proofs)


def test_lean_theorem_ladder_and_dsp_holes():
    pa = ProofAug(fake_lean(), LEAN_LADDER2)
    assert not pa.run_method(P2, GOOD, "theorem_ladder").success  # no ladder tactic proves the conjunction
    sketch = GOOD.replace("    omega\n", "    sorry\n")
    res = pa.run_method(P2, sketch, "dsp_holes")
    assert res.success and res.proof == GOOD


LEAN_PROJECT = os.environ.get("PROOFAUG_LEAN_PROJECT")


@pytest.mark.skipif(
    shutil.which("lake") is None or not LEAN_PROJECT,
    reason="live Lean needs `lake` and PROOFAUG_LEAN_PROJECT (a Lean project with Mathlib and the REPL)",
)
def test_lean_live_repair():
    prob = Problem("t3", "import Mathlib", "theorem t3 (a : ℕ) (h : a = 2) : a + a = 4", language="lean")
    with LeanReplBackend(project_dir=LEAN_PROJECT) as lean:
        pa = ProofAug(lean, ProofAugConfig(hammers=("omega",), hammer_timeout=30.0, step_timeout=60.0))
        res = pa.augment(prob, ":= by\n  have h2 : a = 2 := by\n    exact bogus\n  omega")
        assert res.success and "exact bogus" not in res.proof
