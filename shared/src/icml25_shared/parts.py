"""Resumable long runs: each finished part of a ``--full`` reproduction is stored as one JSON file and reused.

::

    parts = Parts(out_dir / "parts", fingerprint={"n_train": 8192, "seed": s})
    r = parts.run("qp_100_seed0", lambda: run_pipeline(problem, settings))

A part is written atomically (a temporary file renamed into place) only after it finished, so a run killed halfway
through a part leaves no half-written file; the next run recomputes that part and reuses every finished one. Each
file stores the ``fingerprint`` it was computed under (sizes, seeds, versions: whatever decides the result); a part
whose stored fingerprint differs is recomputed, never reused. Results must be JSON-serialisable (dicts, lists,
numbers, strings; NaN and infinities are kept).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["Parts"]

T = TypeVar("T")
_MISSING = object()
_NAME = re.compile(r"^[A-Za-z0-9_.=-]+$")


def _canonical(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True, default=str))


class Parts:
    """A folder of finished parts, keyed by name and checked against a fingerprint."""

    def __init__(self, folder: str | os.PathLike[str], *, fingerprint: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        self.fingerprint = _canonical(fingerprint or {})
        self.reused: list[str] = []
        self.computed: list[str] = []

    def path(self, name: str) -> Path:
        """The file of part ``name``."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"name must be a non-empty string of letters, digits and _.=-, got {name!r}")
        return self.folder / f"{name}.json"

    def load(self, name: str, default: Any = None) -> Any:
        """The stored result of ``name`` when it exists and was computed under this fingerprint, else ``default``."""
        p = self.path(name)
        if not p.is_file():
            return default
        try:
            stored = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return default  # unreadable: recompute (it is rewritten atomically)
        if not isinstance(stored, dict) or stored.get("fingerprint") != self.fingerprint or "result" not in stored:
            return default
        return stored["result"]

    def done(self, name: str) -> bool:
        """Whether part ``name`` finished under this fingerprint."""
        return self.load(name, _MISSING) is not _MISSING

    def save(self, name: str, result: Any) -> Path:
        """Store ``result`` as part ``name`` (atomically); returns the file."""
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"fingerprint": self.fingerprint, "result": result}, indent=1, default=_default)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload + "\n")
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """``fn()``'s result for part ``name``: loaded when finished before under this fingerprint, else computed,
        stored and returned as stored (so a fresh and a resumed run return the same JSON-shaped values)."""
        found = self.load(name, _MISSING)
        if found is not _MISSING:
            self.reused.append(name)
            return found  # type: ignore[no-any-return]
        self.save(name, fn())
        self.computed.append(name)
        return self.load(name)  # type: ignore[no-any-return]


def _default(x: Any) -> Any:
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"a part's result must be JSON-serialisable, got {type(x).__name__}: {x!r}"[:200])
