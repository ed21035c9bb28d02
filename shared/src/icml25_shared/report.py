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
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from icml25_shared.verdict import FAILS, HOLDS, INCONCLUSIVE, SHOWN, SKIPPED, VERDICTS, judge

__all__ = [
    "Claim",
    "MissingPrerequisite",
    "verdict_counts",
    "counts_text",
    "ReproResult",
    "results_dir",
    "save_figure",
    "subplots",
    "claims_table",
    "verdict_text",
    "Stopwatch",
    "load_results",
    "load_committed",
]


class MissingPrerequisite(RuntimeError):
    """Raised by a ``reproduce`` that needs a system program that is not on the machine.

    The ``icml25`` command reports the reproduction as **skipped** with ``"needs <program> — <install>"`` (exit 0),
    not as crashed: ``raise MissingPrerequisite("coqtop", "apt-get install coq")``.
    """

    def __init__(self, program: str, install: str) -> None:
        self.program, self.install = program, install
        super().__init__(f"needs `{program}` — `{install}`")


@dataclass
class Claim:
    """One claim of a paper checked at small scale.

    ``paper`` and ``measured`` are the figures side by side (numbers or short strings); ``holds`` is the verdict
    (``None``: not decided); ``rule`` says how the verdict was decided, e.g. ``"MSE <= 1.05 x DLinear"``.
    ``verdict`` is one of ``"holds"``, ``"does not hold"``, ``"inconclusive"`` (judged over seeds, the interval
    straddles the rule), ``"shown"`` (not judged) or ``"skipped"``; derived from ``holds`` when left empty.
    A claim measured over seeds is best built with :meth:`over_seeds`.
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
    verdict: str = ""

    def __post_init__(self) -> None:
        if self.holds is not None and not isinstance(self.holds, bool):
            self.holds = bool(self.holds)
        if not self.verdict:
            self.verdict = SHOWN if self.holds is None else (HOLDS if self.holds else FAILS)
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        expected = {HOLDS: True, FAILS: False}.get(self.verdict)
        if self.holds is not None and self.holds is not expected:
            raise ValueError(f"holds={self.holds!r} contradicts verdict={self.verdict!r}")
        self.holds = expected

    @property
    def label(self) -> str:
        """``short`` when given, else ``text`` cut to 32 characters."""
        if self.short:
            return self.short
        return self.text if len(self.text) <= 32 else self.text[:31].rstrip() + "…"

    @classmethod
    def over_seeds(
        cls,
        text: str,
        paper: float | str | None,
        values: Iterable[float],
        op: str,
        threshold: float,
        *,
        seeds: Sequence[int],
        rule: str,
        unit: str = "",
        short: str = "",
        details: dict[str, Any] | None = None,
        digits: int = 3,
        level: float = 0.95,
    ) -> Claim:
        """A claim judged on the interval of its figure over ``seeds`` (:func:`icml25_shared.verdict.judge`).

        ``measured`` reads ``"mean ± sd [lo, hi], n seeds"``; ``details["seeds"]`` holds the per-seed values,
        mean, s.d. and interval; the rule is stated with the interval it was judged on.
        """
        verdict, sp = judge(values, op, threshold, seeds=seeds, level=level)
        how = "" if sp.n == 1 else f"; judged on the {int(level * 100)}% t-interval of the mean over {sp.n} seeds"
        return cls(
            text,
            paper,
            sp.text(digits, unit),
            None,
            rule=f"{rule}{how}",
            unit=unit,
            details={**(details or {}), "seeds": sp.to_dict(), "rule_op": op, "rule_threshold": float(threshold)},
            short=short,
            verdict=verdict,
        )


def verdict_text(holds: bool | None) -> str:
    """``holds`` / ``does not hold`` / ``shown`` from a ``holds`` value (use ``Claim.verdict`` for all five)."""
    return SHOWN if holds is None else (HOLDS if holds else FAILS)


def verdict_counts(claims: Iterable[Claim]) -> dict[str, int]:
    """How many claims have each verdict (every verdict present, zeros included)."""
    out: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    for c in claims:
        out[c.verdict] += 1
    return out


def counts_text(claims: Iterable[Claim]) -> str:
    """``"3 hold · 1 does not hold · 1 inconclusive · 2 shown"`` (skipped added only when present)."""
    n = verdict_counts(claims)
    parts = [
        f"{n[HOLDS]} hold",
        f"{n[FAILS]} {'does' if n[FAILS] == 1 else 'do'} not hold",
        f"{n[INCONCLUSIVE]} inconclusive",
        f"{n[SHOWN]} shown",
    ]
    if n[SKIPPED]:
        parts.append(f"{n[SKIPPED]} skipped")
    return " · ".join(parts)


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
        return _jsonable(cast(Any, x).item())
    if hasattr(x, "tolist"):
        return _jsonable(cast(Any, x).tolist())
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
    seed: int = 0
    """The base seed the run was given (``icml25 reproduce --seed``)."""
    skipped: str = ""
    """Why the reproduction did not run (a missing system program), empty when it ran."""

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
        return all(c.verdict != FAILS for c in self.claims)

    @property
    def counts(self) -> str:
        """``"N hold · M do not hold · K inconclusive · S shown"``."""
        return counts_text(self.claims)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for c, claim in zip(d["claims"], self.claims):
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
            c.pop("label", None)
            claims.append(Claim(**c))
        known = {f for f in cls.__dataclass_fields__ if f not in ("package", "claims")}
        res = cls(d["package"], claims, **{k: v for k, v in d.items() if k in known})
        setattr(res, "source_dir", Path(path).parent)  # where its plots are: not a field, never serialised  # noqa: B010
        return res


def load_results(folder: str | os.PathLike[str], pattern: str = "*/result_*.json") -> list[ReproResult]:
    """Every ``<package>/result_<mode>.json`` under ``folder``, sorted by package then mode (quick first).

    ``pattern`` selects other layouts, e.g. ``"packages/*/reproduction/*/result_*.json"`` for the committed results
    of a checkout (:func:`load_committed`).
    """
    out = []
    for p in sorted(Path(folder).glob(pattern)):
        try:
            out.append(ReproResult.load_json(p))
        except (ValueError, KeyError, TypeError):  # not one of ours, or from an older layout: skip
            continue
    return sorted(out, key=lambda r: (r.package, r.mode != "quick"))


def load_committed(root: str | os.PathLike[str] = ".") -> list[ReproResult]:
    """The committed quick and full results of every package in a checkout (``packages/*/reproduction/*/``)."""
    return load_results(root, "packages/*/reproduction/*/result_*.json")


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


def with_unit(x: Any, unit: str) -> str:
    """``x`` formatted, with `` unit`` after a number (a text figure carries its own units)."""
    is_number = isinstance(x, (int, float)) and not isinstance(x, bool)
    return _fmt(x) + (f" {unit}" if unit and is_number else "")


def claims_table(results: list[ReproResult], title: str = "icml25 reproductions"):
    """A compact ``rich.table.Table``, one row per claim, that fits 120 columns.

    Columns: package, the claim's short label, paper, measured, verdict. The long text and the rule of each claim
    are in the JSON and the HTML report (:mod:`icml25_shared.html_report`).
    """
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("package", no_wrap=True, max_width=16, overflow="ellipsis", style="bold")
    table.add_column("claim", no_wrap=True, max_width=30, overflow="ellipsis")
    table.add_column("paper", no_wrap=True, max_width=16, overflow="ellipsis", justify="right")
    table.add_column("measured", no_wrap=True, max_width=30, overflow="ellipsis", justify="right")
    table.add_column("verdict", no_wrap=True)
    styles = {HOLDS: "green", FAILS: "red", INCONCLUSIVE: "magenta", SHOWN: "yellow", SKIPPED: "dim"}
    for r in results:
        for i, c in enumerate(r.claims):
            table.add_row(
                r.package + ("" if r.mode == "quick" else f" ({r.mode})") if i == 0 else "",
                c.label,
                with_unit(c.paper, c.unit),
                with_unit(c.measured, c.unit),
                f"[{styles[c.verdict]}]{c.verdict}[/]",
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
