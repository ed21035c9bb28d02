"""EAGLES (ICML 2025): federated GNN training on Flower with consensus weight masks and mixture-of-experts graph sparsification."""

from importlib.metadata import version as _version

__version__ = _version("icml25-eagles")
