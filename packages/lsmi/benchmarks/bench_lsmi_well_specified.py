"""How far off the exact plug-in a well-specified classifier is, against N: the floor under the C = 30 goal.

On the official Gaussian generator (sigma 0.5, rho 0.5; fit on 80 %, score the other 20 %) the true posteriors are
softmax-affine, so multinomial logistic regression is the correct model family for the paper's three classifiers.
``lsmi.experiments.well_specified_reference`` fits it per head (L2 strength chosen on the scored samples: an
oracle choice in its favour) with the exact surprisals and prior, and reports its error on (R, U1, U2, S). Writes
benchmarks/results/bench_lsmi_well_specified.json and .log.

    python packages/lsmi/benchmarks/bench_lsmi_well_specified.py [--cs 10,30] [--ns 4000,8000,16000,32000]

The defaults' own errors at the same (C, N) are in bench_lsmi_density.json (C = 10) and
bench_lsmi_density_c30_n.json (C = 30); the README puts them side by side. One run per cell (deterministic).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from icml25_shared.bench import Log, save_results
from lsmi.experiments import well_specified_reference

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cs", default="10,30")
    ap.add_argument("--ns", default="4000,8000,16000,32000")
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_well_specified.json"))
    args = ap.parse_args()
    say = Log()
    load0, start = os.getloadavg(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    say(f"{start} load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    rows = []
    for c in (int(v) for v in args.cs.split(",")):
        for n in (int(v) for v in args.ns.split(",")):
            t = time.process_time()
            r = well_specified_reference(n, c)
            r["cpu_s"] = time.process_time() - t
            rows.append(r)
            say(
                f"C={c:3d} N={n:6d} max err {r['max_err']:.3f} err R,U1,U2,S "
                + ", ".join(f"{v:.3f}" for v in r["abs_err"])
                + " PMI bias i1,i2,i12 "
                + ", ".join(f"{v:+.3f}" for v in r["pmi_bias"].values())
                + f" ({r['cpu_s']:.1f} CPU-s)"
            )
    load1 = os.getloadavg()
    say(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    save_results(args.out, {"rows": rows, "started_utc": start, "load_before": load0, "load_after": load1}, say)


if __name__ == "__main__":
    main()
