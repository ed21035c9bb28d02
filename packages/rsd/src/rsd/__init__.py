"""Reward-Guided Speculative Decoding (ICML 2025): step-level draft/target mixing with a process reward model, on transformers or any OpenAI-compatible server."""

from importlib.metadata import version as _version

__version__ = _version("icml25-rsd")
