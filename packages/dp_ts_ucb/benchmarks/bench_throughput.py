"""Throughput of DP-TS-UCB's simulator vs a mabwiser Thompson-sampling loop and vs our own streaming loop, and
Gaussian draws per run vs TS-Gaussian; all reported as ratios measured in one run.

    python packages/dp_ts_ucb/benchmarks/bench_throughput.py
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
from dp_ts_ucb import DPTSUCB, BernoulliBandit, TSGaussian, simulate

MEANS = [0.75, 0.625, 0.5, 0.375, 0.25]


def rounds_per_second(fn, rounds: int) -> float:
    t0 = time.perf_counter()
    fn()
    return rounds / (time.perf_counter() - t0)


def main() -> None:
    env = BernoulliBandit(MEANS)
    horizon, runs = 10_000, 50
    vec = rounds_per_second(lambda: simulate(DPTSUCB, {"alpha": 1.0}, env, horizon, runs, seed=0), horizon * runs)

    def streaming(n=5_000):
        pol, e = DPTSUCB(5, n, alpha=1.0, seed=0), BernoulliBandit(MEANS, seed=1)
        for _ in range(n):
            a = pol.select()
            pol.update(a, e.pull(a))

    stream = rounds_per_second(streaming, 5_000)
    out = {"simulate_run_rounds_per_s": vec, "streaming_rounds_per_s": stream, "simulate_over_streaming": vec / stream}
    try:
        from mabwiser.mab import MAB, LearningPolicy

        def mab_loop(n=500):
            e = BernoulliBandit(MEANS, seed=1)
            mab = MAB(list(range(5)), LearningPolicy.ThompsonSampling(), seed=0)
            mab.fit([0, 1, 2, 3, 4], [e.pull(i) for i in range(5)])
            for _ in range(n):
                a = mab.predict()
                mab.partial_fit([a], [e.pull(a)])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mab = rounds_per_second(mab_loop, 500)
        out |= {
            "mabwiser_rounds_per_s": mab,
            "simulate_over_mabwiser": vec / mab,
            "streaming_over_mabwiser": stream / mab,
        }
    except ImportError:
        out["mabwiser"] = "not installed (pip install mabwiser)"
    big = 100_000
    dp = simulate(DPTSUCB, {"alpha": 1.0}, env, big, 2, seed=0)
    ts_draws = float(simulate(TSGaussian, {}, env, big, 2, seed=0).draws.mean())
    out |= {
        "draws_per_run_dp_ts_ucb_T1e5": float(dp.draws.mean()),
        "draws_per_run_ts_T1e5": ts_draws,
        "draw_ratio": float(dp.draws.mean()) / ts_draws,
    }
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}, indent=2))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
