"""MoHD (ICML 2025): Mixture of Hidden-Dimensions Transformers."""

from importlib.metadata import version as _version

__version__ = _version("icml25-mohd")
