"""``icml25 reproduce dp_ts_ucb``: the paper's privacy scaling and the matched-privacy regret claim.

1. Privacy (Theorem 4.4): DP-TS-UCB(α = 1) is O(1)-GDP in T; α = 0 grows like Õ(T^0.25), slower than √T.
2. Regret at equal privacy (the paper's comparison table): DP-TS-UCB(α = 1) has lower regret than M-TS-Gaussian
   tuned to the same a-priori GDP (its best pre-pull count b).

Quick (< 60 s): instance A = Bernoulli [0.75, 0.625, 0.5, 0.375, 0.25], T = 10^4, 50 runs.
Full (minutes): instances A, B, C; T in {10^4, 10^5}; 100 runs; alpha in {0, .25, .5, .75, 1}.
Seeds: every run's policy and environment seeds derive from the base ``seed`` (``SeedSequence(seed)``; 0 is the
committed run). The regret claim is judged on the t-interval of the per-run paired difference (DP-TS-UCB minus
M-TS-Gaussian on the same environment seeds) over the runs: each run is one seed of the claim.

Both modes run in this process (one core). ``--full`` is resumable: each finished (instance, T) unit is stored in
``out_dir/parts/`` and reused by the next run with the same settings.
"""

from __future__ import annotations

import math
from importlib.metadata import version
from pathlib import Path
from typing import Any

from dp_ts_ucb.experiments import (
    B_GRID,
    CHUNK,
    DELTA,
    INSTANCES,
    InstanceResult,
    instance_from_dict,
    instance_to_dict,
    plot_normalised_regret,
    plot_privacy_regret,
    plot_regret,
    run_instance,
)
from dp_ts_ucb.privacy import dp_ts_ucb_mu_bound
from icml25_shared.parts import Parts
from icml25_shared.report import Claim, ReproResult
from icml25_shared.validate import check_int

__all__ = ["reproduce"]

Plan = list[tuple[str, int, int, tuple[float, ...]]]
QUICK_PLAN: Plan = [("A", 10**4, 50, (0.0, 0.5, 1.0))]
FULL_PLAN: Plan = [(name, t, 100, (0.0, 0.25, 0.5, 0.75, 1.0)) for name in INSTANCES for t in (10**4, 10**5)]


def _privacy_claim() -> Claim:
    horizons = (10**4, 10**5, 10**6)
    mu1 = [dp_ts_ucb_mu_bound(t, 1.0) for t in horizons]
    mu0 = [dp_ts_ucb_mu_bound(t, 0.0) for t in horizons]
    growth = [b / a for a, b in zip(mu0, mu0[1:])]
    return Claim(
        "DP-TS-UCB(alpha=1) is O(1)-GDP; alpha=0 is O~(T^0.25)-GDP",
        "O(1); O~(T^0.25) (x1.78 per decade, sqrt(T): x3.16)",
        f"mu(a=1) = {', '.join(f'{m:.3f}' for m in mu1)} at T=1e4,1e5,1e6; mu(a=0) x{growth[0]:.2f}, x{growth[1]:.2f}"
        " per decade",
        max(mu1) <= 1.05 and max(growth) < 2.2,
        rule="max mu(a=1) <= 1.05 and growth(a=0) < 2.2 per decade",
        details={"mu_alpha1": mu1, "mu_alpha0": mu0, "growth_alpha0": growth},
        short="GDP scaling in T (Thm 4.4)",
    )


