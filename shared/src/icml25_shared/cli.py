"""The ``icml25`` command.

- ``icml25 list``: the installed reproductions.
- ``icml25 reproduce NAME... | --all [--full] [--seed S] [-j N] [--out DIR] [--download]``: runs them, each in
  its own process on one torch thread, ``N`` at a time (default: the usable cores), with a live progress display;
  prints one compact row per claim and writes ``<out>/<package>/result_<mode>.json``, ``<out>/claims.json`` and
  the self-contained report ``<out>/index.html``. ``--seed`` (default 0) reaches every ``reproduce(seed=...)``.
- ``icml25 sweep NAME... | --all --seeds 0 1 2 [--full] [-j N] [--out DIR] [--commit]``: the same at several base
  seeds; writes ``<out>/<package>/seeds_<mode>.json`` (each claim's verdict and figure per seed, and whether the
  verdicts agree up to *inconclusive*). ``--commit`` stores the first seed's result, its plots and ``seeds.json``
  in ``packages/<package>/reproduction/<mode>/`` (run from the repository root).
- ``icml25 report [--out DIR] [--committed]``: rebuilds ``claims.json`` and ``index.html`` from the result files
  in ``DIR``; ``--committed`` builds them from every package's committed ``reproduction/{quick,full}`` results.

Reproductions are discovered through the ``icml25.reproductions`` entry-point group: each package registers
``NAME = "pkg.reproduce:reproduce"``, a function ``reproduce(full, out_dir, *, download=False) -> ReproResult``
(see :mod:`icml25_shared.report`). A claim that does not hold is reported, not an error; a reproduction that
crashes makes the command exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

try:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table
except ImportError as _err:  # pragma: no cover - exercised by the wheel sessions without the report extra
    raise SystemExit(
        "the icml25 command needs the report extra: pip install 'icml25-shared[report]' (rich, matplotlib, tqdm)"
    ) from _err

from icml25_shared.report import ReproResult, claims_table, counts_text, load_results
from icml25_shared.runner import Job, result_path, run_jobs, usable_cpus

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


def _results_root(out: Path | None) -> Path:
    return Path(out) if out is not None else Path(os.environ.get("ICML25_RESULTS", "results"))


def _last_runtime(out_dir: Path, mode: str) -> float:
    """The previous run's wall time (to start the longest first), 0 when unknown."""
    try:
        return ReproResult.load_json(result_path(out_dir, mode)).runtime_s
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _progress_table(jobs: Sequence[Job], t0: float) -> Table:
    table = Table(box=None, pad_edge=False, show_header=False)
    for _ in range(4):
        table.add_column(no_wrap=True)
    colour = {"queued": "dim", "running": "cyan", "done": "green", "crashed": "red"}
    for j in jobs:
        claims = ""
        if j.result is not None:
            claims = j.result.skipped and f"skipped: {j.result.skipped}" or counts_text(j.result.claims)
        time_s = f"{j.elapsed:6.1f} s" if j.state != "queued" else ""
        table.add_row(j.name, f"[{colour[j.state]}]{j.state}[/]", time_s, claims)
    done = sum(j.state in ("done", "crashed") for j in jobs)
    table.add_row("", f"[bold]{done}/{len(jobs)}[/]", f"{time.perf_counter() - t0:6.1f} s", "")
    return table


