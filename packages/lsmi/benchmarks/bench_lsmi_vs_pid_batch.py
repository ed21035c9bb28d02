"""Time to accuracy: LSMI vs PID-Batch (the paper's peer, Liang et al. 2023) and the PID-CVX (BROJA) program.

On N samples of a noisy discrete joint (``lsmi.experiments.time_to_accuracy``: codes + 0.1 N(0, I), a random
4 x 4 x C table), each method's error against its own exact reference (LSMI: the exact plug-in; PID-Batch and
PID-CVX: BROJA of the table) against CPU seconds (one torch thread). Writes
benchmarks/results/bench_lsmi_vs_pid_batch.json and .log.

    python packages/lsmi/benchmarks/bench_lsmi_vs_pid_batch.py [--cs 10,30] [--ns 1000,4000] [--epochs 4]

The three methods run one after another for each (C, N) (interleaved across configurations, not repeated): a time
to accuracy is one training run, not a callable to repeat.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from icml25_shared.bench import Log, save_results
from lsmi.experiments import time_to_accuracy

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cs", default="10,30")
    ap.add_argument("--ns", default="1000,4000")
    ap.add_argument("--epochs", type=int, default=4, help="PID-Batch encoder epochs")
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_vs_pid_batch.json"))
    args = ap.parse_args()
    out = Path(args.out)
    say = Log()

    say(f"load average before: {os.getloadavg()}")
    t0, c0 = time.perf_counter(), time.process_time()
    rows = []
    for c in (int(v) for v in args.cs.split(",")):
        for n in (int(v) for v in args.ns.split(",")):
            r = time_to_accuracy(c, n, pid_batch_epochs=args.epochs, log=say)
            rows.append(r)
            ttl = {k: r[k]["time_to_tol"] for k in ("lsmi", "pid_batch", "pid_cvx")}
            say(
                f"C={c} N={n} time to {r['tol']} nats (CPU-s): {ttl}; PID-Batch / LSMI {r['ratio_pid_batch_over_lsmi']}"
            )
            save_results(out, {"rows": rows}, say)  # partial results survive an interrupted run
    summary = {
        "rows": rows,
        "total_wall_s": time.perf_counter() - t0,
        "total_cpu_s": time.process_time() - c0,
        "load_average_after": os.getloadavg(),
    }
    say(f"total {summary['total_wall_s']:.1f} s wall, {summary['total_cpu_s']:.1f} s cpu; load {os.getloadavg()}")
    save_results(out, summary, say)


if __name__ == "__main__":
    main()
