"""Prover backends: the ``ProverBackend`` protocol, Coq (``coqtop``/``coqc``), the Lean 4 REPL and the Isabelle
server."""

from proofaug.backends.base import BackendError, CheckResult, ProverBackend, StatementError, StepResult
from proofaug.backends.coq import CoqBackend, coq_available, hammer_available
from proofaug.backends.isabelle import ISABELLE_LADDER, IsabelleBackend, isabelle_available
from proofaug.backends.lean import LEAN_LADDER, LeanReplBackend

__all__ = [
    "ISABELLE_LADDER",
    "IsabelleBackend",
    "isabelle_available",
    "LEAN_LADDER",
    "BackendError",
    "CheckResult",
    "CoqBackend",
    "LeanReplBackend",
    "ProverBackend",
    "StatementError",
    "StepResult",
    "coq_available",
    "hammer_available",
]
