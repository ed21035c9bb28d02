"""Records of reproduced claims, rendered as rich tables and saved as JSON, plus plot saving.

Every package's ``reproduce`` entry point returns a :class:`ReproResult`; the ``icml25`` command prints and saves it.

A reproduction function has the signature::

    def reproduce(full: bool = False, out_dir: pathlib.Path | None = None) -> ReproResult

``out_dir`` is the folder for this package's JSON and plots (``results/<package>/`` by default, see
:func:`results_dir`); quick mode (``full=False``) must finish in under a minute on 2 CPU cores.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Claim",
    "ReproResult",
    "results_dir",
    "save_figure",
    "subplots",
    "claims_table",
    "verdict_text",
    "Stopwatch",
]


@dataclass
class Claim:
    """One claim of a paper checked at small scale.

    ``paper`` and ``measured`` are the figures side by side (numbers or short strings); ``holds`` is the verdict
    (``None``: shown, not judged); ``rule`` says how the verdict was decided, e.g. ``"MSE <= 1.05 x DLinear"``.
    """

    text: str
    paper: float | str | None
    measured: float | str | None
    holds: bool | None
    rule: str = ""
    unit: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.holds is not None and not isinstance(self.holds, bool):
            self.holds = bool(self.holds)


def verdict_text(holds: bool | None) -> str:
    """``holds`` / ``does not hold`` / ``shown``."""
    return "shown" if holds is None else ("holds" if holds else "does not hold")


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:  # numpy / torch scalars
        return _jsonable(x.item())
    if hasattr(x, "tolist"):
        return _jsonable(x.tolist())
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


@dataclass
class ReproResult:
    """The outcome of one package's reproduction run."""

    package: str
    claims: list[Claim]
    mode: str = "quick"
    runtime_s: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)

    @property
    def all_hold(self) -> bool:
        """True when no judged claim fails."""
        return all(c.holds is not False for c in self.claims)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for c in d["claims"]:
            c["verdict"] = verdict_text(c["holds"])
        d["environment"] = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
        return _jsonable(d)

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` as indented JSON; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        if str(p) not in self.artifacts:
            self.artifacts.append(str(p))
        return p

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> ReproResult:
        """Read a result written by :meth:`save_json`."""
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        claims = []
        for c in d["claims"]:
            c.pop("verdict", None)
            claims.append(Claim(**c))
        return cls(
            d["package"],
            claims,
            d.get("mode", "quick"),
            d.get("runtime_s", 0.0),
            d.get("settings", {}),
            d.get("artifacts", []),
        )


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3g}"
        return f"{x:.4g}"
    return str(x)


def claims_table(results: list[ReproResult], title: str = "icml25 reproductions"):
    """A ``rich.table.Table`` with one row per claim: package, claim, paper, measured, rule, verdict."""
    from rich.table import Table

    table = Table(title=title, show_lines=True)
    for col in ("package", "claim", "paper", "measured", "rule", "verdict"):
        table.add_column(col, overflow="fold")
    styles = {True: "green", False: "red", None: "yellow"}
    for r in results:
        for c in r.claims:
            unit = f" {c.unit}" if c.unit else ""
            table.add_row(
                r.package,
                c.text,
                _fmt(c.paper) + (unit if c.paper is not None else ""),
                _fmt(c.measured) + (unit if c.measured is not None else ""),
                c.rule,
                f"[{styles[c.holds]}]{verdict_text(c.holds)}[/]",
            )
    return table


def results_dir(package: str, out: str | os.PathLike[str] | None = None) -> Path:
    """``<out>/<package>`` (``out`` defaults to ``$ICML25_RESULTS`` or ``./results``), created."""
    base = Path(out) if out is not None else Path(os.environ.get("ICML25_RESULTS", "results"))
    d = base / package
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_figure(fig: Any, out_dir: str | os.PathLike[str], name: str, *, dpi: int = 120) -> Path:
    """Save a matplotlib figure as ``out_dir/name.png`` (Agg backend, no display needed) and close it."""
    p = Path(out_dir) / (name if name.endswith(".png") else f"{name}.png")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi, bbox_inches="tight")
    import matplotlib.pyplot as plt

    if plt.fignum_exists(getattr(fig, "number", -1)):
        plt.close(fig)
    return p


def subplots(nrows: int = 1, ncols: int = 1, **kw: Any) -> tuple[Any, Any]:
    """``(fig, axes)`` like ``plt.subplots`` but on a pyplot-free ``Figure`` (thread-safe, no display, no leak)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=kw.pop("figsize", (6.4 * ncols, 4.2 * nrows)), layout=kw.pop("layout", "constrained"))
    axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.seconds`` -- wall-clock time of a block."""

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
