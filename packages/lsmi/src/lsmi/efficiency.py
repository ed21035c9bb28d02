"""Efficiency sweep of spec section 5.4: LSMI fit + transform vs the PID-CVX baseline (K-means + histogram + BROJA)
at equal N, over the number of classes C and clusters k. Used by ``reproduce --full`` and the benchmark.

Both sides see the same N samples of the official Gaussian generator. Times are wall seconds and process CPU
seconds (CPU includes every thread: LSMI runs on one torch thread, Clarabel and K-means use the machine's cores).
The baseline is timed in two formulations (see :mod:`lsmi.baselines`): ``aux`` (sparse, the honest baseline) and
``direct`` (the spec's form) under a per-solve time limit; a solve that hits the limit gives a lower bound on its
time and hence on the ratio, reported with ``ratio_direct_lower_bound=True``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from icml25_shared.device import torch_threads
from lsmi.baselines import broja_cvx
from lsmi.config import LSMIConfig
from lsmi.datasets import gaussian_modalities
from lsmi.estimator import LSMIEstimator

__all__ = ["efficiency_sweep"]


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w, time.process_time() - c


def _run_lsmi(x1: Any, x2: Any, y: Any, c: int, seed: int) -> tuple[LSMIEstimator, tuple[float, ...]]:
    est = LSMIEstimator(LSMIConfig(n_classes=c, seed=seed)).fit(x1, x2, y, verbose=False)
    return est, est.transform(x1, x2, y).mean()


def efficiency_sweep(
    cs: tuple[int, ...] = (2, 10, 30),
    ks: tuple[int, ...] = (10, 20),
    n: int = 4000,
    direct_time_limit: float | None = 60.0,
    seed: int = 0,
    log: Callable[[dict], None] | None = None,
    throughput: bool = False,
    direct_max_ck2: int | None = None,
) -> list[dict[str, Any]]:
    """One row per (C, k): LSMI and PID-CVX times (wall and CPU), their ratios, and the baseline's (R, U1, U2, S).

    ``direct_time_limit=None`` skips the ``direct`` formulation (so does ``C k^2 > direct_max_ck2``: at C = 30, k = 20
    its process already holds ~2 GB); with ``throughput=True`` each row also has the
    ``transform`` throughput (samples/s, median of 5 calls on the N samples). LSMI runs with one torch thread (the
    models are tiny; the previous setting is restored)."""
    rows = []
    with torch_threads(1):
        # warm-up: first-call imports (sklearn, cvxpy, torch.distributed) are not part of either method's cost
        wx1, wx2, wy = gaussian_modalities(64, 2, 0.5, 0.5, seed=seed)
        LSMIEstimator(LSMIConfig(n_classes=2, epochs_clf=1, epochs_entropy=1)).fit(wx1, wx2, wy, verbose=False)
        broja_cvx(wx1, wx2, wy, k=2, n_classes=2, seed=seed)
        for c in cs:
            x1, x2, y = gaussian_modalities(n, c, 0.5, 0.5, seed=seed)

            (est, lsmi_means), lw, lc = _timed(_run_lsmi, x1, x2, y, c, seed)
            thr = None
            if throughput:
                times = []
                for _ in range(6):
                    t0 = time.perf_counter()
                    est.transform(x1, x2, y)
                    times.append(time.perf_counter() - t0)
                thr = n / sorted(times[1:])[2]
            for k in ks:
                aux, aw, ac = _timed(broja_cvx, x1, x2, y, k=k, n_classes=c, seed=seed)
                row: dict[str, Any] = {
                    "C": c,
                    "k": k,
                    "Ck2": c * k * k,
                    "n": n,
                    "lsmi_wall_s": lw,
                    "lsmi_cpu_s": lc,
                    "lsmi_means": lsmi_means,
                    "cvx_aux_wall_s": aw,
                    "cvx_aux_cpu_s": ac,
                    "cvx_aux_solve_s": aux["solve_s"],
                    "cvx_aux_means": [aux[key] for key in ("R", "U1", "U2", "S")],
                    "ratio_aux_wall": aw / lw,
                    "ratio_aux_cpu": ac / lc,
                }
                if direct_time_limit is not None and (direct_max_ck2 is None or c * k * k <= direct_max_ck2):
                    d, dw, dc = _timed(
                        broja_cvx,
                        x1,
                        x2,
                        y,
                        k=k,
                        n_classes=c,
                        seed=seed,
                        formulation="direct",
                        time_limit=direct_time_limit,
                    )
                    row.update(
                        cvx_direct_wall_s=dw,
                        cvx_direct_cpu_s=dc,
                        cvx_direct_status=d["status"],
                        ratio_direct_wall=dw / lw,
                        ratio_direct_cpu=dc / lc,
                        ratio_direct_lower_bound=d["status"] == "time_limit",
                    )
                if thr is not None:
                    row["transform_samples_per_s"] = thr
                rows.append(row)
                if log is not None:
                    log(row)
    return rows
