"""The bundled real data sets of icml25 (ETTh1, ETTh2, Cora, CiteSeer, Tiny Shakespeare), files unmodified.

Read them through :mod:`icml25_shared.data` (``resolve``, ``file_path``, ``copy_to``), which verifies every file's
sha256; :func:`root` is the folder that holds ``ett/``, ``planetoid/`` and ``tinyshakespeare/``.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

__all__ = ["root", "__version__"]
__version__ = version("icml25-datasets")


def root() -> Path:
    """The folder holding the data sets (laid out like ``$ICML25_DATA``)."""
    return Path(__file__).resolve().parent
