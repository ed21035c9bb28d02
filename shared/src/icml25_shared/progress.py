"""Progress bars for long work (training loops, sweeps, federated rounds).

Quiet when stderr is not a terminal or ``ICML25_PROGRESS=0``; forced on with ``ICML25_PROGRESS=1``.
Used by every package with a training loop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["track", "progress_enabled"]

T = TypeVar("T")


def progress_enabled(disable: bool | None = None) -> bool:
    """Whether to draw a bar: an explicit ``disable`` wins, then ``ICML25_PROGRESS``, then "stderr is a tty"."""
    if disable is not None:
        return not disable
    env = os.environ.get("ICML25_PROGRESS")
    if env is not None:
        return env not in ("0", "false", "no", "")
    return sys.stderr.isatty()


def track(
    iterable: Iterable[T], description: str = "", total: int | None = None, disable: bool | None = None, **kw: object
) -> tqdm:
    """A ``tqdm`` bar over ``iterable`` with the project's defaults (see module docstring); iterate it, and call
    ``set_postfix`` on it to show running metrics."""
    return tqdm(iterable, desc=description, total=total, disable=not progress_enabled(disable), **kw)
