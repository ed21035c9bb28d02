"""FRUGAL (ICML 2025): memory-efficient optimization by gradient splitting."""

from importlib.metadata import version as _version

__version__ = _version("icml25-frugal")
