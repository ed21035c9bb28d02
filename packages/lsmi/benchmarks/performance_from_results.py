"""Write ``benchmarks/results/performance.json`` (the README's performance table) from the committed results of
``bench_lsmi_vs_pid_batch.py`` (LSMI's default KNIFE densities), without timing anything.

    python packages/lsmi/benchmarks/performance_from_results.py

One row per (C, N) cell: LSMI's CPU time over PID-Batch's to an accuracy both reach
(:func:`lsmi.experiments.common_accuracy`; LSMI's whole fit is an upper bound on its time, so the ratio is an upper
bound too), with the 1-minute load recorded for that cell (or for the run that measured it).
"""

from __future__ import annotations

import json
from pathlib import Path

from icml25_shared.bench import write_performance
from lsmi.experiments import common_accuracy

RESULTS = Path(__file__).parent / "results"
SOURCES = {"bench_lsmi_vs_pid_batch.json": ("lsmi", "KNIFE")}


def _load(result: dict, row: dict) -> float:
    """The larger 1-minute load around the cell (its own record, else its run's)."""
    run = row.get("run")
    if run is not None:
        return max(run["load_before"][0], run["load_after"][0])
    cell = [row["C"], row["n"]]
    rec = next(r for r in result["runs"] if cell in r["cells"])
    return max(rec["load_average_before"][0], rec["load_average_after"][0])


def performance_rows(result: dict, key: str, density: str) -> list[dict]:
    """Rows of ``performance.json`` for the cells where PID-Batch reaches the common accuracy."""
    rows = []
    for row in sorted(result["rows"], key=lambda r: (r["C"], r["n"])):
        acc = common_accuracy(row, key)
        if acc["ratio"] is None:
            continue
        rows.append(
            {
                "case": f"LSMI ({density}) fit + scoring to {acc['level']:.3f} nats, C = {row['C']}, N = {row['n']}",
                "peer": "PID-Batch (our implementation, CPU)",
                "metric": "CPU time to a common accuracy",
                "ratio": 1 / acc["ratio"],
                "load": _load(result, row),
            }
        )
    return rows


def main() -> None:
    for name, (key, density) in SOURCES.items():
        result = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        path = write_performance(RESULTS, name, performance_rows(result, key, density))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
