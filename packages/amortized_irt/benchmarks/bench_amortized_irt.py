"""Calibration and adaptive-testing speed of amortized_irt against its peers, as ratios from one run.

- Rasch calibration on dense 2,000 × 500 data: time to convergence and RMSE of b̂ against the true parameters, vs
  girth ``rasch_mml`` and py-irt's SVI ``OneParamLog`` (py-irt 0.1.1, the version that resolves beside Flower;
  ``--pyirt-epochs`` of Adam, lr 0.1, as its ``fit``). 2PL vs girth ``twopl_mml`` on 2,000 ×
  ``--twopl-items`` (girth's 2PL runs its graded-response code, minutes per fit at 500 items; one timed run).
- Sparse HELM-shaped 183 × 10,000 (35% observed): ours on the observed entries (a ``ResponseMatrix``; at this
  density the E-step keeps them as a dense block) vs girth ``rasch_mml`` on the dense matrix with missing entries
  tagged (girth has no sparse path).
- Adaptive testing: takers per second, max information + MLE, 50 items from a 500-item 2PL bank, vs catsim's
  ``Simulator`` with ``MaxInfoSelector`` + ``NumericalSearchEstimator`` (the same rule, checked item for item in
  the tests).

Every timing interleaves the contenders (``icml25_shared.bench.round_robin``; a fresh shuffled order every round
where three or more run together), one torch thread. Each ratio is ours / peer of the median times, with its spread
the range of the per-round ratios (none where only one round is timed). Usage::

    python packages/amortized_irt/benchmarks/bench_amortized_irt.py [--repeats 3] [--out PATH]

writes ``benchmarks/results/bench_amortized_irt.json`` and the printed table (``.log``); the README's figures are
copied from there. Not run by pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from amortized_irt import AdaptiveTest, Rasch, TwoPL
from amortized_irt.datasets import simulate_helm_like
from icml25_shared.bench import round_robin, save_results, write_performance
from icml25_shared.device import torch_threads

RESULTS = Path(__file__).parent / "results" / "bench_amortized_irt.json"


def _rmse(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(x) - np.asarray(y)) ** 2)))


def _timed(fns: dict[str, Any], repeats: int) -> dict[str, dict[str, Any]]:
    """Run each contender once for its result, then time them interleaved (shuffled order for three or more)."""
    results = {k: f() for k, f in fns.items()}  # untimed: the result (and a warm-up)
    timings = round_robin(fns, repeats=repeats, order="shuffle" if len(fns) >= 3 else "rotate")
    return {k: {"seconds": timings[k].median, "rounds": timings[k].times, "result": results[k]} for k in fns}


def _ratio(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """ours / peer of the median times, and the range of the per-round ratios (None with one round)."""
    paired = [a / b for a, b in zip(ours["rounds"], peer["rounds"], strict=True)]
    spread = len(paired) > 1
    return {
        "ratio": ours["seconds"] / peer["seconds"],
        "lo": min(paired) if spread else None,
        "hi": max(paired) if spread else None,
    }


def _pyirt_rasch(Y: np.ndarray, epochs: int) -> np.ndarray:
    import pyro
    import torch
    from py_irt.models.one_param_logistic import OneParamLog

    rows, cols = np.nonzero(~np.isnan(Y))
    model = OneParamLog("vague", "cpu", Y.shape[1], Y.shape[0])
    with contextlib.redirect_stdout(io.StringIO()):  # py-irt prints its last loss
        model.fit(
            torch.as_tensor(rows), torch.as_tensor(cols), torch.as_tensor(Y[rows, cols], dtype=torch.float32), epochs
        )
    return pyro.param("loc_diff").detach().numpy().astype(np.float64)


def dense(repeats: int, pyirt_epochs: int, m2: int) -> dict[str, Any]:
    import girth

    rng = np.random.default_rng(0)
    n, m = 2000, 500
    theta, b, a = rng.standard_normal(n), rng.normal(0, 1, m), rng.uniform(0.5, 2.0, m)
    Y1 = (rng.random((n, m)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    # girth's twopl_mml goes through its graded-response code (a scalar search per item and iteration): minutes
    # per fit at 500 items on a shared machine, so the 2PL comparison uses the first m2 items
    a, b2 = a[:m2], b[:m2]
    Y2 = (rng.random((n, m2)) < 1 / (1 + np.exp(-a * (theta[:, None] - b2)))).astype(float)
    rasch = _timed(
        {
            "amortized_irt Rasch": lambda: Rasch().fit(Y1).difficulty_,
            # 500 responses per taker: posteriors (SD ~0.1) are narrower than the 41 default nodes resolve
            "amortized_irt Rasch n_quad=121": lambda: Rasch(n_quad=121).fit(Y1).difficulty_,
            "girth rasch_mml": lambda: girth.rasch_mml(Y1.T.astype(int), 1)["Difficulty"],
            "py-irt OneParamLog SVI": lambda: _pyirt_rasch(Y1, pyirt_epochs),
        },
        repeats,
    )
    twopl = _timed(  # one timed repeat: girth's 2PL dominates the run
        {
            "amortized_irt TwoPL": lambda: (lambda f: (f.discrimination_, f.difficulty_))(TwoPL().fit(Y2)),
            "girth twopl_mml": lambda: (lambda r: (r["Discrimination"], r["Difficulty"]))(
                girth.twopl_mml(Y2.T.astype(int))
            ),
        },
        1,
    )
    out = {"rasch": {}, "2pl": {}}
    for k, v in rasch.items():
        out["rasch"][k] = {"seconds": v["seconds"], "rounds": v["rounds"], "rmse_b": _rmse(v["result"], b)}
    for k, v in twopl.items():
        out["2pl"][k] = {
            "seconds": v["seconds"],
            "rounds": v["rounds"],
            "rmse_a": _rmse(v["result"][0], a),
            "rmse_b": _rmse(v["result"][1], b2),
        }
    out["2pl"]["shape"] = [n, m2]
    return out


def sparse(repeats: int) -> dict[str, Any]:
    import girth

    data = simulate_helm_like(seed=0)
    dense_tagged = data.Y.to_dense(fill=np.nan).T  # girth: items × takers, missing tagged
    dense_tagged = girth.tag_missing_data(np.nan_to_num(dense_tagged, nan=-1).astype(int), [0, 1])
    res = _timed(
        {
            "amortized_irt Rasch (ResponseMatrix)": lambda: Rasch().fit(data.Y).difficulty_,
            "girth rasch_mml (dense, tagged)": lambda: girth.rasch_mml(dense_tagged, 1)["Difficulty"],
        },
        repeats,
    )
    right = np.bincount(data.Y.cols, data.Y.values, data.Y.n_items)
    ok = (right > 0) & (right < np.bincount(data.Y.cols, minlength=data.Y.n_items))  # finite ML difficulty only
    return {
        k: {
            "seconds": v["seconds"],
            "rounds": v["rounds"],
            "rmse_b_finite_items": _rmse(np.asarray(v["result"])[ok], data.b[ok]),
        }
        for k, v in res.items()
    } | {"nnz": data.Y.nnz, "shape": list(data.Y.shape)}


def cat(repeats: int, n_takers: int, n_items: int) -> dict[str, Any]:
    from catsim.estimation import NumericalSearchEstimator
    from catsim.initialization import FixedPointInitializer
    from catsim.selection import MaxInfoSelector
    from catsim.simulation import Simulator
    from catsim.stopping import TestLengthStopper

    rng = np.random.default_rng(1)
    m = 500
    a, b = rng.uniform(0.7, 1.8, m), rng.normal(0, 1.2, m)
    thetas = rng.standard_normal(n_takers)
    ours = AdaptiveTest({"a": a, "b": b}, estimator="mle")
    bank = np.column_stack([a, b, np.zeros(m), np.ones(m)])

    def run_ours() -> np.ndarray:
        return ours.run_batch(ours.draw_responses(thetas, seed=0), n_items=n_items).theta[:, -1]

    def run_catsim() -> np.ndarray:
        sim = Simulator(bank, thetas.copy(), FixedPointInitializer(0.0), MaxInfoSelector(), NumericalSearchEstimator(),
                        TestLengthStopper(max_items=n_items))  # fmt: skip
        sim.simulate()
        return np.asarray(sim.latest_estimations)

    res = _timed({"amortized_irt AdaptiveTest (vectorised)": run_ours, "catsim Simulator": run_catsim}, repeats)
    return {
        k: {
            "seconds": v["seconds"],
            "rounds": v["rounds"],
            "takers_per_s": n_takers / v["seconds"],
            "rmse_theta": _rmse(v["result"], thetas),
        }
        for k, v in res.items()
    } | {"n_takers": n_takers, "n_items": n_items, "bank": m}


def performance_rows(results: dict) -> list[dict]:
    """The README's performance rows (ours / peer, time) from a benchmark result."""
    d, s, c = results["dense_2000x500"], results["sparse_183x10000"], results["cat"]
    # the larger 1-minute load of the run's start and end (older results recorded the end only)
    load = max(results.get("load_average_before", results["load_average"])[0], results["load_average"][0])
    rasch, twopl = d["rasch"], d["2pl"]
    ours = rasch["amortized_irt Rasch"]
    row = {"metric": "time", "load": load}

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        if "rounds" not in a or "rounds" not in b:  # a result from before per-round times were kept
            return {"ratio": a["seconds"] / b["seconds"]}
        return _ratio(a, b)

    return [
        {**row, "case": "Rasch MML, dense 2,000 x 500", "peer": "py-irt OneParamLog SVI (200 epochs)",
         **ratio(ours, rasch["py-irt OneParamLog SVI"])},
        {**row, "case": "Rasch MML, dense 2,000 x 500", "peer": "girth rasch_mml",
         **ratio(ours, rasch["girth rasch_mml"])},
        {**row, "case": "2PL MML, dense 2,000 x 50", "peer": "girth twopl_mml",
         **ratio(twopl["amortized_irt TwoPL"], twopl["girth twopl_mml"])},
        {**row, "case": "Rasch MML, sparse 183 x 10,000", "peer": "girth rasch_mml (dense, missing tagged)",
         **ratio(s["amortized_irt Rasch (ResponseMatrix)"], s["girth rasch_mml (dense, tagged)"])},
        {**row, "case": "CAT, 100 takers x 50 items", "peer": "catsim Simulator (max info + MLE)",
         **ratio(c["amortized_irt AdaptiveTest (vectorised)"], c["catsim Simulator"])},
    ]  # fmt: skip


