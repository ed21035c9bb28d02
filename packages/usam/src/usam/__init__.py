"""UncertainSAM (ICML 2025): one-pass uncertainty heads for transformers' SamModel, with the paper's Monte-Carlo baselines."""

from importlib.metadata import version as _version

__version__ = _version("icml25-usam")