def _regret_claim(name: str, horizon: int, inst, dp1, mts) -> Claim:
    """Lower regret at equal privacy, judged on the interval of the per-run paired difference (same environment
    seeds for both policies), in regret units."""
    diff = [float(a - b) for a, b in zip(dp1.regret, mts.regret, strict=True)]
    c = Claim.over_seeds(
        f"instance {name}, T={horizon:g}: at equal privacy DP-TS-UCB(a=1) has lower regret than M-TS-Gaussian "
        "(per-run regret difference, paired on the environment seeds)",
        "lower regret (theory: ln T factor vs polynomial factor)",
        diff,
        "<",
        0.0,
        seeds=list(range(len(diff))),
        rule=f"mean regret difference < 0 over the {len(diff)} runs at matched a-priori mu={inst.mu:.3f} "
        f"(eps={inst.epsilon:.2f} at delta=1e-5); M-TS-Gaussian at its best pre-pull count b",
        digits=1,
        details={"ratio": inst.ratio, "mu": inst.mu, "epsilon": inst.epsilon, "mts_by_b": inst.mts_by_b},
        short=f"{name} T=1e{round(math.log10(horizon))}: regret vs M-TS",
    )
    c.measured = (
        f"difference {c.measured} (runs); {dp1.regret_mean:.0f} +- {dp1.regret_se:.0f} vs {mts.regret_mean:.0f} "
        f"+- {mts.regret_se:.0f} (b={inst.mts_b}); ratio {inst.ratio:.2f}"
    )
    return c


def _short(name: str, horizon: int, label: str) -> str:
    """``"A T=1e4: M-TS-Gaussian b=300"``: a policy's label on one instance in at most 32 characters."""
    policy = label.split(" (mu=")[0].replace(" (non-private)", " non-priv.")
    return f"{name} T=1e{round(math.log10(horizon))}: {policy}"[:32]


def _instance(
    parts: Parts | None, tag: str, means: list[float], horizon: int, n_runs: int, alphas: tuple[float, ...], seed: int
) -> InstanceResult:
    """One (instance, T) unit, in this process; stored as part ``tag`` (and reused from it) when ``parts`` is given."""

    def compute() -> InstanceResult:
        return run_instance(means, horizon, n_runs, alphas, seed, 1)

    if parts is None:
        return compute()
    return instance_from_dict(parts.run(tag, lambda: instance_to_dict(compute())))


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, plan: Plan | None = None
) -> ReproResult:
    """Run the reproduction (see the module docstring); plots go into ``out_dir``. ``download`` is unused: the
    instances are synthetic. ``seed`` seeds every run (policy and environment). ``plan`` (tests only) replaces the
    mode's list of (instance, T, runs, alphas)."""
    out_dir = Path(out_dir)
    seed = check_int("seed", seed, min=0)
    plan = plan or (FULL_PLAN if full else QUICK_PLAN)
    claims = [_privacy_claim()]
    artifacts: list[str] = []
    parts = None
    if full:
        fingerprint = {"plan": plan, "seed": seed, "b_grid": B_GRID, "chunk": CHUNK, "delta": DELTA}
        parts = Parts(out_dir / "parts", fingerprint={**fingerprint, "version": version("icml25-dp-ts-ucb")})
    table = {}
    for name, horizon, n_runs, alphas in plan:
        tag = f"{name}_T{horizon}"
        inst = _instance(parts, tag, INSTANCES[name], horizon, n_runs, alphas, seed)
        dp1, mts = inst.results["DP-TS-UCB a=1"], inst.mts
        claims.append(_regret_claim(name, horizon, inst, dp1, mts))
        artifacts += [
            str(plot_regret(inst.results, out_dir, tag)),
            str(plot_privacy_regret(inst.results, out_dir, tag)),
        ]
        table[tag] = {k: r.to_dict() for k, r in inst.results.items()}
        for label, r in inst.results.items():
            e = r.epsilon(DELTA)
            priv = f"pure eps-DP, eps {e:.3g}" if r.epsilon_dp else f"mu_bound {r.mu_bound:.3g}, eps(1e-5) {e:.3g}"
            claims.append(
                Claim(
                    f"{tag}: {label}",
                    None,
                    f"regret {r.regret_mean:.0f} +- {r.regret_se:.0f}; {priv}",
                    None,
                    rule="shown, not judged",
                    short=_short(name, horizon, label),
                )
            )
        if full:
            artifacts.append(str(plot_normalised_regret(inst.results, alphas, out_dir, tag)))
    settings: dict[str, Any] = {"plan": plan, "delta": DELTA, "seed": seed, "n_jobs": 1, "results": table}
    if parts is not None:
        settings["parts"] = {"reused": parts.reused, "computed": parts.computed}
    return ReproResult("dp_ts_ucb", claims, settings=settings, artifacts=artifacts)
