"""Rebuild the arithmetic task's fixture models (seeded): ``python packages/rsd/scripts/train_fixtures.py [--out DIR]
[--only draft|target] [--steps N] [--max-ops K] [--curriculum S]``. ``--max-ops`` and ``--curriculum`` (with
``--only``) try a variant of the recipe: ``--curriculum S`` trains the first S steps on 2-4 operations and the rest
on 2 to max_ops (``FixtureSpec.curriculum_steps``). Prints each model's step accuracy (200 probes of 2-4 operations, the
quick run's problems, and 200 of 2-6, the ``--full`` run's) and sha256, and checks the fixture bar on 2-4
operations (target >= 95%, draft in [60%, 95%])."""

from __future__ import annotations

import argparse
import hashlib
import logging
import time
from dataclasses import replace
from pathlib import Path

from icml25_shared.device import torch_threads
from rsd.tasks.arithmetic import FIXTURE_DIR, FIXTURE_SPECS, non_embedding_parameters, step_accuracy, train_model

BAR = {"draft": (0.60, 0.95), "target": (0.95, 1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=FIXTURE_DIR)
    ap.add_argument("--only", choices=sorted(FIXTURE_SPECS), default=None)
    ap.add_argument("--steps", type=int, default=None, help="override the recipe's training steps (with --only)")
    ap.add_argument("--max-ops", type=int, default=None, help="override the recipe's max_ops (with --only)")
    ap.add_argument("--curriculum", type=int, default=None, help="steps on 2-4 operations first (with --only)")
    args = ap.parse_args()
    if (args.steps, args.max_ops, args.curriculum) != (None, None, None) and args.only is None:
        ap.error("--steps, --max-ops and --curriculum need --only")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, spec in FIXTURE_SPECS.items():
        if args.only and name != args.only:
            continue
        if args.max_ops is not None:
            spec = replace(spec, max_ops=args.max_ops)
        if args.curriculum is not None:
            spec = replace(spec, curriculum_steps=args.curriculum)
        t0 = time.process_time()
        with torch_threads(1):
            model = train_model(spec, steps=args.steps)
            acc = step_accuracy(model)
            acc_full = step_accuracy(model, max_ops=6)
        folder = args.out / name
        model.save_pretrained(folder)
        sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        lo, hi = BAR[name]
        print(
            f"{name}: {non_embedding_parameters(model):,} non-embedding parameters, {args.steps or spec.steps} steps, "
            f"{spec.min_ops}-{spec.max_ops} operations"
            + (
                f" (the first {spec.curriculum_steps} on {spec.min_ops}-{spec.curriculum_max_ops}), "
                if spec.curriculum_steps is not None
                else ", "
            )
            + f"{time.process_time() - t0:.0f} CPU-s, step accuracy {acc:.3f} on 2-4 operations "
            f"({'meets' if lo <= acc <= hi else 'MISSES'} the bar [{lo}, {hi}]), {acc_full:.3f} on 2-6, sha256 {sha}"
        )


if __name__ == "__main__":
    main()
