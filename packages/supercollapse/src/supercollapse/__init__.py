"""Scaling Collapse (ICML 2025): compute-optimal loss-curve collapse, noise-floor analysis and schedule-aware
loss prediction.

Qiu, Xiao, Wilson, Pennington, Agarwala, "Scaling Collapse Reveals Universal Dynamics in Compute-Optimally
Trained Neural Networks" (ICML 2025, arXiv 2507.02119). Bring your own loss curves as a tidy frame::

    >>> from supercollapse import Runs, normalize, collapse_report   # doctest: +SKIP
    >>> runs = Runs.from_frame(df).where(schedule="linear")
    >>> report = collapse_report(normalize(runs, L0=law.L0))
    >>> report.mean("ratio", 0.2)            # Δ/σ < 1: supercollapse
"""

from importlib.metadata import version as _version

from supercollapse.baselines import AnnealingLaw
from supercollapse.collapse import CollapseReport, Normalized, collapse_report, l0_sweep, normalize
from supercollapse.frontier import Frontier, Horizon, compute_frontier, fit_horizon
from supercollapse.laws import PowerLawFamily, ScalingLaw, fit_scaling_law
from supercollapse.noise import GradNoiseTracker, NoiseModel
from supercollapse.runs import Runs
from supercollapse.schedules import SCHEDULES, Schedule, tau

__all__ = [
    "AnnealingLaw",
    "CollapseReport",
    "Frontier",
    "GradNoiseTracker",
    "Horizon",
    "NoiseModel",
    "Normalized",
    "PowerLawFamily",
    "Runs",
    "SCHEDULES",
    "Schedule",
    "ScalingLaw",
    "collapse_report",
    "compute_frontier",
    "fit_horizon",
    "fit_scaling_law",
    "l0_sweep",
    "normalize",
    "tau",
]
__version__ = _version("icml25-supercollapse")
