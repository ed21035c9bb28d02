"""ProofAug (ICML 2025): repair model-written proofs at every granularity with maximal compatible semi-proofs, on Coq, Lean 4 or Isabelle."""

from importlib.metadata import version as _version

__version__ = _version("icml25-proofaug")
