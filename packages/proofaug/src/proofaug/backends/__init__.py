"""Prover backends: the ``ProverBackend`` protocol, Coq (``coqtop``/``coqc``) and the Lean 4 REPL."""

from proofaug.backends.base import BackendError, CheckResult, ProverBackend, StatementError, StepResult
from proofaug.backends.coq import CoqBackend, coq_available, hammer_available
from proofaug.backends.lean import LEAN_LADDER, LeanReplBackend

__all__ = [
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
