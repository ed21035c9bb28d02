"""Evaluate a fixture pair (a folder with ``draft/`` and ``target/``, as written by ``train_fixtures.py --out``):
``python packages/rsd/scripts/evaluate_fixtures.py DIR``. Step accuracy (the bar's measure: 200 probes of 2-4
operations; the test's: 100 probes; and 200 probes of 2-6) and the quick run's methods (target-only, draft-only,
RSD with the exact and the noisy PRM, greedy) on its 300 problems of 2-4 operations and on 300 of 2-6; prints and
writes ``DIR/eval.json``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from icml25_shared.device import torch_threads
from rsd.experiments import QUICK, run_methods
from rsd.tasks.arithmetic import load_fixture_models, step_accuracy


def main() -> None:
    folder = Path(sys.argv[1])
    t0 = time.process_time()
    out: dict = {}
    with torch_threads(1):
        draft, target = load_fixture_models(folder, check=False)
        for name, m in (("draft", draft), ("target", target)):
            out[name] = {
                "step_acc_2_4_200": step_accuracy(m),
                "step_acc_2_4_100": step_accuracy(m, probes=100),
                "step_acc_2_6_200": step_accuracy(m, max_ops=6),
            }
        for label, st in (("ops_2_4", QUICK), ("ops_2_6", replace(QUICK, max_ops=6))):
            res = run_methods(st, draft, target)
            t = res["target_only"]
            out[label] = {
                k: {
                    "acc": v.accuracy,
                    "ratio_gen": t.flops["generated"] / v.flops["generated"],
                    "ratio_cached": t.flops["cached"] / v.flops["cached"],
                    "rate": v.target_call_rate,
                }
                for k, v in res.items()
            }
    out["cpu_s"] = time.process_time() - t0
    text = json.dumps(out, indent=1)
    print(text)
    (folder / "eval.json").write_text(text)


if __name__ == "__main__":
    main()
