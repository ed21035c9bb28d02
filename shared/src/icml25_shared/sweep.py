"""Seed sweeps: one package's reproduction at several base seeds, summarised claim by claim.

``icml25 sweep NAME --seeds 0 1 2`` runs ``reproduce(seed=s)`` for each ``s`` (see :mod:`icml25_shared.cli`) and
:func:`summarize_seeds` turns the results into ``seeds_<mode>.json``: for every claim its verdict and measured
figure at each base seed and whether the verdicts **agree up to inconclusive** (a claim that holds at one seed and
does not hold at another is a verdict that depends on the seed; one that holds at one seed and is inconclusive at
another is not). :func:`commit_sweep` stores a sweep next to a package's sources
(``packages/<name>/reproduction/<mode>/``): the first seed's result, its plots and log, and ``seeds.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from icml25_shared.report import ReproResult, _jsonable
from icml25_shared.verdict import FAILS, HOLDS

__all__ = ["summarize_seeds", "write_seeds_json", "commit_sweep", "agree"]


def agree(verdicts: Sequence[str]) -> bool:
    """True when no two verdicts are ``holds`` and ``does not hold`` (inconclusive, shown, skipped never clash)."""
    return not (HOLDS in verdicts and FAILS in verdicts)


def summarize_seeds(results: Sequence[ReproResult]) -> dict[str, Any]:
    """One package's results at several base seeds -> per-claim verdicts, figures and agreement.

    Claims are matched by their label (``short``, else the cut text) in the first result's order; a claim missing
    at some seed is recorded as missing there.
    """
    if not results:
        raise ValueError("results must hold at least one ReproResult, got none")
    packages = {r.package for r in results}
    modes = {r.mode for r in results}
    if len(packages) != 1 or len(modes) != 1:
        raise ValueError(f"results must come from one package and one mode, got {sorted(packages)} / {sorted(modes)}")
    seeds = [r.seed for r in results]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"results must have distinct seeds, got {seeds}")
    labels: list[str] = []
    for r in results:
        for c in r.claims:
            if c.label not in labels:
                labels.append(c.label)
    claims = []
    for label in labels:
        per_seed: dict[str, Any] = {}
        text = rule = ""
        for r in results:
            found = next((c for c in r.claims if c.label == label), None)
            if found is None:
                per_seed[str(r.seed)] = {"verdict": "missing", "measured": None}
                continue
            text, rule = text or found.text, rule or found.rule
            per_seed[str(r.seed)] = {"verdict": found.verdict, "measured": found.measured}
        verdicts = [v["verdict"] for v in per_seed.values()]
        claims.append({"label": label, "text": text, "rule": rule, "per_seed": per_seed, "agree": agree(verdicts)})
    return _jsonable(
        {
            "package": results[0].package,
            "mode": results[0].mode,
            "seeds": seeds,
            "written": datetime.now(UTC).isoformat(timespec="seconds"),
            "agree": all(c["agree"] for c in claims),
            "claims": claims,
            "runs": [
                {
                    "seed": r.seed,
                    "crashed": r.crashed,
                    "skipped": r.skipped,
                    "runtime_s": r.runtime_s,
                    "cpu_s": r.cpu_s,
                    "load_1min": r.machine.get("load_1min"),
                }
                for r in results
            ],
        }
    )


def write_seeds_json(path: str | Path, results: Sequence[ReproResult]) -> Path:
    """Write :func:`summarize_seeds` of ``results`` to ``path``; returns it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(summarize_seeds(results), indent=1) + "\n", encoding="utf-8")
    return p


def commit_sweep(
    results: Sequence[ReproResult], sweep_dirs: Sequence[Path], dest: str | Path, *, mode: str
) -> list[Path]:
    """Store a sweep in ``dest`` (``packages/<name>/reproduction/<mode>``): the first seed's result JSON, log and
    plots (copied from ``sweep_dirs[0]``) and ``seeds.json``; earlier files of that mode are replaced. Returns the
    written paths."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    first = Path(sweep_dirs[0])
    written = []
    for old in dest.glob("*.png"):
        old.unlink()
    for f in sorted(first.iterdir()):
        if f.is_file() and (f.suffix in (".png", ".svg") or f.name in (f"result_{mode}.json", f"log_{mode}.txt")):
            shutil.copy2(f, dest / f.name)
            written.append(dest / f.name)
    written.append(write_seeds_json(dest / "seeds.json", results))
    return written
