"""LSMI fit+transform vs the PID-CVX (K-means + histogram + BROJA by cvxpy) baseline at equal N = 4,000, for
C in {2, 10, 30} and k in {10, 20}, reported as time ratios in one run; plus transform throughput.

    python packages/lsmi/benchmarks/bench_efficiency.py [--skip-largest]
"""

from __future__ import annotations

import json
import sys
import time

from lsmi import LSMIConfig, LSMIEstimator
from lsmi.baselines import broja_cvx
from lsmi.datasets import gaussian_modalities

from icml25_shared.bench import measure


def main(skip_largest: bool = False) -> None:
    rows = []
    for c in (2, 10, 30):
        x1, x2, y = gaussian_modalities(4000, c, 0.5, 0.5, seed=0)
        t0 = time.perf_counter()
        est = LSMIEstimator(LSMIConfig(n_classes=c)).fit(x1, x2, y, verbose=False)
        est.transform(x1, x2, y)
        t_lsmi = time.perf_counter() - t0
        thr = 4000 / measure(lambda est=est, a=x1, b=x2, t=y: est.transform(a, b, t), warmup=1, repeats=5).median
        for k in (10, 20):
            if skip_largest and c * k * k > 5000:
                continue
            t0 = time.perf_counter()
            broja_cvx(x1, x2, y, k=k, n_classes=c)
            t_cvx = time.perf_counter() - t0
            rows.append(
                {
                    "C": c,
                    "k": k,
                    "lsmi_fit_transform_s": round(t_lsmi, 2),
                    "pid_cvx_s": round(t_cvx, 2),
                    "ratio_cvx_over_lsmi": round(t_cvx / t_lsmi, 3),
                    "transform_samples_per_s": round(thr),
                }
            )
            print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main("--skip-largest" in sys.argv)
