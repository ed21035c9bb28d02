"""ProofAug (ICML 2025): repair model-written proofs at every granularity with maximal compatible semi-proofs.

Runs on Coq everywhere (Debian's ``coq``), and on Lean 4 or Isabelle where they are installed.
"""

from importlib.metadata import version as _version

from proofaug.augment import ProofAug, ProofAugResult, SemiProof
from proofaug.backends.base import BackendError, CheckResult, ProverBackend, StatementError, StepResult
from proofaug.backends.coq import CoqBackend
from proofaug.backends.isabelle import ISABELLE_LADDER, IsabelleBackend
from proofaug.backends.lean import LEAN_LADDER, LeanReplBackend
from proofaug.config import COQ_LADDER, COQ_QUICK_LADDER, Problem, ProofAugConfig
from proofaug.pool import Job, ProveResult, ProverPool, prove
from proofaug.proposers import FileProposals, OpenAIProposer, TransformersProposer
from proofaug.suite import load_minif2f_rocq, load_suite

__version__ = _version("icml25-proofaug")

__all__ = [
    "COQ_LADDER",
    "COQ_QUICK_LADDER",
    "BackendError",
    "CheckResult",
    "CoqBackend",
    "FileProposals",
    "ISABELLE_LADDER",
    "IsabelleBackend",
    "LEAN_LADDER",
    "Job",
    "LeanReplBackend",
    "OpenAIProposer",
    "Problem",
    "ProofAug",
    "ProofAugConfig",
    "ProofAugResult",
    "ProveResult",
    "ProverBackend",
    "ProverPool",
    "SemiProof",
    "StatementError",
    "StepResult",
    "TransformersProposer",
    "load_minif2f_rocq",
    "load_suite",
    "prove",
]