def notes(results: dict) -> list[str]:
    """The performance table's note, its figures read from a benchmark result."""
    r = results["dense_2000x500"]["rasch"]
    ours, fine, girth = r["amortized_irt Rasch"], r["amortized_irt Rasch n_quad=121"], r["girth rasch_mml"]
    return [
        "girth's Rasch collapses identical response patterns; ours runs the E-step once per group of takers with "
        "the same answered items and raw score (at most 501 groups on complete 500-item data). With 500 "
        "responses per taker the posteriors are narrower than our 41 default quadrature nodes resolve: `n_quad=121` "
        f"takes {fine['seconds'] / ours['seconds']:.1f}x our default's time and brings the RMSE of b̂ from "
        f"{ours['rmse_b']:.3f} to {fine['rmse_b']:.3f} (girth {girth['rmse_b']:.3f}). Medians of 3 interleaved "
        "rounds (2 for CAT; 1 for girth's 2PL and the sparse fit, so no spread there)."
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed result")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pyirt-epochs", type=int, default=200)
    parser.add_argument("--twopl-items", type=int, default=50)
    parser.add_argument("--cat-takers", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.summarize:
        results = json.loads(args.out.read_text(encoding="utf-8"))
        write_performance(args.out.parent, args.out.name, performance_rows(results), notes=notes(results))
        return
    warnings.simplefilter("ignore")
    load_before = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch_threads(1):
        results = {
            "dense_2000x500": dense(args.repeats, args.pyirt_epochs, args.twopl_items),
            "sparse_183x10000": sparse(1),
            "cat": cat(max(1, args.repeats - 1), args.cat_takers, 50),
            "load_average_before": load_before,
            "load_average": os.getloadavg(),
            "cores": os.cpu_count(),
        }
    results |= {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    d, s, c = results["dense_2000x500"], results["sparse_183x10000"], results["cat"]
    lines = [
        f"load average {load_before[0]:.2f} at start, {results['load_average'][0]:.2f} at end on {results['cores']} "
        f"cores, one torch thread; {results['wall_s']:.0f} s wall, {results['cpu_s']:.0f} CPU-s"
    ]
    for model in ("rasch", "2pl"):
        ours = next(k for k in d[model] if k.startswith("amortized_irt"))  # the default settings
        for k, v in d[model].items():
            if k == "shape":
                continue
            ratio = v["seconds"] / d[model][ours]["seconds"]
            rm = ", ".join(f"{q} {v[q]:.4f}" for q in v if q.startswith("rmse"))
            lines.append(f"dense {model:5s} {k:32s} {v['seconds']:8.2f} s  ({ratio:6.1f}x ours)  {rm}")
    ours = "amortized_irt Rasch (ResponseMatrix)"
    for k in (ours, "girth rasch_mml (dense, tagged)"):
        v = s[k]
        lines.append(
            f"sparse 183x10000 {k:32s} {v['seconds']:8.2f} s  ({v['seconds'] / s[ours]['seconds']:6.1f}x ours)  "
            f"rmse_b {v['rmse_b_finite_items']:.4f}"
        )
    ours = "amortized_irt AdaptiveTest (vectorised)"
    for k in (ours, "catsim Simulator"):
        v = c[k]
        lines.append(
            f"CAT {c['n_takers']} takers x {c['n_items']} items {k:40s} {v['takers_per_s']:9.1f} takers/s  "
            f"({c[ours]['takers_per_s'] / v['takers_per_s']:6.1f}x slower than ours)"
        )
    print("\n".join(lines))
    save_results(args.out, results, lines)
    write_performance(args.out.parent, args.out.name, performance_rows(results), notes=notes(results))


if __name__ == "__main__":
    main()
