"""The prover interface every backend implements (Coq, Lean 4 REPL, Isabelle server)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from proofaug.config import Problem

__all__ = [
    "BackendError",
    "StatementError",
    "StepResult",
    "CheckResult",
    "ProverBackend",
    "normalize_goals",
]


class BackendError(RuntimeError):
    """The prover process crashed, hung past its watchdog or could not be started (it has been restarted)."""


class StatementError(ValueError):
    """The theorem statement itself fails (the prover's message is included); no proposal can help."""


@dataclass(frozen=True)
class StepResult:
    """Result of one sentence/tactic: ``state`` is the prover state after it (unchanged on failure)."""

    ok: bool
    state: Any
    goals: str = ""
    message: str = ""
    timed_out: bool = False


@dataclass(frozen=True)
class CheckResult:
    """Result of the independent final check: ``assumptions`` lists what the proof depends on."""

    ok: bool
    message: str = ""
    assumptions: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class ProverBackend(Protocol):
    """A persistent interactive prover. ``calls`` counts ``run`` and ``check`` calls (the checker-call log)."""

    calls: int

    def start(self, problem: Problem) -> StepResult:
        """Load the problem's header (cached) and enter its statement; a failed result means the statement fails."""
        ...

    def run(self, state: Any, sentence: str, timeout: float) -> StepResult:
        """Execute one sentence from ``state`` (rewinding to it when needed)."""
        ...

    def run_hammer(self, state: Any, tactic: str, timeout: float) -> StepResult:
        """Run one automation tactic from ``state``; fails unless it closes the focused goal."""
        ...

    def check(self, problem: Problem, proof: str, timeout: float) -> CheckResult:
        """Independent final check of statement + proof in a fresh process."""
        ...

    def close(self) -> None:
        """Stop the prover processes this backend started."""
        ...


_IDS = re.compile(r"\s*\(ID \d+\)")


def normalize_goals(text: str) -> str:
    """Goal display with ``(ID n)`` and trailing blanks removed (goal lists compare on this)."""
    lines = [_IDS.sub("", ln).rstrip() for ln in text.strip().splitlines()]
    return "\n".join(ln for ln in lines if ln)
