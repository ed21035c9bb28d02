"""Plot the committed time-to-accuracy runs: error against CPU seconds, one panel per C.

Reads benchmarks/results/bench_lsmi_vs_pid_batch.json (LSMI with KNIFE densities, PID-Batch with 4 encoder epochs)
and bench_lsmi_vs_pid_batch_gmm.json (LSMI with ``density="gmm"``) and writes
benchmarks/results/time_to_accuracy.png (the README's figure). No measurement: it only draws the files.

    python packages/lsmi/benchmarks/plot_time_to_accuracy.py
"""

from __future__ import annotations

import json
from pathlib import Path

from lsmi.experiments import plot_time_to_accuracy

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    runs = {
        "KNIFE": json.loads((RESULTS / "bench_lsmi_vs_pid_batch.json").read_text())["rows"],
        "GMM": json.loads((RESULTS / "bench_lsmi_vs_pid_batch_gmm.json").read_text())["rows"],
    }
    print(plot_time_to_accuracy(RESULTS, runs))


if __name__ == "__main__":
    main()
