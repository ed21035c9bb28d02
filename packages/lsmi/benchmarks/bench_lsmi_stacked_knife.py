"""One training step of the two KNIFEs: separate modules vs one StackedKNIFE (issue 21), interleaved.

Per step: forward of both densities on a batch, backward, one fused Adam step (the estimator's KNIFE work per
batch). Timed with icml25_shared.bench.compare (alternating order), one torch thread, 50 steps per call. Writes
benchmarks/results/bench_lsmi_stacked_knife.json and .log.

    python packages/lsmi/benchmarks/bench_lsmi_stacked_knife.py [--dims 2,10] [--batch 256]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from icml25_shared.bench import Log, compare, save_results
from lsmi.knife import KNIFE, StackedKNIFE

RESULTS = Path(__file__).resolve().parent / "results"
STEPS = 50


def steps_fn(d: int, batch: int, stacked: bool):
    torch.manual_seed(0)
    k1, k2 = KNIFE(d, 5), KNIFE(d, 5)
    x1, x2 = torch.randn(batch, d), torch.randn(batch, d)
    if stacked:
        st = StackedKNIFE(k1, k2)
        params, loss = list(st.parameters()), lambda: st(x1, x2).sum()
    else:
        params, loss = list(k1.parameters()) + list(k2.parameters()), lambda: k1(x1).sum() + k2(x2).sum()
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)

    def run() -> None:
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            loss().backward()
            opt.step()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="2,10")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_stacked_knife.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    say = Log()

    load0 = os.getloadavg()
    say(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    rows = []
    for d in (int(v) for v in args.dims.split(",")):
        c = compare(
            steps_fn(d, args.batch, True),
            steps_fn(d, args.batch, False),
            names=("stacked", "separate"),
            repeats=args.repeats,
        )
        row = {"dim": d, "batch": args.batch, "steps_per_call": STEPS, **c.to_dict()}
        rows.append(row)
        say(
            f"d={d:3d} batch {args.batch}: stacked {1e3 * c.a.median / STEPS:.3f} ms/step, separate "
            f"{1e3 * c.b.median / STEPS:.3f} ms/step, separate/stacked {c.ratio:.2f}x"
        )
    load1 = os.getloadavg()
    say(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    save_results(out, {"rows": rows, "load_before": load0, "load_after": load1}, say)


if __name__ == "__main__":
    main()
