"""SoftShape timing vs its peers in one run, reported as ratios (not run by pytest).

    python packages/softshape/benchmarks/bench_softshape.py [--epochs 60] [--threads 1] [--json out.json]

writes benchmarks/results/bench_softshape.json (``--json`` elsewhere).

1. Fit time and accuracy vs aeon MiniRocket and RDST on GunPoint and ItalyPowerDemand (fold 0 of the paper's
   merged 5-fold protocol); numba JIT compilation of the peers is timed separately on a tiny warm-up fit.
2. Train-step time sparse (rate 0.5) / dense on the same batch.
3. Inference samples/s.
4. Vectorised MoE dispatch vs the per-expert loop; capped Inception kernels vs full 'same' kernels.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin, clone

from icml25_shared.bench import compare, measure
from softshape import SoftShapeClassifier, ucr_shape_size
from softshape.experiments import cv_protocol
from softshape.experiments import load_ucr as _load
from softshape.experiments import step_times as _step_times
from softshape.layers import SharedMoE, moe_dispatch_loop

DATASETS = ("GunPoint", "ItalyPowerDemand")
RESULTS = Path(__file__).resolve().parent / "results"


class Float64Input(ClassifierMixin, BaseEstimator):
    """Pass float64 input to an aeon classifier (RDST's numba code does not type-check float32 arrays)."""

    def __init__(self, estimator=None) -> None:
        self.estimator = estimator

    def fit(self, X, y):
        self.estimator_ = clone(self.estimator).fit(np.asarray(X, dtype=np.float64), y)
        self.classes_ = self.estimator_.classes_
        return self

    def predict(self, X):
        return self.estimator_.predict(np.asarray(X, dtype=np.float64))


def peers_vs_softshape(epochs: int) -> dict:
    from aeon.classification.convolution_based import MiniRocketClassifier
    from aeon.classification.shapelet_based import RDSTClassifier

    peers = {
        "MiniRocket": lambda: MiniRocketClassifier(random_state=0, n_jobs=1),
        "RDST": lambda: Float64Input(RDSTClassifier(random_state=0, n_jobs=1)),
    }
    jit = {}
    Xw, yw, _, _ = _load("GunPoint")
    for name, make in peers.items():  # numba JIT happens on the first fit/predict; time it apart
        t0 = time.perf_counter()
        make().fit(Xw[:10], yw[:10]).predict(Xw[:5])
        jit[name] = time.perf_counter() - t0
    out: dict = {"jit_warmup_s": jit}
    for ds in DATASETS:
        X, y, Xt, yt = _load(ds)
        ss = SoftShapeClassifier(
            shape_size=ucr_shape_size(ds),
            epochs=epochs,
            warmup_epochs=epochs // 3,
            early_stopping=None,
            batch_size=100_000,
            random_state=0,
        )
        row = {"SoftShape": cv_protocol(X, y, Xt, yt, ss, folds=[0]).to_dict()}
        for name, make in peers.items():
            row[name] = cv_protocol(X, y, Xt, yt, make(), folds=[0]).to_dict()
        for name in peers:
            row[f"fit_ratio_softshape_over_{name}"] = row["SoftShape"]["fit_seconds"][0] / row[name]["fit_seconds"][0]
            row[f"acc_diff_softshape_minus_{name}"] = row["SoftShape"]["accuracies"][0] - row[name]["accuracies"][0]
        out[ds] = row
    return out


def inference_throughput() -> dict:
    X, y, Xt, yt = _load("GunPoint")
    est = SoftShapeClassifier(shape_size=32, epochs=2, warmup_epochs=0, random_state=0).fit(X, y)
    Xb = np.repeat(Xt, 4, axis=0)  # 600 series
    t = measure(lambda: est.predict_proba(Xb), warmup=1, repeats=5)
    return {"samples_per_s": len(Xb) / t.median, "n": len(Xb)}


def moe_dispatch() -> dict:
    """Vectorised top-1 dispatch vs the per-expert loop (forward + backward, 1920 tokens, D = 128), with the
    routing spread over E experts (random gate) and in the zero-init regime (every token on expert 0)."""
    res = {}
    cases = [(f"spread over {e} experts", e, True) for e in (2, 4, 16, 64)] + [
        ("zero-init routing, 4 experts", 4, False)
    ]
    for label, n_experts, spread in cases:
        torch.manual_seed(0)
        moe = SharedMoE(128, n_experts=n_experts).eval()
        if spread:
            with torch.no_grad():
                moe.w_gate.normal_()
        h = torch.randn(120 * 16, 128, requires_grad=True)
        with torch.no_grad():
            ti, g = moe.route(h)
            err = float((moe.dispatch(h, ti, g) - moe_dispatch_loop(moe, h, ti, g)).abs().max())

        def run(fn, moe=moe, h=h):
            def f():
                top_i, gates = moe.route(h)
                fn(moe, h, top_i, gates).sum().backward()

            return f

        cmp = compare(
            run(lambda m, h, i, g: m.dispatch(h, i, g)),
            run(moe_dispatch_loop),
            names=("vectorised", "loop"),
            repeats=20,
        )
        res[label] = {
            "vectorised_ms": 1e3 * cmp.a.median,
            "loop_ms": 1e3 * cmp.b.median,
            "speedup": cmp.ratio,
            "max_abs_diff": err,
            "max_expert_load": int(torch.bincount(ti[:, 0], minlength=n_experts).max()),
        }
    return res


def inception_capping() -> dict:
    torch.manual_seed(0)
    res = {}
    from softshape.layers import capped_same_conv1d

    for n in (16, 12):  # GunPoint layer 2 (ceil(30/2) + 1), ItalyPowerDemand layer 1 (11 shapes + ...)
        x = torch.randn(120, 32, n, requires_grad=True)
        w = torch.randn(32, 32, 39, requires_grad=True)
        cmp = compare(
            lambda x=x, w=w: capped_same_conv1d(x, w).sum().backward(),
            lambda x=x, w=w: F.conv1d(x, w, padding=19).sum().backward(),
            names=("capped", "full"),
            repeats=20,
        )
        res[f"N={n}, k=39"] = {"capped_ms": 1e3 * cmp.a.median, "full_ms": 1e3 * cmp.b.median, "speedup": cmp.ratio}
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=str, default=str(RESULTS / "bench_softshape.json"), help="where to write")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--only", nargs="*", default=None, help="run only these sections")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    report: dict = {"threads": args.threads, "epochs": args.epochs}
    rates = {"dense": 0.0, "soft": 0.5}
    sections = {
        "moe_dispatch": moe_dispatch,
        "inception_capping": inception_capping,
        "step_time_sparse_over_dense": lambda: {
            ds: {d: _step_times(ds, rates, 10, depth=d) for d in (2, 3)} for ds in DATASETS
        },
        "inference": inference_throughput,
    }
    if not args.skip_peers:
        sections["peers"] = lambda: peers_vs_softshape(args.epochs)
    for name, fn in sections.items():  # print each section as it finishes
        if args.only and name not in args.only:
            continue
        report[name] = fn()
        print(json.dumps({name: report[name]}, indent=2), flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
