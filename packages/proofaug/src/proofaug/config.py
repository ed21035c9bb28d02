"""``ProofAugConfig`` (every knob of the method) and ``Problem`` (one formal statement)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = ["ProofAugConfig", "Problem", "COQ_LADDER", "COQ_QUICK_LADDER", "Cuts"]

Cuts = Literal["partial_first", "entry", "entry_then_partial"]

#: Built-in automation for Coq, cheapest first; CoqHammer's ``sauto`` needs ``From Hammer Require Import Tactics``
#: (the backend loads it when the ladder names it and CoqHammer is installed).
COQ_LADDER: tuple[str, ...] = ("easy", "auto", "lia", "nia", "ring", "field", "lra", "congruence", "firstorder")
#: The quick reproduction's ladder.
COQ_QUICK_LADDER: tuple[str, ...] = ("lia", "nia", "ring", "auto", "easy")

_STATEMENT = re.compile(r"\s*(Theorem|Lemma|Example)\s+([A-Za-z_][\w']*)\b")


@dataclass(frozen=True)
class ProofAugConfig:
    """Hyper-parameters of ProofAug (paper, Alg. 1 and Sec. 3.2–3.3)."""

    hammers: tuple[str, ...] = COQ_LADDER
    """The automation ladder tried at each hole, cheapest first (the paper's heuristic tactics + ATP)."""
    hammer_timeout: float = 2.0
    """Seconds per ladder tactic (rounded up to whole seconds for Coq's ``Timeout``)."""
    step_timeout: float = 10.0
    """Seconds per proposal step; a step that times out becomes a hole (``has_timeout``)."""
    use_sorry: bool = True
    """Allow holes at all; False abandons any proposal that needs one (plain checking)."""
    cuts: Cuts = "partial_first"
    """Order of granularities tried for a hole: ``partial_first`` (each block's last single-goal partial state,
    then its entry), ``entry`` (block entries only, the paper's Isabelle granularity), ``entry_then_partial``."""
    erp: bool = False
    """Efficient recursive proving: one extra model query per hole the ladder cannot fill (Sec. 3.3)."""
    erp_max_tokens: int = 512
    """Token limit of an ERP completion."""
    max_rounds: int | None = None
    """Stop after this many candidate semi-proofs (None: no limit)."""
    max_checker_calls: int | None = None
    """Stop after this many prover calls per proposal (None: no limit)."""
    atp: bool = False
    """Append CoqHammer's ``hammer`` (ATP mode, needs E prover) to the ladder."""

    def __post_init__(self) -> None:
        if isinstance(self.hammers, str) or not isinstance(self.hammers, (tuple, list)):
            raise TypeError(f"hammers must be a tuple of tactic strings, got {self.hammers!r}")
        for h in self.hammers:
            if not isinstance(h, str) or not h.strip() or h.strip().endswith("."):
                raise ValueError(f"hammers must hold non-empty tactics without a final '.', got {h!r}")
        object.__setattr__(self, "hammers", tuple(h.strip() for h in self.hammers))
        object.__setattr__(
            self, "hammer_timeout", check_float("hammer_timeout", self.hammer_timeout, min=0.0, min_open=True)
        )
        object.__setattr__(self, "step_timeout", check_float("step_timeout", self.step_timeout, min=0.0, min_open=True))
        check_bool("use_sorry", self.use_sorry)
        check_choice("cuts", self.cuts, ("partial_first", "entry", "entry_then_partial"))
        check_bool("erp", self.erp)
        object.__setattr__(self, "erp_max_tokens", check_int("erp_max_tokens", self.erp_max_tokens, min=1))
        object.__setattr__(self, "max_rounds", check_int("max_rounds", self.max_rounds, min=1, allow_none=True))
        object.__setattr__(
            self, "max_checker_calls", check_int("max_checker_calls", self.max_checker_calls, min=1, allow_none=True)
        )
        check_bool("atp", self.atp)

    @property
    def ladder(self) -> tuple[str, ...]:
        """The hammers actually tried: ``hammers`` plus ``hammer`` when ``atp``."""
        return self.hammers + (("hammer",) if self.atp and "hammer" not in self.hammers else ())


@dataclass(frozen=True)
class Problem:
    """One formal problem, in its ``language``.

    Coq: ``statement`` is a single ``Theorem``/``Lemma``/``Example`` ending in ``.``, ``header`` the commands before
    it. Lean 4: ``statement`` is the ``theorem`` without ``:= by``, ``header`` e.g. ``import Mathlib``. Isabelle:
    ``statement`` is ``theorem name: "…"``, ``header`` the imports (``Complex_Main`` or ``imports … begin …``).
    """

    name: str
    header: str
    statement: str
    informal_statement: str = ""
    informal_proof: str = ""
    language: Literal["coq", "lean", "isabelle"] = "coq"

    def __post_init__(self) -> None:
        for arg in ("name", "header", "statement", "informal_statement", "informal_proof"):
            if not isinstance(getattr(self, arg), str):
                raise TypeError(f"{arg} must be a str, got {type(getattr(self, arg)).__name__}")
        check_choice("language", self.language, ("coq", "lean", "isabelle"))
        if not self.statement.strip():
            raise ValueError("statement must be a non-empty theorem statement, got ''")
        if self.language == "coq":
            m = _STATEMENT.match(self.statement)
            if m is None or not self.statement.rstrip().endswith("."):
                raise ValueError(
                    f"statement must be one 'Theorem'/'Lemma'/'Example' ending in '.', got {self.statement[:60]!r}"
                )
            if m.group(2) != self.name:
                raise ValueError(f"name must be the statement's name {m.group(2)!r}, got {self.name!r}")
            from proofaug.structure import split_sentences

            if len([s for s in split_sentences(self.statement) if s.kind != "blank"]) != 1:
                raise ValueError(f"statement must be exactly one sentence, got {self.statement[:60]!r}")
            open_tail = [s for s in split_sentences(self.header) if s.kind != "blank" and not s.terminated]
            if open_tail:
                raise ValueError(
                    f"header must end every sentence with a period, got {open_tail[0].code[:60]!r} "
                    "(coqtop would wait for the period)"
                )