def run_reproductions(
    names: Sequence[str],
    *,
    full: bool = False,
    out: Path | None = None,
    n_jobs: int | None = None,
    download: bool = False,
    console: Console | None = None,
    targets: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
) -> tuple[list[ReproResult], list[str]]:
    """Run the named reproductions in subprocesses; returns their results (in ``names`` order) and the crashed.

    ``targets`` maps a name to ``module:function`` (default: the entry points' values). With ``seeds`` every
    name runs once per seed into ``<out>/<name>/seed_<s>/`` (a sweep); otherwise once at ``seed``.
    """
    console = console or Console(stderr=True)
    root = _results_root(out)
    if targets is None:
        eps = discover()
        targets = {n: eps[n].value for n in names}
    mode = "full" if full else "quick"
    if seeds is None:
        jobs = [Job(n, targets[n], root / n, seed=seed) for n in names]
    else:
        jobs = [Job(n, targets[n], root / n / f"seed_{s}", seed=s) for n in names for s in seeds]
    order = sorted(jobs, key=lambda j: -_last_runtime(j.out_dir, mode))  # longest first: the pool ends together
    n_jobs = n_jobs or usable_cpus()
    t0 = time.perf_counter()
    console.print(
        f"reproducing {len(jobs)} package(s) ({mode}), {n_jobs} at a time, results in {root}/", soft_wrap=True
    )
    if console.is_terminal:
        with Live(_progress_table(jobs, t0), console=console, refresh_per_second=4, transient=False) as live:
            run_jobs(
                order,
                full=full,
                download=download,
                n_jobs=n_jobs,
                extra_env=extra_env,
                on_change=lambda _: live.update(_progress_table(jobs, t0)),
            )
    else:  # logs and CI: one line when a reproduction starts and when it ends
        seen: dict[str, str] = {}

        def report(_: Sequence[Job]) -> None:
            for j in jobs:
                key = str(j.out_dir)
                if seen.get(key) == j.state:
                    continue
                seen[key] = j.state
                seed = "" if j.seed is None else f" (seed {j.seed})"
                if j.state == "running":
                    console.print(f"  started  {j.name}{seed}")
                elif j.state in ("done", "crashed") and j.result is not None:
                    what = f"skipped, {j.result.skipped}" if j.result.skipped else counts_text(j.result.claims)
                    console.print(
                        f"  {j.state:<8} {j.name}{seed}: {what}; "
                        f"{j.result.runtime_s:.1f} s wall, {j.result.cpu_s:.1f} CPU-s",
                        soft_wrap=True,
                    )

        run_jobs(order, full=full, download=download, n_jobs=n_jobs, extra_env=extra_env, on_change=report)
    results = [j.result for j in jobs if j.result is not None]
    crashed = list(dict.fromkeys(j.name for j in jobs if j.state == "crashed"))
    for j in jobs:
        if j.state == "crashed":
            console.print(f"[red]{j.name} crashed[/]: see {j.out_dir / f'log_{mode}.txt'}", soft_wrap=True)
    wall = time.perf_counter() - t0
    cpu = sum(r.cpu_s for r in results)
    console.print(f"{len(results)} reproduction(s) in {wall:.1f} s wall, {cpu:.1f} CPU-s")
    console.print("claims: " + counts_text(c for r in results for c in r.claims))
    return results, crashed


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icml25", description="Reproduce ICML 2025 papers' headline claims.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the installed reproductions")
    r = sub.add_parser("reproduce", help="run reproductions; print the claims, write JSON and an HTML report")
    r.add_argument("names", nargs="*", help="package names (see `icml25 list`)")
    r.add_argument("--all", action="store_true", help="run every installed reproduction")
    r.add_argument("--full", action="store_true", help="closer to the paper; takes minutes per package")
    r.add_argument("--seed", type=_seed, default=0, help="base seed handed to every reproduce (default 0)")
    for q in (r, sw := sub.add_parser("sweep", help="reproduce at several base seeds; write seeds_<mode>.json")):
        if q is sw:
            q.add_argument("names", nargs="*", help="package names (see `icml25 list`)")
            q.add_argument("--all", action="store_true", help="every installed reproduction")
            q.add_argument("--full", action="store_true", help="sweep the --full reproductions")
            q.add_argument("--seeds", type=_seed, nargs="+", default=[0, 1, 2], help="base seeds (default 0 1 2)")
            q.add_argument(
                "--commit",
                action="store_true",
                help="store the first seed's result and seeds.json in packages/<name>/reproduction/<mode>/",
            )
        q.add_argument("-j", "--jobs", type=int, default=None, help="reproductions at once (default: usable cores)")
        q.add_argument("--out", type=Path, default=None, help="results folder (default $ICML25_RESULTS or ./results)")
        q.add_argument(
            "--download",
            action="store_true",
            help="download missing registered data sets (sha256-verified) into ~/.cache/icml25",
        )
    rep = sub.add_parser("report", help="rebuild index.html and claims.json from the results folder")
    rep.add_argument("--out", type=Path, default=None, help="results folder (default $ICML25_RESULTS or ./results)")
    rep.add_argument(
        "--committed",
        action="store_true",
        help="build the report from every package's committed reproduction/{quick,full} results (repository root)",
    )
    return p


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"a seed must be a non-negative int, got {text!r}") from err
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be a non-negative int, got {value}")
    return value


