"""Records of reproduced claims, rendered as rich tables and saved as JSON, plus plot saving.

Every package's ``reproduce`` entry point returns a :class:`ReproResult`; the ``icml25`` command prints and saves it.

A reproduction function has the signature::

    def reproduce(full: bool, out_dir: pathlib.Path, *, download: bool = False) -> ReproResult

It runs the experiments, compares them with the paper's figures and returns the claims, the settings it used and
the paths of the plots it saved into ``out_dir``. It does not write JSON, time itself or decide where results go:
the ``icml25`` command resolves ``out_dir``, runs each reproduction in its own process on one torch thread, stamps
mode, runtime, CPU time, versions and machine (:meth:`ReproResult.stamp`) and writes ``result_<mode>.json``.
``download`` allows fetching registered data sets (sha256-verified) that are not on the machine. Quick mode
(``full=False``) must finish in under a minute of CPU time on one torch thread.
"""

from __future__ import annotations

import contextlib
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
    "load_results",
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
    short: str = ""
    """A name of at most 32 characters for one-line tables (``"MSE vs DLinear"``); defaults to ``text`` cut."""

    def __post_init__(self) -> None:
        if self.holds is not None and not isinstance(self.holds, bool):
            self.holds = bool(self.holds)

    @property
    def label(self) -> str:
        """``short`` when given, else ``text`` cut to 32 characters."""
        if self.short:
            return self.short
        return self.text if len(self.text) <= 32 else self.text[:31].rstrip() + "…"


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
    cpu_s: float = 0.0
    started: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    crashed: bool = False

    def stamp(self, *, mode: str, runtime_s: float, cpu_s: float, started: str, out_dir: Path | None = None) -> None:
        """Record how the run went (the ``icml25`` command calls this; a ``reproduce`` never does).

        Artefact paths are made relative to ``out_dir`` so that a results folder can be moved or served as is.
        """
        self.mode, self.runtime_s, self.cpu_s, self.started = mode, float(runtime_s), float(cpu_s), started
        self.versions = _versions(self.package)
        self.machine = _machine()
        if out_dir is not None:
            rel = []
            for a in self.artifacts:
                p = Path(a)
                try:
                    rel.append(str(p.resolve().relative_to(Path(out_dir).resolve())))
                except ValueError:
                    rel.append(str(p))
            self.artifacts = rel

    @property
    def all_hold(self) -> bool:
        """True when no judged claim fails."""
        return all(c.holds is not False for c in self.claims)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for c, claim in zip(d["claims"], self.claims):
            c["verdict"] = verdict_text(c["holds"])
            c["label"] = claim.label
        return _jsonable(d)

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` as indented JSON; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return p

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> ReproResult:
        """Read a result written by :meth:`save_json`."""
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        claims = []
        for c in d["claims"]:
            c.pop("verdict", None)
            c.pop("label", None)
            claims.append(Claim(**c))
        known = {f for f in cls.__dataclass_fields__ if f not in ("package", "claims")}
        return cls(d["package"], claims, **{k: v for k, v in d.items() if k in known})


def load_results(folder: str | os.PathLike[str]) -> list[ReproResult]:
    """Every ``<package>/result_<mode>.json`` under ``folder``, sorted by package then mode (quick first)."""
    out = []
    for p in sorted(Path(folder).glob("*/result_*.json")):
        try:
            out.append(ReproResult.load_json(p))
        except (ValueError, KeyError, TypeError):  # not one of ours, or from an older layout: skip
            continue
    return sorted(out, key=lambda r: (r.package, r.mode != "quick"))


def _versions(package: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    dists = [f"icml25-{package.replace('_', '-')}", "icml25-shared", "numpy", "torch"]
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def _machine() -> dict[str, Any]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info: dict[str, Any] = {"system": platform.system(), "arch": platform.machine(), "cpus": cpus}
    with contextlib.suppress(OSError):
        info["load_1min"] = round(os.getloadavg()[0], 2)
    import sys

    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3g}"
        return f"{x:.4g}"
    return str(x)


def claims_table(results: list[ReproResult], title: str = "icml25 reproductions"):
    """A compact ``rich.table.Table``, one row per claim, that fits 120 columns.

    Columns: package, the claim's short label, paper, measured, verdict. The long text and the rule of each claim
    are in the JSON and the HTML report (:mod:`icml25_shared.html_report`).
    """
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("package", no_wrap=True, max_width=16, overflow="ellipsis", style="bold")
    table.add_column("claim", no_wrap=True, max_width=34, overflow="ellipsis")
    table.add_column("paper", no_wrap=True, max_width=20, overflow="ellipsis", justify="right")
    table.add_column("measured", no_wrap=True, max_width=20, overflow="ellipsis", justify="right")
    table.add_column("verdict", no_wrap=True)
    styles = {True: "green", False: "red", None: "yellow"}
    for r in results:
        for i, c in enumerate(r.claims):
            unit = f" {c.unit}" if c.unit else ""
            table.add_row(
                r.package + ("" if r.mode == "quick" else f" ({r.mode})") if i == 0 else "",
                c.label,
                _fmt(c.paper) + (unit if c.paper is not None else ""),
                _fmt(c.measured) + (unit if c.measured is not None else ""),
                f"[{styles[c.holds]}]{verdict_text(c.holds)}[/]",
                end_section=i == len(r.claims) - 1,
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
