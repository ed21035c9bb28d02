"""End to end: train a small sweep, normalise, report, plot.

Run: ``python packages/supercollapse/examples/train_sweep.py`` (writes sweep.csv and sweep_collapse.png here;
``python -m supercollapse report sweep.csv --L0 0 --out report/`` gives the same report from the command line).
"""

from supercollapse import Runs, Schedule, collapse_report, normalize
from supercollapse.tasks import FourierRegression
from supercollapse.train import RunSpec, train_sweep

task = FourierRegression(modes=200)
# two widths trained to a horizon T ∝ p (samples per parameter fixed), 3 seeds each, linear decay
specs = [
    RunSpec(width, seed, Schedule("linear", steps), mlp_ratio=1, batch=32, base_lr=3e-3, estimator="none")
    for width, steps in [(16, 80), (32, 300)]  # p = 1,168 and 4,384: T = p / 14.6
    for seed in range(3)
]
runs = Runs.from_frame(train_sweep(specs, task))  # or train_sweep(..., shard_dir=...) under torch.distributed
runs.to_csv("sweep.csv")  # the same columns the command line reads
report = collapse_report(normalize(runs, 0.0))  # L0 = 0 here; fit it with fit_scaling_law on real sweeps
print(f"mean over x ≥ 0.2: Δ {report.mean('delta', 0.2):.4f}, σ {report.mean('sigma', 0.2):.4f}")
report.plot(title="linear decay, widths 16 and 32").savefig("sweep_collapse.png")
