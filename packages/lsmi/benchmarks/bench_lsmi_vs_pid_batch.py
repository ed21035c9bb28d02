"""Time to accuracy: LSMI vs PID-Batch (the paper's peer, Liang et al. 2023) and the PID-CVX (BROJA) program.

On N samples of a noisy discrete joint (``lsmi.experiments.time_to_accuracy``: codes + 0.1 N(0, I), a random
4 x 4 x C table), each method's error against its own exact reference (LSMI: the exact plug-in; PID-Batch and
PID-CVX: BROJA of the table) against CPU seconds (one torch thread). Writes
benchmarks/results/bench_lsmi_vs_pid_batch.json and .log.

    python packages/lsmi/benchmarks/bench_lsmi_vs_pid_batch.py [--cs 10,30] [--ns 1000,4000] [--epochs 4] [--merge]
        [--density knife|gmm] [--stop-at-tol] [--out F]

The three methods run one after another for each (C, N) (interleaved across configurations, not repeated): a time
to accuracy is one training run, not a callable to repeat. Each cell records its UTC start, wall and CPU seconds
and the load average before and after it. ``--merge`` keeps the cells already in ``--out`` (and its log), runs only
the (C, N) of the grid that are missing there, and writes all cells back with one summary per run (``runs``).
``--stop-at-tol`` ends PID-Batch's training at its first epoch within the tolerance (its curve stops there; the
time to a common accuracy, :func:`lsmi.experiments.common_accuracy`, and so the performance rows are the same as
with the whole run): the full 3 x 3 grid then fits in a few minutes instead of about twenty.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

from icml25_shared.bench import Log, save_results
from lsmi.experiments import FLOOR_BAND, common_accuracy, time_to_accuracy

RESULTS = Path(__file__).resolve().parent / "results"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _previous(out: Path) -> tuple[list[dict], list[dict], list[str]]:
    """Cells, run summaries and log lines already in ``out``."""
    if not out.exists():
        return [], [], []
    old = json.loads(out.read_text(encoding="utf-8"))
    log = out.with_suffix(".log")
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return old["rows"], old.get("runs", []), lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cs", default="10,30")
    ap.add_argument("--ns", default="1000,4000")
    ap.add_argument("--epochs", type=int, default=4, help="PID-Batch encoder epochs")
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_vs_pid_batch.json"))
    ap.add_argument("--density", default=None, help='LSMI\'s density model ("knife" default, or "gmm")')
    ap.add_argument("--merge", action="store_true", help="keep the cells in --out, run only the missing ones")
    ap.add_argument(
        "--stop-at-tol", action="store_true", help="end PID-Batch's training at its first epoch within the tolerance"
    )
    args = ap.parse_args()
    out = Path(args.out)
    say = Log()

    rows, runs, lines = _previous(out) if args.merge else ([], [], [])
    done = {(r["C"], r["n"]) for r in rows}
    if lines:
        say.lines.extend([*lines, "", f"--merge run, {_now()} (cells above kept, not rerun)"])
    grid = [(int(c), int(n)) for c in args.cs.split(",") for n in args.ns.split(",")]
    todo = [cell for cell in grid if cell not in done]
    say(f"cells to run: {todo}; kept: {sorted(done)}")
    if not todo:
        return
    load0 = os.getloadavg()
    say(f"load average before: {load0}")
    run = {"started_utc": _now(), "load_average_before": load0, "pid_batch_epochs": args.epochs, "cells": []}
    run["lsmi_density"] = args.density or "knife"
    run["pid_batch_stop_at_tol"] = args.stop_at_tol
    runs.append(run)
    t0, c0 = time.perf_counter(), time.process_time()
    for c, n in todo:
        start, w, l0 = _now(), time.perf_counter(), os.getloadavg()
        opts = {"density": args.density} if args.density else None
        r = time_to_accuracy(
            c, n, pid_batch_epochs=args.epochs, log=say, lsmi_options=opts, pid_batch_stop_at_tol=args.stop_at_tol
        )
        r["run"] = {"started_utc": start, "wall_s": time.perf_counter() - w, "load_before": l0}
        r["run"]["load_after"] = os.getloadavg()
        rows.append(r)
        run["cells"].append([c, n])
        ttl = {k: r[k]["time_to_tol"] for k in ("lsmi", "pid_batch", "pid_cvx")}
        ca = common_accuracy(r)
        say(
            f"C={c} N={n} time to {r['tol']} nats (CPU-s): {ttl}; at {ca['level']:.3f} nats, which both reach"
            + (f" (PID-Batch's floor {ca['pid_batch_floor']:.3f} + {FLOOR_BAND})" if ca["floor_limited"] else "")
            + f": PID-Batch {ca['pid_batch_s']:.1f}, LSMI <= {ca['lsmi_s']:.1f}, PID-Batch / LSMI >= {ca['ratio']:.2f}"
            + f" [{start}, load {l0[0]:.2f} -> {r['run']['load_after'][0]:.2f}]"
        )
        save_results(out, {"rows": rows, "runs": runs}, say)  # partial results survive an interrupted run
    run |= {
        "total_wall_s": time.perf_counter() - t0,
        "total_cpu_s": time.process_time() - c0,
        "load_average_after": os.getloadavg(),
    }
    say(f"total {run['total_wall_s']:.1f} s wall, {run['total_cpu_s']:.1f} s cpu; load {os.getloadavg()}")
    save_results(out, {"rows": rows, "runs": runs}, say)


if __name__ == "__main__":
    main()
