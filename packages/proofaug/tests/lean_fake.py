"""A fake Lean REPL speaking the upstream JSON protocol, replaying recorded tactic outcomes (no Lean here).

``effects[(goal conclusion, tactic)]`` is what the recording says a tactic does to the first goal: the goals that
replace it (``[]``: closed) or an error message. ``sorry`` closes the first goal; Mathlib's ``have h : P`` puts
``P`` first and adds ``h`` to the goal it came from; ``have h : P := by t`` needs ``t`` to close ``P``; ``focus t
done`` needs ``t`` to close the first goal. Command-mode checks accept exactly the ``accepted`` texts.
"""

from __future__ import annotations

import re


class FakeLeanRepl:
    def __init__(self, hyps: str, goal: str, effects: dict, accepted: set[str]):
        self.hyps, self.goal, self.effects, self.accepted = hyps, goal, effects, accepted
        self.states: list[list[str]] = []
        self.requests: list[dict] = []

    def _new(self, goals: list[str]) -> dict:
        self.states.append(goals)
        return {"proofState": len(self.states) - 1, "goals": goals}

    @staticmethod
    def _concl(goal: str) -> str:
        return goal.rsplit("⊢ ", 1)[1]

    def _apply(self, goals: list[str], tac: str) -> list[str] | str:
        if not goals:
            return "no goals to be proved"
        first, rest = goals[0], goals[1:]
        if tac == "sorry":
            return rest
        m = re.fullmatch(r"focus\n  (.*)\n  done", tac, re.S)
        if m:
            out = self._apply([first], m.group(1))
            return out + rest if out == [] else (out if isinstance(out, str) else "unsolved goals")
        m = re.fullmatch(r"have (\w+) : (.*?)(?: := by (.*))?", tac, re.S)
        if m:
            name, prop, proof = m.groups()
            with_h = first.replace("⊢", f"{name} : {prop}\n⊢")
            if proof is None:
                return [f"{self.hyps}\n⊢ {prop}", with_h, *rest]
            if proof != "sorry":
                out = self._apply([f"{self.hyps}\n⊢ {prop}"], proof)
                if out != []:
                    return out if isinstance(out, str) else "unsolved goals"
            return [with_h, *rest]
        out = self.effects.get((self._concl(first), tac), f"unknown tactic or identifier in {tac!r}")
        return out if isinstance(out, str) else [f"{self.hyps}\n⊢ {g}" for g in out] + rest

    def __call__(self, req: dict) -> dict:
        self.requests.append(req)
        if "cmd" in req and "env" not in req:
            return {"env": 0}
        if "cmd" in req:
            if req["cmd"].startswith("#print axioms "):  # what Lean prints for an ordinary Mathlib proof
                name = req["cmd"].split()[-1]
                return {"env": req["env"], "messages": [{"severity": "info", "data": f"'{name}' depends on axioms: "
                        "[propext, Classical.choice, Quot.sound]"}]}  # fmt: skip
            if req["cmd"].endswith(":= by sorry"):
                st = self._new([f"{self.hyps}\n⊢ {self.goal}"])
                return {"env": 1, "sorries": [{"proofState": st["proofState"], "goal": st["goals"][0]}]}
            if req["cmd"] in self.accepted:
                return {"env": 2}
            return {"messages": [{"severity": "error", "data": "not in the recording: rejected"}]}
        out = self._apply(self.states[req["proofState"]], req["tactic"])
        if isinstance(out, str):
            return {"message": f"Lean error:\n{out}"}
        return self._new(out)
