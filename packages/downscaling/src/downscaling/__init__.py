"""Enough of Scaling (ICML 2025): prune, distill, quantize, select and ensemble language models, with measured or estimated energy per token."""

from importlib.metadata import version as _version

__version__ = _version("icml25-downscaling")
