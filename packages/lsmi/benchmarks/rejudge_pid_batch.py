"""Re-judge the committed PID-Batch comparisons at an accuracy both methods reach, without rerunning them.

Reads the time-to-accuracy rows of the committed ``--full`` run (``reproduction/full/result_full.json``, seed 0)
and of the committed benchmark run (``benchmarks/results/bench_lsmi_vs_pid_batch.json``; the ``_gmm`` run stopped
PID-Batch after its classifiers, so it has no floor to compare at) and applies
``lsmi.experiments.common_accuracy`` to each (C, N) cell: PID-Batch's time to the level both reach (0.05 nats, or
its floor + 0.001 where it never gets within 0.05) over LSMI's whole fit time. Writes
``reproduction/full/pid_batch_common_accuracy.json`` and prints one line per cell.

    python packages/lsmi/benchmarks/rejudge_pid_batch.py
"""

from __future__ import annotations

import json
from pathlib import Path

from lsmi.experiments import COMMON_ACCURACY_RULE, common_accuracy, common_accuracy_text

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    full = json.loads((ROOT / "reproduction/full/result_full.json").read_text())
    rows = next(c for c in full["claims"] if c["short"].startswith("PID-Batch/LSMI"))["details"]["rows"]
    out: dict = {"rule": COMMON_ACCURACY_RULE, "full_run": {"started": full.get("started"), "seed": 0}}
    for key, name in (("lsmi", "knife"), ("lsmi_gmm", "gmm")):
        cells = [common_accuracy(r, key) | {"C": r["C"], "n": r["n"]} for r in rows]
        ratio = min(c["ratio"] for c in cells)
        out["full_run"][name] = {"cells": cells, "min_ratio": ratio, "holds": ratio >= 3}
        for r in rows:
            print(f"--full {name}: {common_accuracy_text(r, key)}")
        print(f"--full {name}: smallest ratio {ratio:.2f}x -> {'holds' if ratio >= 3 else 'does not hold'} (seed 0)")
    out["benchmark"] = {}
    for fname in ("bench_lsmi_vs_pid_batch.json",):
        bench = json.loads((ROOT / "benchmarks/results" / fname).read_text())
        cells = []
        for r in sorted(bench["rows"], key=lambda r: (r["C"], r["n"])):
            cells.append(common_accuracy(r) | {"C": r["C"], "n": r["n"]})
            print(f"{fname}: {common_accuracy_text(r)}")
        out["benchmark"][fname] = cells
    path = ROOT / "reproduction/full/pid_batch_common_accuracy.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
