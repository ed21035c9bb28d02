"""Prover throughput of ProofAug on Coq, as ratios.

1. ``persistent vs fresh``: ProofAug on the same proposals with our ``CoqBackend`` (one persistent ``coqtop``,
   ``BackTo`` between candidates, header cached) vs a peer backend that starts a fresh Coq process for every
   call and replays header + statement + prefix (what "one ``coqc`` per candidate text" costs), interleaved
   (``icml25_shared.bench.compare``); both must reach the same outcomes. Aim: >= 5x proposals/s.
2. ``ProofAug / plain``: prover seconds per proposal over the reproduction's quick subset (the paper buys this
   back with fewer model samples; expected 5-30x), and the (goal, tactic) memo hit rate.
3. ``2 vs 1 workers``: wall time of the quick subset through ``ProverPool`` with 2 and with 1 worker.

Usage::

    python packages/proofaug/benchmarks/bench_proofaug.py [--proposals 4] [--repeats 3]

writes ``benchmarks/results/bench_proofaug.json`` and the printed table (``.log``) beside it. Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from icml25_shared.bench import compare, save_results, write_performance
from proofaug import CoqBackend, ProofAug
from proofaug.backends.base import StepResult
from proofaug.experiments import QUICK, run_suite
from proofaug.suite import load_suite

RESULTS = Path(__file__).parent / "results" / "bench_proofaug.json"


class FreshProcessBackend:
    """Peer: a fresh Coq process per call, replaying header, statement and the executed prefix."""

    def __init__(self) -> None:
        self.calls = 0
        self._checker = CoqBackend()
        self._problem = None

    def _replay(self, steps: tuple) -> tuple[CoqBackend, StepResult]:
        b = CoqBackend()
        r = b.start(self._problem)
        for kind, code, timeout in steps:
            r = b.run(r.state, code, timeout) if kind == "run" else b.run_hammer(r.state, code, timeout)
        return b, r

    def start(self, problem):
        self.calls += 1
        self._problem = problem
        b, r = self._replay(())
        b.close()
        return StepResult(r.ok, (), r.goals, r.message)

    def _step(self, state, kind, code, timeout):
        self.calls += 1
        b, before = self._replay(state)
        r = b.run(before.state, code, timeout) if kind == "run" else b.run_hammer(before.state, code, timeout)
        b.close()
        return StepResult(r.ok, state + ((kind, code, timeout),) if r.ok else state, r.goals, r.message, r.timed_out)

    def run(self, state, sentence, timeout):
        return self._step(state, "run", sentence, timeout)

    def run_hammer(self, state, tactic, timeout):
        return self._step(state, "hammer", tactic, timeout)

    def check(self, problem, proof, timeout=60.0):
        self.calls += 1
        return self._checker.check(problem, proof, timeout)

    def close(self):
        self._checker.close()


NOTES = [
    "ProofAug / plain: both end with the same final check, which dominates with a warm prover (ladder calls cost "
    "milliseconds after BackTo), so the limit is 1: ProofAug cannot check a proposal for less than plain checking.",
]


def performance_rows(results: dict) -> list[dict]:
    """The headline rows of ``performance.json`` from a result of this benchmark (no spread: medians only)."""
    load = float(results["load_1min_at_start"])
    pf = results["persistent_vs_fresh"]
    return [
        {
            "case": f"ProofAug on {pf['proposals']} proposals: persistent coqtop, BackTo, (goal, tactic) memo "
            f"({pf['ratio_b_over_a']:.0f}x faster)",
            "peer": "a fresh Coq process per call, replaying header, statement and prefix",
            "metric": "time",
            "ratio": pf["time_a"]["median_s"] / pf["time_b"]["median_s"],
            "limit": None,
            "goal": "<= 0.2 (5x proposals/s)",
            "load": load,
        },
        {
            "case": "prover seconds per proposal, quick subset (24), warm checker",
            "peer": "plain checking of the same proposals",
            "metric": "time",
            "ratio": results["proofaug_over_plain"],
            "limit": 1.0,
            "goal": "report (paper: 5-30x)",
            "load": load,
        },
        {
            "case": "quick subset through ProverPool, 2 workers",
            "peer": "the same with 1 worker",
            "metric": "time",
            "ratio": 1.0 / results["workers"]["speedup"],
            "limit": 0.5,
            "goal": "report",
            "load": load,
        },
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proposals", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed JSON")
    args = ap.parse_args()
    if args.summarize:
        results = json.loads(args.out.read_text(encoding="utf-8"))
        write_performance(args.out.parent, args.out.name, performance_rows(results), notes=NOTES)
        return
    load = os.getloadavg()[0]
    items = [it for it in load_suite(quick=True) if it.kind in ("K1", "K2", "K4")][: args.proposals]
    config = QUICK.config()
    ours, peer = CoqBackend(), FreshProcessBackend()
    outcome: dict[str, list] = {"persistent": [], "fresh": []}

    def run_with(backend, name):
        def go():
            pa = ProofAug(backend, config)
            res = [pa.augment(it.problem, it.proposal) for it in items]
            outcome[name] = [(r.success, r.proof) for r in res]

        return go

    cmp = compare(
        run_with(ours, "persistent"),
        run_with(peer, "fresh"),
        names=("persistent", "fresh"),
        warmup=0,
        repeats=args.repeats,
    )
    ours.close()
    peer.close()
    same = outcome["persistent"] == outcome["fresh"]

    t0 = time.perf_counter()
    run2 = run_suite(load_suite(quick=True), QUICK)
    wall2 = time.perf_counter() - t0
    t0 = time.perf_counter()
    run1 = run_suite(load_suite(quick=True), QUICK.__class__(workers=1))
    wall1 = time.perf_counter() - t0
    hits, lookups = run1.memo
    per_prop = {m: run1.seconds(m) / len(run1.items) for m in run1.results}
    same_workers = [[(r.success, r.proof) for r in run1.results[m]] for m in run1.results] == [
        [(r.success, r.proof) for r in run2.results[m]] for m in run2.results
    ]
    results = {
        "load_1min_at_start": load,
        "persistent_vs_fresh": {**cmp.to_dict(), "proposals": len(items), "same_outcomes": same},
        "proposals_per_s": {"persistent": len(items) / cmp.a.median, "fresh": len(items) / cmp.b.median},
        "prover_s_per_proposal": per_prop,
        "proofaug_over_plain": per_prop["proofaug"] / per_prop["plain"],
        "calls_per_proposal": {m: run1.calls(m) for m in run1.results},
        "memo": {"hits": hits, "lookups": lookups, "hit_rate": hits / max(lookups, 1)},
        "workers": {"wall_1": wall1, "wall_2": wall2, "speedup": wall1 / wall2, "same_results": same_workers},
    }
    lines = [
        f"load (1 min) at start: {load:.1f}",
        f"ProofAug on {len(items)} proposals: persistent coqtop {cmp.a.median:.2f} s, fresh process per call "
        f"{cmp.b.median:.2f} s -> {cmp.ratio:.1f}x proposals/s (same outcomes: {same})",
        "prover seconds per proposal: " + ", ".join(f"{m} {v:.2f}" for m, v in per_prop.items()),
        f"ProofAug / plain prover seconds: {results['proofaug_over_plain']:.1f}x",
        f"memo hit rate: {hits}/{lookups} = {hits / max(lookups, 1):.2f}",
        f"quick subset wall: 1 worker {wall1:.1f} s, 2 workers {wall2:.1f} s -> {wall1 / wall2:.2f}x "
        f"(same results: {same_workers})",
    ]
    print("\n".join(lines))
    save_results(args.out, results, lines)
    write_performance(args.out.parent, args.out.name, performance_rows(results), notes=NOTES)


if __name__ == "__main__":
    main()
