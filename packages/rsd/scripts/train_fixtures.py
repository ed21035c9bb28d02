"""Rebuild the arithmetic task's fixture models (seeded): ``python packages/rsd/scripts/train_fixtures.py [--out DIR]
[--only draft|target]``. Prints each model's step accuracy and sha256, and checks the fixture bar (target >= 95%,
draft in [60%, 95%])."""

from __future__ import annotations

import argparse
import hashlib
import logging
import time
from pathlib import Path

from icml25_shared.device import torch_threads
from rsd.tasks.arithmetic import FIXTURE_DIR, FIXTURE_SPECS, non_embedding_parameters, step_accuracy, train_model

BAR = {"draft": (0.60, 0.95), "target": (0.95, 1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=FIXTURE_DIR)
    ap.add_argument("--only", choices=sorted(FIXTURE_SPECS), default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, spec in FIXTURE_SPECS.items():
        if args.only and name != args.only:
            continue
        t0 = time.process_time()
        with torch_threads(1):
            model = train_model(spec)
            acc = step_accuracy(model)
        folder = args.out / name
        model.save_pretrained(folder)
        sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        lo, hi = BAR[name]
        print(
            f"{name}: {non_embedding_parameters(model):,} non-embedding parameters, {spec.steps} steps, "
            f"{time.process_time() - t0:.0f} CPU-s, step accuracy {acc:.3f} "
            f"({'meets' if lo <= acc <= hi else 'MISSES'} the bar [{lo}, {hi}]), sha256 {sha}"
        )


if __name__ == "__main__":
    main()
