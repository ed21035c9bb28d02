"""Amortized IRT / REEval (ICML 2025): sparse MML-EM Rasch/2PL/3PL, content-based amortized difficulty, vectorised Fisher-information adaptive testing of language models."""

from importlib.metadata import version as _version

__version__ = _version("icml25-amortized-irt")
