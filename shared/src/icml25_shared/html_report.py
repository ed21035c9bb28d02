"""The static report of a results folder: ``index.html`` (self-contained) and ``claims.json`` (every claim).

``index.html`` needs no network and no JavaScript: inline CSS, every plot embedded as a PNG data URI and linked
to its file, one section per package with its claims (paper next to measured, verdict coloured), the rule that
decided each verdict, its runtime, versions and settings. ``icml25 reproduce`` writes both after every run, over
every ``<package>/result_<mode>.json`` in the folder; ``icml25 report`` rebuilds them alone.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from icml25_shared.report import ReproResult, _jsonable, counts_text, load_results, verdict_counts, with_unit
from icml25_shared.verdict import FAILS, HOLDS, INCONCLUSIVE, SHOWN, SKIPPED

__all__ = ["write_report", "write_claims_json", "write_index_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2327;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:0 0 6px}
.meta{color:#5b6770;font-size:12.5px}
section{background:#fff;border:1px solid #dde1e5;border-radius:8px;padding:16px 18px;margin:18px 0}
table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{border-bottom:1px solid #e6e9ec;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f4;font-weight:600;font-size:12.5px;text-transform:uppercase;letter-spacing:.02em}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.claims{table-layout:fixed}table.claims td{overflow-wrap:anywhere}
.v{font-weight:600;white-space:nowrap;border-radius:4px;padding:1px 7px}
.holds{background:#dcf5e3;color:#116329}.fails{background:#fde2e1;color:#a40e26}.shown{background:#fff4cc;color:#7a5b00}
.inconclusive{background:#e8defc;color:#5a2ca0}.skipped{background:#e6e9ec;color:#3d4a55}
.crashed{background:#a40e26;color:#fff}
.rule{color:#5b6770;font-size:12.5px}
.plots{display:flex;flex-wrap:wrap;gap:12px;margin-top:10px}
.plots figure{margin:0;flex:0 1 auto;max-width:100%}
.plots img{max-width:100%;max-height:460px;border:1px solid #e6e9ec;border-radius:4px}
figcaption{font-size:12px;color:#5b6770}
details{margin-top:8px}summary{cursor:pointer;color:#3d4a55}
pre{background:#f6f7f9;padding:8px;overflow:auto;font-size:12px}
nav a{margin-right:10px}
"""

_CLASS = {HOLDS: "holds", FAILS: "fails", INCONCLUSIVE: "inconclusive", SHOWN: "shown", SKIPPED: "skipped"}
_CRASHED = '<span class="v crashed">crashed</span>'


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _value(x: Any, unit: str) -> str:
    return _e(with_unit(x, unit))


def _plot(folder: Path, r: ReproResult, artefact: str, embed: bool = True) -> str | None:
    p = Path(artefact)
    if not p.is_absolute():
        p = Path(getattr(r, "source_dir", folder / r.package)) / p
    if p.suffix.lower() not in (".png", ".svg") or not p.is_file():
        return None
    rel = os.path.relpath(p, folder)
    if not embed:  # linked, for a report that lives next to the files (the committed results of a checkout)
        return (
            f'<figure><a href="{_e(rel)}"><img alt="{_e(p.stem)}" loading="lazy" src="{_e(rel)}"></a>'
            f"<figcaption>{_e(p.name)}</figcaption></figure>"
        )
    mime = "image/png" if p.suffix.lower() == ".png" else "image/svg+xml"
    data = base64.b64encode(p.read_bytes()).decode("ascii")
    return (
        f'<figure><a href="{_e(rel)}"><img alt="{_e(p.stem)}" src="data:{mime};base64,{data}"></a>'
        f"<figcaption>{_e(p.name)}</figcaption></figure>"
    )


