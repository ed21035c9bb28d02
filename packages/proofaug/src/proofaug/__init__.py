"""ProofAug (ICML 2025): repair model-written proofs at every granularity with maximal compatible semi-proofs.

Runs on Coq everywhere (Debian's ``coq``), and on Lean 4 or Isabelle where they are installed.
"""

from importlib.metadata import version as _version

from proofaug.augment import ProofAug, ProofAugResult, SemiProof
from proofaug.backends.base import BackendError, CheckResult, ProverBackend, StatementError, StepResult
from proofaug.backends.coq import CoqBackend
from proofaug.config import COQ_LADDER, COQ_QUICK_LADDER, Problem, ProofAugConfig

__version__ = _version("icml25-proofaug")

__all__ = [
    "COQ_LADDER",
    "COQ_QUICK_LADDER",
    "BackendError",
    "CheckResult",
    "CoqBackend",
    "Problem",
    "ProofAug",
    "ProofAugConfig",
    "ProofAugResult",
    "ProverBackend",
    "SemiProof",
    "StatementError",
    "StepResult",
]
