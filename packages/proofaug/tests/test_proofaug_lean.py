"""Lean REPL backend against a recorded transcript of the REPL's JSON protocol (no Lean binaries here)."""

from __future__ import annotations

from proofaug import Problem
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
    (
        {"cmd": "theorem t (a b : ℕ) (h : a = 2) : a + b ≥ 2 := by\n  sorry", "env": 0},
        {"env": 3, "sorries": [{"proofState": 3, "goal": "⊢ a + b ≥ 2"}]},
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
    assert lean.check(PROB, ":= by\n  rw [h]\n  omega").ok
    assert not lean.check(PROB, ":= by\n  sorry").ok
    assert lean.calls == 6 and not replay.pairs