def _write_report(
    console: Console, root: Path, results: Sequence[ReproResult] | None = None, *, embed: bool = True
) -> None:
    from icml25_shared.html_report import write_report

    index, claims, _ = write_report(root, results, embed=embed)
    console.print(f"report: {index}  (open it in a browser; all claims: {claims})", soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``icml25`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=120)
    err = Console(stderr=True)
    if args.cmd == "report" and args.committed:
        from icml25_shared.report import load_committed

        committed = load_committed(Path.cwd())
        if not committed:
            err.print("[red]no packages/*/reproduction/*/result_*.json here[/]: run from the repository root")
            return 2
        # next to the committed files: plots linked by relative path, not embedded (the page stays small)
        _write_report(console, Path(args.out) if args.out is not None else Path("reproduction"), committed, embed=False)
        return 0
    if args.cmd == "report":
        root = _results_root(args.out)
        if not load_results(root):
            err.print(f"[red]no result_<mode>.json under {root}/[/]: run `icml25 reproduce` first")
            return 2
        _write_report(console, root)
        return 0
    eps = discover()
    if args.cmd == "list":
        if not eps:
            console.print("no reproductions installed")
        for name, ep in eps.items():
            console.print(f"[bold]{name}[/]  {_summary(ep)}")
        return 0
    if args.all and args.names:
        err.print("[red]give package names or --all, not both[/]")
        return 2
    if args.jobs is not None and args.jobs < 1:
        err.print(f"[red]-j/--jobs must be a positive int, got {args.jobs}[/]")
        return 2
    names = list(eps) if args.all else list(dict.fromkeys(args.names))
    if not names:
        err.print("[red]name at least one reproduction, or pass --all[/]; installed: " + ", ".join(eps))
        return 2
    unknown = [n for n in names if n not in eps]
    if unknown:
        err.print(f"[red]unknown reproduction(s): {', '.join(unknown)}[/]; installed: {', '.join(eps)}")
        return 2
    if args.cmd == "sweep":
        return _sweep(args, names, console, err)
    results, crashed = run_reproductions(
        names, full=args.full, out=args.out, n_jobs=args.jobs, download=args.download, console=err, seed=args.seed
    )
    console.print(claims_table(results))
    _write_report(console, _results_root(args.out))
    if crashed:
        console.print(f"[red]crashed: {', '.join(crashed)}[/]")
        return 1
    return 0


def _sweep(args: argparse.Namespace, names: list[str], console: Console, err: Console) -> int:
    from icml25_shared.sweep import commit_sweep, summarize_seeds, write_seeds_json

    seeds = list(dict.fromkeys(args.seeds))
    mode = "full" if args.full else "quick"
    if args.commit:
        missing = [n for n in names if not (Path("packages") / n / "pyproject.toml").is_file()]
        if missing:
            err.print(f"[red]--commit needs packages/<name>/ here (run from the repository root)[/]: {missing}")
            return 2
    root = _results_root(args.out)
    results, crashed = run_reproductions(
        names, full=args.full, out=root, n_jobs=args.jobs, download=args.download, console=err, seeds=seeds
    )
    table = Table(title=f"seed sweep ({mode}), seeds {seeds}", show_lines=False)
    for col in ("package", "claim", *(f"seed {s}" for s in seeds), "agree"):
        table.add_column(col, no_wrap=True, max_width=34, overflow="ellipsis")
    for name in names:
        runs = sorted((r for r in results if r.package == name), key=lambda r: seeds.index(r.seed))
        if not runs:
            continue
        write_seeds_json(root / name / f"seeds_{mode}.json", runs)
        if args.commit:
            dest = Path("packages") / name / "reproduction" / mode
            commit_sweep(runs, [root / name / f"seed_{r.seed}" for r in runs], dest, mode=mode)
            console.print(f"{name}: stored in {dest}/ (result_{mode}.json of seed {runs[0].seed}, seeds.json)")
        for i, c in enumerate(summarize_seeds(runs)["claims"]):
            cells = [c["per_seed"].get(str(s), {}).get("verdict", "missing") for s in seeds]
            table.add_row(name if i == 0 else "", c["label"], *cells, "yes" if c["agree"] else "[red]NO[/]")
    console.print(table)
    if crashed:
        console.print(f"[red]crashed: {', '.join(crashed)}[/]")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
