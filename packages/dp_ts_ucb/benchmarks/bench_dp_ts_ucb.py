"""Throughput of DP-TS-UCB: the vectorised simulator and the streaming policy against a mabwiser Thompson-sampling
predict/partial_fit loop (the peer as its users run it), and Gaussian draws per run against TS-Gaussian.

    python packages/dp_ts_ucb/benchmarks/bench_dp_ts_ucb.py [--repeats 3] [--out file.json]

Each pair is timed interleaved (``icml25_shared.bench.compare``: a, b, b, a, ...) and reported as a ratio of
rounds per second (each side runs a different number of rounds, so the ratio is of rates, not of times). Writes
``benchmarks/results/bench_dp_ts_ucb.json`` and the printed lines to ``bench_dp_ts_ucb.log`` beside it, with the
1-minute load before and after, and merges its rows into ``benchmarks/results/performance.json`` (the README's
performance table); ``--performance-from FILE`` does only that, from a committed result, without timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from dp_ts_ucb import DPTSUCB, BernoulliBandit, TSGaussian, simulate
from icml25_shared.bench import Log, compare, save_results, write_performance

MEANS = [0.75, 0.625, 0.5, 0.375, 0.25]
RESULTS = Path(__file__).parent / "results"
HORIZON, RUNS = 10_000, 50  # simulate: 500k run-rounds
STREAM_ROUNDS, MAB_ROUNDS = 5_000, 500


def _simulate() -> None:
    simulate(DPTSUCB, {"alpha": 1.0}, BernoulliBandit(MEANS), HORIZON, RUNS, seed=0)


def _streaming() -> None:
    pol, env = DPTSUCB(5, STREAM_ROUNDS, alpha=1.0, seed=0), BernoulliBandit(MEANS, seed=1)
    for _ in range(STREAM_ROUNDS):
        a = pol.select()
        pol.update(a, env.pull(a))


def _mabwiser() -> None:
    from mabwiser.mab import MAB, LearningPolicy

    env = BernoulliBandit(MEANS, seed=1)
    mab = MAB(list(range(5)), LearningPolicy.ThompsonSampling(), seed=0)
    mab.fit([0, 1, 2, 3, 4], [env.pull(i) for i in range(5)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(MAB_ROUNDS):
            a = mab.predict()
            mab.partial_fit([a], [env.pull(a)])


def _rates(fn_a, rounds_a: int, fn_b, rounds_b: int, names: tuple[str, str], repeats: int) -> dict:
    """Interleaved timing of two loops; rounds per second of each and their ratio (a over b)."""
    c = compare(fn_a, fn_b, names=names, warmup=1, repeats=repeats)
    rate_a, rate_b = rounds_a / c.a.median, rounds_b / c.b.median
    rates = {"rounds_a": rounds_a, "rounds_b": rounds_b, "rate_a": rate_a, "rate_b": rate_b}
    return {**c.to_dict(), **rates, "rate_ratio_a_over_b": rate_a / rate_b}


def performance_rows(result: dict) -> list[dict]:
    """The rows of ``performance.json`` from one result of this script: time per round against the mabwiser loop
    (ours / peer) and Gaussian draws against TS-Gaussian. Needs the load the result recorded."""
    load = max(result["meta"]["load_before"], result["meta"]["load_after"])
    rows = []
    for key, case in (
        ("simulate_vs_mabwiser", "vectorised simulate, 50 runs x 1e4 rounds, 5 arms"),
        ("streaming_vs_mabwiser", "streaming select/update loop, 5 arms"),
    ):
        if key in result:
            r = result[key]
            rows.append({"case": case, "peer": "mabwiser ThompsonSampling predict/partial_fit loop",
                         "metric": "time per round", "ratio": 1 / r["rate_ratio_a_over_b"], "load": load})  # fmt: skip
    d = result["draws_T1e5"]
    rows.append({"case": "Gaussian draws per run, T = 1e5, alpha = 1", "peer": "TS-Gaussian", "metric": "draws",
                 "ratio": d["ratio"], "load": load})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_dp_ts_ucb.json")
    ap.add_argument("--performance-from", type=Path, default=None, help="only write performance.json from FILE")
    args = ap.parse_args(argv)
    if args.performance_from is not None:
        result = json.loads(args.performance_from.read_text())
        if "load_before" not in result.get("meta", {}):
            raise SystemExit(f"{args.performance_from} records no load: rerun the benchmark")
        path = write_performance(args.out.parent, args.performance_from.name, performance_rows(result))
        print(f"wrote {path}")
        return 0
    say = Log()
    load_before = os.getloadavg()[0]

    out: dict = {}
    out["simulate_vs_streaming"] = _rates(
        _simulate, HORIZON * RUNS, _streaming, STREAM_ROUNDS, ("simulate", "streaming"), args.repeats
    )
    r = out["simulate_vs_streaming"]
    rate = f"x{r['rate_ratio_a_over_b']:.1f}"
    say(f"simulate {r['rate_a']:,.0f} run-rounds/s, streaming {r['rate_b']:,.0f} rounds/s: {rate}")
    try:
        import mabwiser  # noqa: F401
    except ImportError:
        out["mabwiser"] = "not installed (pip install mabwiser)"
        say(out["mabwiser"])
    else:
        out["streaming_vs_mabwiser"] = _rates(
            _streaming, STREAM_ROUNDS, _mabwiser, MAB_ROUNDS, ("streaming", "mabwiser"), args.repeats
        )
        out["simulate_vs_mabwiser"] = _rates(
            _simulate, HORIZON * RUNS, _mabwiser, MAB_ROUNDS, ("simulate", "mabwiser"), args.repeats
        )
        for key in ("streaming_vs_mabwiser", "simulate_vs_mabwiser"):
            r = out[key]
            rate = f"x{r['rate_ratio_a_over_b']:.1f}"
            say(f"{r['a']} {r['rate_a']:,.0f} rounds/s vs mabwiser ThompsonSampling {r['rate_b']:,.0f}/s: {rate}")
    big = 100_000
    dp = float(simulate(DPTSUCB, {"alpha": 1.0}, BernoulliBandit(MEANS), big, 2, seed=0).draws.mean())
    ts = float(simulate(TSGaussian, {}, BernoulliBandit(MEANS), big, 2, seed=0).draws.mean())
    out["draws_T1e5"] = {"dp_ts_ucb_alpha1": dp, "ts_gaussian": ts, "ratio": dp / ts}
    say(f"Gaussian draws per run at T=1e5: DP-TS-UCB(a=1) {dp:,.0f}, TS-Gaussian {ts:,.0f}: {100 * dp / ts:.3f} %")
    out["meta"] = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    say(f"1-minute load {load_before:.1f} -> {out['meta']['load_after']:.1f}")
    save_results(args.out, out, say)
    print(f"wrote {args.out}")
    print(f"wrote {write_performance(args.out.parent, args.out.name, performance_rows(out))}")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
