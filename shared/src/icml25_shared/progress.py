"""Progress bars for long work (training loops, sweeps, federated rounds).

Quiet when stderr is not a terminal or ``ICML25_PROGRESS=0``; forced on with ``ICML25_PROGRESS=1``.
Used by every package with a training loop. tqdm is optional (``icml25-shared[report]``): without it
:func:`track` returns a silent iterator with the same ``set_postfix``/``update``/``close`` methods, so a method
installed alone never needs the report stack.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["track", "progress_enabled", "Silent"]

T = TypeVar("T")


class Silent(Generic[T]):
    """The no-bar stand-in for a tqdm bar: iterates ``iterable``; ``set_postfix``, ``update``, ``close`` do nothing."""

    def __init__(self, iterable: Iterable[T] | None, total: int | None = None) -> None:
        self.iterable, self.total, self.n = iterable, total, 0

    def __iter__(self) -> Iterator[T]:
        if self.iterable is None:
            raise TypeError("a bar made with iterable=None is advanced by update(n), not iterated")
        for x in self.iterable:
            self.n += 1
            yield x

    def __len__(self) -> int:
        return self.total if self.total is not None else len(self.iterable)  # type: ignore[arg-type]

    def set_postfix(self, *args: Any, **kw: Any) -> None:
        """No-op."""

    def set_description(self, *args: Any, **kw: Any) -> None:
        """No-op."""

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps (no display)."""
        self.n += n

    def close(self) -> None:
        """No-op."""

    def __enter__(self) -> Silent[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_enabled(disable: bool | None = None) -> bool:
    """Whether to draw a bar: an explicit ``disable`` wins, then ``ICML25_PROGRESS``, then "stderr is a tty"."""
    if disable is not None:
        return not disable
    env = os.environ.get("ICML25_PROGRESS")
    if env is not None:
        return env not in ("0", "false", "no", "")
    return sys.stderr.isatty()


def track(
    iterable: Iterable[T] | None,
    description: str = "",
    total: int | None = None,
    disable: bool | None = None,
    **kw: Any,
) -> Any:
    """A ``tqdm`` bar over ``iterable`` with the project's defaults (see module docstring); iterate it, and call
    ``set_postfix`` on it to show running metrics. With ``iterable=None`` and a ``total`` it is a manual bar,
    advanced by ``update(n)`` (usable as a context manager). Without tqdm installed, or with bars off and tqdm absent, a
    :class:`Silent` iterator."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return Silent(iterable, total)
    return tqdm(iterable, desc=description, total=total, disable=not progress_enabled(disable), **kw)
