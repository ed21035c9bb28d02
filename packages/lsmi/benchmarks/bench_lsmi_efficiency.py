"""LSMI fit+transform vs the PID-CVX (K-means + histogram + BROJA by cvxpy) baseline at equal N = 4,000, for
C in {2, 10, 30} and k in {10, 20}, reported as time ratios in one run; plus transform throughput (samples/s).

The baseline is timed in its sparse convex formulation ("aux", the honest comparison) and in the dense direct
formulation under a per-solve time limit (``--direct-limit`` seconds, default 240; a solve that hits it makes the
ratio a lower bound, printed as "> x"). Prints one line per (C, k) and writes the rows and a summary to
benchmarks/results/bench_lsmi_efficiency.json and the printed lines to bench_lsmi_efficiency.log (``--out``
elsewhere; the log goes beside it).

    python packages/lsmi/benchmarks/bench_lsmi_efficiency.py [--direct-limit 240] [--ks 10,20,40] [--out file.json]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from icml25_shared.bench import Log, save_results
from lsmi.experiments import efficiency_sweep

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--direct-limit", type=float, default=240.0, help="seconds per direct solve; 0 skips it")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--ks", default="10,20", help="comma-separated cluster counts (the issue's sweep: 10,20)")
    ap.add_argument("--direct-max-ck2", type=int, default=12000, help="skip the direct program above this C k^2")
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_efficiency.json"), help="JSON path")
    args = ap.parse_args()
    out = Path(args.out)
    say = Log()

    say(f"load average before: {os.getloadavg()}")
    t0, c0 = time.perf_counter(), time.process_time()

    def log(r: dict) -> None:
        lb = ">" if r.get("ratio_direct_lower_bound") else ""
        direct = (
            f" direct {r['cvx_direct_wall_s']:.2f} s {r['cvx_direct_status']} ({lb}{r['ratio_direct_wall']:.2f}x);"
            if "ratio_direct_wall" in r
            else " direct skipped;"
        )
        say(
            f"C={r['C']:>2} k={r['k']:>2} Ck2={r['Ck2']:>6}: LSMI {r['lsmi_wall_s']:.2f} s wall"
            f" / {r['lsmi_cpu_s']:.2f} s"
            f" cpu; PID-CVX aux {r['cvx_aux_wall_s']:.2f} s / {r['cvx_aux_cpu_s']:.2f} s cpu"
            f" (ratio {r['ratio_aux_wall']:.2f}x wall, {r['ratio_aux_cpu']:.2f}x cpu);{direct}"
            f" transform {r['transform_samples_per_s']:.0f} samples/s"
        )

    ks = tuple(int(k) for k in args.ks.split(","))
    rows = efficiency_sweep(
        ks=ks,
        n=args.n,
        direct_time_limit=args.direct_limit or None,
        log=log,
        throughput=True,
        direct_max_ck2=args.direct_max_ck2,
    )
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