def _package_section(folder: Path, r: ReproResult, embed: bool = True) -> str:
    anchor = f"{r.package}-{r.mode}"
    head = (
        f'<section id="{_e(anchor)}"><h2>{_e(r.package)} <span class="meta">({_e(r.mode)})</span>'
        + (" " + _CRASHED if r.crashed else "")
        + "</h2>"
        + (f'<div class="meta"><span class="v skipped">skipped</span> {_e(r.skipped)}</div>' if r.skipped else "")
        + f'<div class="meta">{_e(counts_text(r.claims))} — seed {r.seed} · '
        f"{r.runtime_s:.1f} s wall, {r.cpu_s:.1f} CPU-s · started {_e(r.started or '?')} · "
        + _e(", ".join(f"{k} {v}" for k, v in r.versions.items()))
        + "</div>"
    )
    rows = []
    for c in r.claims:
        rule = f'<div class="rule">rule: {_e(c.rule)}</div>' if c.rule else ""
        rows.append(
            f"<tr><td>{_e(c.text)}{rule}</td><td class='num'>{_value(c.paper, c.unit)}</td>"
            f"<td class='num'>{_value(c.measured, c.unit)}</td>"
            f'<td><span class="v {_CLASS[c.verdict]}">{_e(c.verdict)}</span></td></tr>'
        )
    table = (
        '<table class="claims"><colgroup><col style="width:46%"><col style="width:20%"><col style="width:22%">'
        '<col style="width:12%"></colgroup>'
        "<thead><tr><th>claim</th><th class='num'>paper</th><th class='num'>measured</th><th>verdict</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    plots = [f for a in r.artifacts if (f := _plot(folder, r, a, embed))]
    figs = f'<div class="plots">{"".join(plots)}</div>' if plots else ""
    settings = json.dumps(_jsonable(r.settings), indent=1, default=str)
    extra = (
        f"<details><summary>settings and machine</summary><pre>{_e(settings)}</pre>"
        f"<pre>{_e(json.dumps(_jsonable(r.machine)))}</pre></details>"
    )
    return head + table + figs + extra + "</section>"


def write_index_html(folder: str | os.PathLike[str], results: Sequence[ReproResult], *, embed: bool = True) -> Path:
    """Write ``<folder>/index.html`` for ``results`` (plots read from ``<folder>/<package>/`` or each result's own
    folder); ``embed=False`` links the plots by relative path instead of embedding them. Returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    all_claims = [c for r in results for c in r.claims]
    summary_rows = []
    for r in results:
        n = verdict_counts(r.claims)
        state = _CRASHED if r.crashed else ('<span class="v skipped">skipped</span>' if r.skipped else "")
        summary_rows.append(
            f'<tr><td><a href="#{_e(r.package)}-{_e(r.mode)}">{_e(r.package)}</a></td><td>{_e(r.mode)}</td>'
            f"<td class='num'>{r.seed}</td>"
            + "".join(f"<td class='num'>{n[v]}</td>" for v in (HOLDS, FAILS, INCONCLUSIVE, SHOWN))
            + f"<td class='num'>{r.runtime_s:.1f}</td><td class='num'>{r.cpu_s:.1f}</td>"
            f"<td>{state}</td></tr>"
        )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    body = (
        "<main><h1>icml25 reproductions</h1>"
        f'<div class="meta">{len(results)} runs · claims: {_e(counts_text(all_claims))} · report written {now}</div>'
        "<section><h2>Summary</h2><table><thead><tr><th>package</th><th>mode</th><th class='num'>seed</th>"
        "<th class='num'>hold</th><th class='num'>do not hold</th><th class='num'>inconclusive</th>"
        "<th class='num'>shown</th><th class='num'>wall s</th>"
        "<th class='num'>CPU s</th><th></th></tr></thead>"
        f"<tbody>{''.join(summary_rows)}</tbody></table></section>"
        + "".join(_package_section(folder, r, embed) for r in results)
        + "</main>"
    )
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>icml25 reproductions</title><style>{_CSS}</style></head><body>{body}</body></html>\n"
    )
    path = folder / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_claims_json(folder: str | os.PathLike[str], results: Sequence[ReproResult]) -> Path:
    """Write ``<folder>/claims.json``: every run's claims with verdicts, runtime and versions; returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"written": datetime.now(UTC).isoformat(timespec="seconds"), "runs": [r.to_dict() for r in results]}
    path = folder / "claims.json"
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return path


def write_report(
    folder: str | os.PathLike[str], results: Sequence[ReproResult] | None = None, *, embed: bool = True
) -> tuple[Path, Path, list[ReproResult]]:
    """Rebuild ``index.html`` and ``claims.json`` in ``folder`` from every result JSON under it (or ``results``)."""
    results = load_results(folder) if results is None else list(results)
    return write_index_html(folder, results, embed=embed), write_claims_json(folder, results), results
