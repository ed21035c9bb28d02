"""The ``icml25`` command.

``icml25 list`` shows the installed reproductions; ``icml25 reproduce NAME... | --all [--full] [--out DIR]`` runs
them. Reproductions are discovered through the ``icml25.reproductions`` entry-point group: each package registers
``NAME = "pkg.reproduce:reproduce"``, a function ``reproduce(full: bool = False, out_dir: Path | None = None) ->
ReproResult``. A claim that does not hold is reported, not an error; a reproduction that crashes makes the command
exit non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from rich.console import Console

from icml25_shared.report import Claim, ReproResult, claims_table, results_dir

__all__ = ["main", "discover", "run_reproductions", "GROUP"]

GROUP = "icml25.reproductions"


def discover() -> dict[str, EntryPoint]:
    """Installed reproductions by name (sorted)."""
    eps = entry_points(group=GROUP)
    return {ep.name: ep for ep in sorted(eps, key=lambda e: e.name)}


def _summary(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ep.value
    summary = dist.metadata.get("Summary") or ""
    return f"{dist.metadata['Name']} {dist.version}: {summary}"


def run_reproductions(
    names: Sequence[str],
    *,
    full: bool = False,
    out: Path | None = None,
    console: Console | None = None,
    registry: dict[str, Callable[..., ReproResult]] | None = None,
) -> tuple[list[ReproResult], list[str]]:
    """Run the named reproductions; returns the results and the names that crashed."""
    console = console or Console(stderr=True)
    if registry is None:
        eps = discover()
        registry = {n: eps[n].load for n in names}  # load lazily: a broken import is that package's crash
        loaders = True
    else:
        loaders = False
    results: list[ReproResult] = []
    crashed: list[str] = []
    for i, name in enumerate(names, 1):
        mode = "full" if full else "quick"
        out_dir = results_dir(name, out)
        t0 = time.perf_counter()
        try:
            with console.status(f"[{i}/{len(names)}] reproducing [bold]{name}[/] ({mode})"):
                fn = registry[name]() if loaders else registry[name]
                res = fn(full=full, out_dir=out_dir)
            if not isinstance(res, ReproResult):
                raise TypeError(f"reproduce() of {name} returned {type(res).__name__}, expected ReproResult")
        except Exception:
            crashed.append(name)
            console.print(f"[red]{name} crashed:[/]\n{traceback.format_exc()}")
            res = ReproResult(name, [Claim("reproduction ran", None, "crashed", False)], mode)
        res.mode = mode
        if not res.runtime_s:
            res.runtime_s = time.perf_counter() - t0
        res.save_json(out_dir / f"result_{mode}.json")
        console.print(f"[{i}/{len(names)}] {name}: {len(res.claims)} claims, {res.runtime_s:.1f} s -> {out_dir}")
        results.append(res)
    return results, crashed


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icml25", description="Reproduce ICML 2025 papers' headline claims.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the installed reproductions")
    r = sub.add_parser("reproduce", help="run reproductions and print the claims table")
    r.add_argument("names", nargs="*", help="package names (see `icml25 list`)")
    r.add_argument("--all", action="store_true", help="run every installed reproduction")
    r.add_argument("--full", action="store_true", help="closer to the paper; takes minutes per package")
    r.add_argument("--out", type=Path, default=None, help="results folder (default $ICML25_RESULTS or ./results)")
    r.add_argument(
        "--download",
        action="store_true",
        help="download missing registered data sets (sha256-verified) into ~/.cache/icml25",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``icml25`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=160)
    eps = discover()
    if args.cmd == "list":
        if not eps:
            console.print("no reproductions installed")
        for name, ep in eps.items():
            console.print(f"[bold]{name}[/]  {_summary(ep)}")
        return 0
    if args.all and args.names:
        console.print("[red]give package names or --all, not both[/]")
        return 2
    names = list(eps) if args.all else list(args.names)
    if not names:
        console.print("[red]name at least one reproduction, or pass --all[/]; installed: " + ", ".join(eps))
        return 2
    unknown = [n for n in names if n not in eps]
    if unknown:
        console.print(f"[red]unknown reproduction(s): {', '.join(unknown)}[/]; installed: {', '.join(eps)}")
        return 2
    os.environ.setdefault("MPLBACKEND", "Agg")
    if args.download:
        os.environ["ICML25_DOWNLOAD"] = "1"
    results, crashed = run_reproductions(names, full=args.full, out=args.out, console=Console(stderr=True))
    console.print(claims_table(results))
    if crashed:
        console.print(f"[red]crashed: {', '.join(crashed)}[/]")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
