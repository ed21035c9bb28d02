"""What ProofAug needs to know about a proof language: its steps, blocks, hole, automation syntax and messages.

ProofAug's algorithm (paper, Alg. 1: MCSP, then automation at every granularity) is the same for every prover; a
:class:`Dialect` tells it how a proposal splits into steps and blocks (:mod:`proofaug.structure`), what a hole is
(Coq ``admit.``, Lean and Isabelle ``sorry``), how a ladder tactic is written where a hole was, and which prover
messages mean "no goal left here" (an orphan step, dropped) or "goals remain" (a hole is inserted).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proofaug.structure import (
    Block,
    ProofScript,
    Sentence,
    build_blocks,
    isar_blocks,
    isar_script,
    lean_script,
    parse_proof,
    split_inline,
    split_lean_inline,
)

__all__ = ["Dialect", "CoqDialect", "LeanDialect", "IsarDialect", "dialect_for", "focused_goals"]


def focused_goals(goals: str) -> int:
    """Number of focused goals in a coqtop goal display (0 for ``No more goals`` and completed sub-proofs)."""
    m = re.match(r"\s*(\d+) goals?\b", goals)
    return int(m.group(1)) if m else 0


def _paren(tac: str) -> str:
    return tac if re.fullmatch(r"[\w']+", tac) else f"({tac})"


def _indent(s: Sentence) -> str:
    lead = s.lead
    k = lead.rfind("\n")
    if k < 0:
        return " "
    return "\n" + "".join(c for c in lead[k + 1 :] if c in " \t")


@dataclass(frozen=True)
class Dialect:
    """The Coq dialect (the base): sentences, ``{ }``/bullet blocks, ``admit.``, ``Qed.``."""

    name: str = "coq"
    hole: str = "admit."
    """The hole a failing step becomes (it closes the focused goal at the partial state)."""
    end: str | None = "Qed."
    """Sentence that ends the proof (R4 inserts holes until it passes); None: the proof ends when no goal is left."""
    virtual_close: bool = False
    """Blocks end by indentation (Lean): a ``close`` step has no text and checks the goal count instead."""
    open_fail_hole: bool = False
    """A failing block opener (Isar ``proof m``) makes the whole block one hole instead of abandoning (R5)."""
    compare_goals: bool = True
    """Accept a ladder tactic only if the goals after it equal the goals after the hole (False: the prover's own
    terminal proof step guarantees it, as Isar's ``by m``)."""

    parser: Callable[[str], ProofScript] = parse_proof
    """Proposal text -> head, body steps, tail (:mod:`proofaug.structure`)."""
    blocker: Callable[[list[Sentence]], tuple[Block, list[Block]]] = build_blocks
    """Body steps -> (root block, every block)."""
    hole_re: str = r"^admit\s*\.$|\sby\s+admit\s*\.$"
    """A step that is a hole (the proposal's own, or inserted)."""
    orphan_re: str = r"No such goal|No more goals|The proof is not focused|No focused proof"
    """Prover messages meaning "no goal is focused here" (R3: the step is dropped)."""
    unclosed_re: str = r"cannot be unfocused this way|is not finished|incomplete proof|is mandatory here|Expecting"
    """Prover messages meaning "goals remain" at a closing step (R4: a hole is inserted)."""

    def parse(self, proposal: str) -> ProofScript:
        return self.parser(proposal)

    def blocks(self, body: list[Sentence]) -> tuple[Block, list[Block]]:
        return self.blocker(body)

    def is_hole(self, code: str) -> bool:
        return bool(re.search(self.hole_re, code.strip()))

    def orphan(self, message: str) -> bool:
        return bool(re.search(self.orphan_re, message))

    def unclosed(self, message: str) -> bool:
        return bool(re.search(self.unclosed_re, message))

    def inline(self, code: str) -> tuple[str, str] | None:
        return split_inline(code)

    def inline_hole(self, stmt: str) -> str:
        return f"{stmt} by admit."

    def inline_hammer(self, stmt: str, tac: str) -> str:
        return f"{stmt} by (solve [ {tac} ])."

    def inline_fill(self, stmt: str, tac: str) -> str:
        return f"{stmt} by {_paren(tac)}."

    def fill(self, tac: str) -> str:
        return f"{tac}."

    def replace(self, s: Sentence, code: str) -> Sentence:
        """``s``'s position (leading text kept) holding ``code``."""
        return s.replaced(code)

    def at(self, indent: str, code: str) -> Sentence:
        """A new step ``code`` at ``indent``."""
        return Sentence(indent + code, "tactic")

    def indent(self, s: Sentence) -> str:
        return _indent(s)

    def insert_indent(self, body: list[Sentence], before: Sentence | None) -> str:
        """Indentation of a hole inserted by R4 before ``before`` (None: at the end of the proof)."""
        return _indent(before) if before is not None else "\n  "

    def render_hole(self, first: Sentence, code: str) -> Sentence:
        return Sentence(" " + code, "tactic")

    def n_goals(self, goals: str) -> int:
        return focused_goals(goals)

    def single_goal(self, goals: list[Any], block: Block, k: int) -> bool:
        """Whether the state before step ``k`` of ``block`` has exactly one goal of that block (partial cut)."""
        return focused_goals(goals[k]) == 1


CoqDialect = Dialect


@dataclass(frozen=True)
class LeanDialect(Dialect):
    """Lean 4 (Mathlib): :func:`~proofaug.structure.lean_script` steps, ``have … := by`` blocks, ``sorry``."""

    name: str = "lean"
    hole: str = "sorry"
    end: str | None = None
    virtual_close: bool = True

    parser: Callable[[str], ProofScript] = lean_script
    hole_re: str = r"^sorry$|:=\s*by\s+sorry$"
    orphan_re: str = r"no goals"
    unclosed_re: str = r"(?!)"  # blocks close by goal count, not by a message

    def inline(self, code: str) -> tuple[str, str] | None:
        return split_lean_inline(code)

    def inline_hole(self, stmt: str) -> str:
        return f"{stmt} := by sorry"

    def inline_hammer(self, stmt: str, tac: str) -> str:
        return f"{stmt} := by {tac}"  # `by` fails when goals remain ("unsolved goals")

    def inline_fill(self, stmt: str, tac: str) -> str:
        return f"{stmt} := by {tac}"

    def fill(self, tac: str) -> str:
        return tac

    def replace(self, s: Sentence, code: str) -> Sentence:
        return Sentence(self.indent(s) + code, "tactic", exec=code)

    def at(self, indent: str, code: str) -> Sentence:
        return Sentence(indent + code, "tactic", exec=code)

    def indent(self, s: Sentence) -> str:
        lead = s.text[: len(s.text) - len(s.text.lstrip())]
        k = lead.rfind("\n")
        return "\n" + lead[k + 1 :] if k >= 0 else "\n  "

    def insert_indent(self, body: list[Sentence], before: Sentence | None) -> str:
        depth = 0
        for s in reversed(body):
            if s.kind == "close":
                depth += 1
            elif s.kind == "open":
                if depth == 0:
                    return self.indent(s) + "  "
                depth -= 1
            elif depth == 0 and s.text.strip():
                return self.indent(s)
        return "\n  "

    def render_hole(self, first: Sentence, code: str) -> Sentence:
        return self.replace(first, code)

    def n_goals(self, goals: str) -> int:
        return goals.count("⊢")  # one turnstile per goal in Lean's goal display

    def single_goal(self, goals: list[Any], block: Block, k: int) -> bool:
        # the block's own goals come first: its goal count is the total minus what was there before it opened
        return self.n_goals(goals[k]) == self.n_goals(goals[block.start])


@dataclass(frozen=True)
class IsarDialect(Dialect):
    """Isabelle/Isar: :func:`~proofaug.structure.split_isar` steps, ``proof … qed`` blocks, ``sorry``; the
    paper's granularity (block entries only: a state-mode partial proof has no hole syntax)."""

    name: str = "isabelle"
    hole: str = "sorry"
    end: str | None = "end"
    open_fail_hole: bool = True
    compare_goals: bool = False

    parser: Callable[[str], ProofScript] = isar_script
    blocker: Callable[[list[Sentence]], tuple[Block, list[Block]]] = isar_blocks
    hole_re: str = r"^sorry$"
    orphan_re: str = r'Illegal application of proof command in "state" mode|No goals|No proof state'
    unclosed_re: str = r'Bad context for command "end"|Failed to finish proof|Unfinished'

    def inline(self, code: str) -> tuple[str, str] | None:
        return None  # `have P by m` is two steps in Isar

    def fill(self, tac: str) -> str:
        return f"by {tac}"

    def replace(self, s: Sentence, code: str) -> Sentence:
        return Sentence(s.lead + code, "tactic")

    def render_hole(self, first: Sentence, code: str) -> Sentence:
        return self.replace(first, code)

    def n_goals(self, goals: str) -> int:
        return 0  # the Isabelle server reports no goal list; proofs end with the `end` check

    def single_goal(self, goals: list[Any], block: Block, k: int) -> bool:
        return False


_DIALECTS = {"coq": CoqDialect(), "lean": LeanDialect(), "isabelle": IsarDialect()}


def dialect_for(language: str) -> Dialect:
    """The dialect of a :class:`~proofaug.config.Problem`'s ``language``."""
    return _DIALECTS[language]
