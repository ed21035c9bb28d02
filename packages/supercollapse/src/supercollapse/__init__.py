"""Scaling Collapse (ICML 2025): compute-optimal loss-curve collapse, noise-floor analysis and schedule-aware loss prediction."""

from importlib.metadata import version as _version

__version__ = _version("icml25-supercollapse")
