"""Prover throughput of ProofAug on Coq, as ratios.

1. ``persistent vs fresh``: ProofAug on the same proposals with our ``CoqBackend`` (one persistent ``coqtop``,
   ``BackTo`` between candidates, header cached) vs a peer backend that starts a fresh Coq process for every
   call and replays header + statement + prefix (what "one ``coqc`` per candidate text" costs), interleaved
   (``icml25_shared.bench.compare``); both must reach the same outcomes. Aim: >= 5x proposals/s.
2. ``ProofAug / plain``: prover seconds over the reproduction's quick subset (the paper buys this back with fewer
   model samples; expected 5-30x), each method alone in its own 1-worker run (a fresh prover), the two runs
   interleaved (``compare``, one warm-up pair): run together, the methods of a proposal share the worker's
   header state and final-check cache, which the first (plain) pays for the later ones. Median and spread over
   the pairs. The (goal, tactic) memo hit rate and the per-method seconds with every method run together are
   reported beside it.
3. ``2 vs 1 workers``: wall time of the quick subset through ``ProverPool`` with 2 and with 1 worker (the same
   methods), interleaved (``compare``, one warm-up pair, ``--repeats`` pairs).

Usage::

    python packages/proofaug/benchmarks/bench_proofaug.py [--proposals 4] [--repeats 3]

writes ``benchmarks/results/bench_proofaug.json`` and the printed table (``.log``) beside it. Not run by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
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
    "milliseconds after BackTo), so the limit is 1: ProofAug cannot check a proposal for less than plain checking. "
    "Persistent vs fresh has no warm-up round: the upper end of its spread is the first round, which starts coqtop "
    "and loads the headers.",
]


def performance_rows(results: dict) -> list[dict]:
    """The headline rows of ``performance.json`` from a result of this benchmark; spread: the paired per-round
    ratios, and for ProofAug / plain the ratios of the timed 1-worker runs (when the result has them)."""
    load = float(results["load_1min_at_start"])
    pf = results["persistent_vs_fresh"]
    paired = [a / b for a, b in zip(pf.get("times_a_s", []), pf.get("times_b_s", []), strict=True)]
    pp = results.get("proofaug_over_plain_runs", [])
    w = results["workers"]
    pw = [a / b for a, b in zip(w.get("times_2_s", []), w.get("times_1_s", []), strict=True)]
    return [
        {
            "case": f"ProofAug on {pf['proposals']} proposals: persistent coqtop, BackTo, (goal, tactic) memo "
            f"({pf['ratio_b_over_a']:.0f}x faster)",
            "peer": "a fresh Coq process per call, replaying header, statement and prefix",
            "metric": "time",
            "ratio": pf["time_a"]["median_s"] / pf["time_b"]["median_s"],
            "lo": min(paired) if paired else None,
            "hi": max(paired) if paired else None,
            "limit": None,
            "goal": "<= 0.2 (5x proposals/s)",
            "load": load,
        },
        {
            "case": "prover seconds, quick subset (24), warm checker, each method in its own run",
            "peer": "plain checking of the same proposals",
            "metric": "time",
            "ratio": results["proofaug_over_plain"],
            "lo": min(pp) if pp else None,
            "hi": max(pp) if pp else None,
            "limit": 1.0,
            "goal": "report (paper: 5-30x)",
            "load": load,
        },
        {
            "case": "quick subset through ProverPool, 2 workers",
            "peer": "the same with 1 worker",
            "metric": "time",
            "ratio": 1.0 / results["workers"]["speedup"],
            "lo": min(pw) if pw else None,
            "hi": max(pw) if pw else None,
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

    runs: dict[int, list] = {1: [], 2: []}

    def suite_with(workers: int):
        def go():
            runs[workers].append(run_suite(load_suite(quick=True), dataclasses.replace(QUICK, workers=workers)))

        return go

    cmp_w = compare(suite_with(2), suite_with(1), names=("2 workers", "1 worker"), warmup=1, repeats=args.repeats)
    wall2, wall1 = cmp_w.a.median, cmp_w.b.median
    run1, run2 = runs[1][-1], runs[2][-1]
    hits, lookups = run1.memo
    per_prop = {m: run1.seconds(m) / len(run1.items) for m in run1.results}
    alone: dict[str, list] = {"proofaug": [], "plain": []}

    def suite_alone(method: str):
        def go():
            setup = dataclasses.replace(QUICK, workers=1, methods=(method,))
            alone[method].append(run_suite(load_suite(quick=True), setup))

        return go

    compare(suite_alone("proofaug"), suite_alone("plain"), warmup=1, repeats=args.repeats)
    over_plain = [
        a.seconds("proofaug") / b.seconds("plain")
        for a, b in zip(alone["proofaug"][1:], alone["plain"][1:], strict=True)
    ]
    same_workers = [[(r.success, r.proof) for r in run1.results[m]] for m in run1.results] == [
        [(r.success, r.proof) for r in run2.results[m]] for m in run2.results
    ]
    results = {
        "load_1min_at_start": load,
        "load_1min_at_end": os.getloadavg()[0],
        "persistent_vs_fresh": {
            **cmp.to_dict(),
            "times_a_s": list(cmp.a.times),
            "times_b_s": list(cmp.b.times),
            "proposals": len(items),
            "same_outcomes": same,
        },
        "proposals_per_s": {"persistent": len(items) / cmp.a.median, "fresh": len(items) / cmp.b.median},
        "prover_s_per_proposal": per_prop,
        "proofaug_over_plain": statistics.median(over_plain),
        "proofaug_over_plain_runs": over_plain,
        "calls_per_proposal": {m: run1.calls(m) for m in run1.results},
        "memo": {"hits": hits, "lookups": lookups, "hit_rate": hits / max(lookups, 1)},
        "workers": {
            "wall_1": wall1,
            "wall_2": wall2,
            "speedup": wall1 / wall2,
            "same_results": same_workers,
            "times_2_s": list(cmp_w.a.times),
            "times_1_s": list(cmp_w.b.times),
        },
    }
    lines = [
        f"load (1 min) at start: {load:.1f}, at end: {results['load_1min_at_end']:.1f}",
        f"ProofAug on {len(items)} proposals: persistent coqtop {cmp.a.median:.2f} s, fresh process per call "
        f"{cmp.b.median:.2f} s -> {cmp.ratio:.1f}x proposals/s (same outcomes: {same})",
        "prover seconds per proposal, every method in one run: "
        + ", ".join(f"{m} {v:.2f}" for m, v in per_prop.items()),
        f"ProofAug / plain prover seconds, each alone: {results['proofaug_over_plain']:.2f}x (median of "
        f"{', '.join(f'{v:.2f}' for v in over_plain)})",
        f"memo hit rate: {hits}/{lookups} = {hits / max(lookups, 1):.2f}",
        f"quick subset wall (median): 1 worker {wall1:.1f} s, 2 workers {wall2:.1f} s -> {wall1 / wall2:.2f}x "
        f"(same results: {same_workers})",
    ]
    print("\n".join(lines))
    save_results(args.out, results, lines)
    write_performance(args.out.parent, args.out.name, performance_rows(results), notes=NOTES)


if __name__ == "__main__":
    main()
