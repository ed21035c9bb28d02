"""``proofaug run`` (post-process existing generations: JSONL in, JSONL out, resumable) and ``proofaug cumulative``
(pass rates over several result files, the paper's cumulative accounting over runs with different prompts)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["main"]


def _run(args: argparse.Namespace) -> int:
    from functools import partial

    from proofaug.config import COQ_LADDER, Problem, ProofAugConfig
    from proofaug.pool import Job, ProverPool

    if args.backend == "coq":
        from proofaug.backends.coq import CoqBackend

        factory, ladder = CoqBackend, COQ_LADDER
    elif args.backend == "lean":
        from proofaug.backends.lean import LEAN_LADDER, LeanReplBackend

        factory, ladder = partial(LeanReplBackend, project_dir=args.lean_project), LEAN_LADDER
    else:
        from proofaug.backends.isabelle import ISABELLE_LADDER, IsabelleBackend

        factory, ladder = partial(IsabelleBackend, args.isabelle_server), ISABELLE_LADDER

    rows = [json.loads(x) for x in Path(args.input).read_text().splitlines() if x.strip()]
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {json.loads(x)["id"] for x in out.read_text().splitlines() if x.strip()}
    jobs = []
    for no, r in enumerate(rows, 1):
        for key in ("problem", "header", "statement", "proposal"):
            if key not in r:
                raise SystemExit(f"{args.input}:{no}: missing field {key!r}")
        rid = r.get("id", f"{r['problem']}/{no}")
        if rid not in done:
            prob = Problem(r["problem"], r["header"], r["statement"], language=args.backend)
            jobs.append(Job(prob, r["proposal"], args.method, key=rid))
    hammers = tuple(args.hammers.split(",")) if args.hammers else ladder
    config = ProofAugConfig(hammers=hammers, hammer_timeout=args.hammer_timeout, atp=args.atp)
    with ProverPool(factory, args.workers, config=config) as pool:
        results = pool.map(jobs)
    with out.open("a") as fh:
        for j, res in zip(jobs, results, strict=True):
            row = {"id": j.key, "problem": j.problem.name, "success": res.success, "stage": res.stage}
            row.update(proof=res.proof, checker_calls=res.checker_calls, seconds=res.seconds)
            fh.write(json.dumps(row) + "\n")
    solved = sum(r.success for r in results)
    print(f"{solved}/{len(results)} proposals proved ({len(done)} already in {out})")
    return 0


def _cumulative(args: argparse.Namespace) -> int:
    solved: dict[str, bool] = defaultdict(bool)
    for name in args.files:
        for line in Path(name).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                solved[r["problem"]] |= bool(r["success"])
        print(f"{name}: cumulative {sum(solved.values())}/{len(solved)} problems")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``proofaug`` command."""
    p = argparse.ArgumentParser(prog="proofaug", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="augment proposals from a JSONL file")
    r.add_argument("--backend", default="coq", choices=["coq", "lean", "isabelle"])
    r.add_argument("--input", required=True, help="JSONL: problem, header, statement, proposal[, id]")
    r.add_argument("--out", required=True, help="JSONL results (appended; rerun resumes)")
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--method", default="proofaug")
    r.add_argument("--hammers", default="", help="comma-separated ladder (default: the backend's ladder)")
    r.add_argument("--hammer-timeout", type=float, default=2.0)
    r.add_argument("--atp", action="store_true", help="add CoqHammer's hammer (needs libcoq-hammer, eprover)")
    r.add_argument("--lean-project", default=".", help="Lean project with Mathlib and the REPL (--backend lean)")
    r.add_argument(
        "--isabelle-server", default=None, help="info line of a running `isabelle server` (default: start one)"
    )
    c = sub.add_parser("cumulative", help="cumulative pass rate over result files")
    c.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    return _run(args) if args.cmd == "run" else _cumulative(args)


if __name__ == "__main__":
    sys.exit(main())
