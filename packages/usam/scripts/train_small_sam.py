"""Train the small SamModel shipped with usam (``usam.small_sam``) and write its checkpoint and sha256.

    OMP_NUM_THREADS=1 uv run python packages/usam/scripts/train_small_sam.py               # the shipped recipe
    OMP_NUM_THREADS=1 uv run python packages/usam/scripts/train_small_sam.py --check       # retrain, compare sha256
    ... --steps 1500 --eval-scenes 60 --log pilot.jsonl                                     # a pilot run

Bit-reproducible from the recipe and the seed on one torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from usam.small_sam import CHECKPOINT, RECIPE, evaluate_small_sam, save_small_sam, sha256, train_small_sam


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many steps (pilots)")
    ap.add_argument("--set", nargs="*", default=[], help="recipe overrides key=value (pilots)")
    ap.add_argument("--eval-scenes", type=int, default=0, help="held-out scenes evaluated every eval_every steps")
    ap.add_argument("--out", type=Path, default=CHECKPOINT)
    ap.add_argument("--log", type=Path, default=None, help="append evaluations as JSON lines")
    ap.add_argument("--check", action="store_true", help="retrain to a temporary file and compare with --out")
    args = ap.parse_args(argv)
    over = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        over[k] = json.loads(v)
        if isinstance(over[k], list):
            over[k] = tuple(over[k])
    recipe = dataclasses.replace(RECIPE, **over)

    def log(ev: dict) -> None:
        line = json.dumps({**ev, "set": over, "seed": args.seed})
        print(line, flush=True)
        if args.log:
            with args.log.open("a") as f:
                f.write(line + "\n")

    fit = train_small_sam(recipe, args.seed, eval_scenes=args.eval_scenes, log=log, steps=args.steps)
    out = args.out.with_suffix(".check.safetensors") if args.check else args.out
    digest = save_small_sam(fit.model, out)
    ev = evaluate_small_sam(fit.model)
    print(json.dumps({"sha256": digest, "cpu_s": round(fit.cpu_s, 1), "steps": fit.steps, **ev}), flush=True)
    if args.check:
        want = sha256(args.out)
        out.unlink()
        print("sha256 matches the shipped checkpoint" if digest == want else f"MISMATCH: shipped {want}")
        return 0 if digest == want else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
