"""Train the small SamModel shipped with usam (``usam.small_sam``) and write its checkpoint and sha256.

    OMP_NUM_THREADS=1 uv run python packages/usam/scripts/train_small_sam.py               # the shipped recipe
    OMP_NUM_THREADS=1 uv run python packages/usam/scripts/train_small_sam.py --check       # retrain and compare
    ... --steps 1500 --eval-scenes 60 --log pilot.jsonl                                     # a pilot run

Bit-reproducible from the recipe and the seed on one torch thread, on a CPU whose torch kernels round as the
training machine's did. On another CPU (another vector path) the 2,000 steps drift apart like a change of seed:
``--check`` then evaluates the shipped and the retrained model on the same held-out scenes and passes when the
retrained best-of-3 mIoU is at most :data:`MIOU_TOL` below the shipped one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from usam.small_sam import (
    CHECKPOINT,
    RECIPE,
    evaluate_small_sam,
    load_small_sam,
    save_small_sam,
    sha256,
    train_small_sam,
)

MIOU_TOL = 0.1
"""How far below the shipped model's held-out best-of-3 mIoU (0.628) a retrain whose bits differ may land: on one
AVX-512 machine the recipe gave 0.614, 0.691 and 0.696 at seeds 0, 1 and 2 (a range of 0.08)."""


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
        if digest == want:
            print("sha256 matches the shipped checkpoint: retrained bit for bit")
            return 0
        shipped = evaluate_small_sam(load_small_sam(args.out, recipe))
        gap = shipped["best_of_3_miou"] - ev["best_of_3_miou"]
        print(f"sha256 differs from the shipped {want} (this CPU's kernels round differently); held-out best-of-3 "
              f"mIoU retrained {ev['best_of_3_miou']:.3f} vs shipped {shipped['best_of_3_miou']:.3f}, selected "
              f"{ev['selected_miou']:.3f} vs {shipped['selected_miou']:.3f}: "
              + ("within" if gap <= MIOU_TOL else "MORE than") + f" {MIOU_TOL} below the shipped")  # fmt: skip
        return 0 if gap <= MIOU_TOL else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
