"""``icml25 reproduce dp_ts_ucb``: the paper's privacy scaling and the matched-privacy regret claim.

Quick (< 60 s): instance A = Bernoulli [0.75, 0.625, 0.5, 0.375, 0.25], T = 10^4, 50 runs, seed 0.
Full (minutes): instances A, B, C; T in {10^4, 10^5}; 100 runs; alpha in {0, .25, .5, .75, 1}.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dp_ts_ucb.envs import BernoulliBandit
from dp_ts_ucb.policies import DPSE, DPTSUCB, AdaPUCB, MTSGaussian, TSGaussian
from dp_ts_ucb.privacy import dp_ts_ucb_mu_bound, gdp_epsilon
from dp_ts_ucb.sim import SimResult, simulate
from icml25_shared.report import Claim, ReproResult, results_dir, save_figure, subplots

INSTANCES = {
    "A": [0.75, 0.625, 0.5, 0.375, 0.25],
    "B": [0.9] + [0.8] * 9,
    "C": [0.5, 0.45],
}
B_GRID = (1, 10, 30, 100, 300, 1000)
DELTA = 1e-5


def _n_jobs() -> int:
    try:
        import joblib  # noqa: F401
    except ImportError:
        return 1
    return 2


def _privacy_claim() -> Claim:
    horizons = (10**4, 10**5, 10**6)
    mu1 = [dp_ts_ucb_mu_bound(t, 1.0) for t in horizons]
    mu0 = [dp_ts_ucb_mu_bound(t, 0.0) for t in horizons]
    growth = [b / a for a, b in zip(mu0, mu0[1:])]
    holds = max(mu1) <= 1.05 and max(growth) < 2.2
    return Claim(
        "DP-TS-UCB(alpha=1) is O(1)-GDP; alpha=0 is O~(T^0.25)-GDP",
        "O(1); O~(T^0.25) (x1.78 per decade, sqrt(T): x3.16)",
        f"mu(a=1) = {', '.join(f'{m:.3f}' for m in mu1)} at T=1e4,1e5,1e6; mu(a=0) x{growth[0]:.2f}, x{growth[1]:.2f}"
        " per decade",
        holds,
        rule="max mu(a=1) <= 1.05 and growth(a=0) < 2.2 per decade",
        details={"mu_alpha1": mu1, "mu_alpha0": mu0, "growth_alpha0": growth},
    )


def _matched_mts(env, horizon, mu, n_runs, seed, n_jobs, cps) -> tuple[int, SimResult, dict[int, float]]:
    best, by_b = None, {}
    for b in B_GRID:
        if horizon < b * env.n_arms:
            continue
        try:
            c = MTSGaussian.matched(mu, horizon, b)
        except ValueError:
            continue
        r = simulate(MTSGaussian, {"b": b, "c": c}, env, horizon, n_runs, seed, n_jobs, cps)
        by_b[b] = r.regret_mean
        if best is None or r.regret_mean < best[1].regret_mean:
            best = (b, r)
    assert best is not None, "no b in the grid can match this mu"
    return best[0], best[1], by_b


def _run_instance(name, means, horizon, n_runs, alphas, seed, n_jobs):
    env = BernoulliBandit(means)
    cps = np.unique(np.geomspace(100, horizon, 25).astype(np.int64))
    out: dict[str, SimResult] = {}
    for a in alphas:
        out[f"DP-TS-UCB a={a:g}"] = simulate(DPTSUCB, {"alpha": a}, env, horizon, n_runs, seed, n_jobs, cps)
    mu = dp_ts_ucb_mu_bound(horizon, 1.0)
    eps = gdp_epsilon(mu, DELTA)
    b, mts, by_b = _matched_mts(env, horizon, mu, n_runs, seed, n_jobs, cps)
    out[f"M-TS-Gaussian b={b} (mu={mu:.3f})"] = mts
    out["TS-Gaussian (non-private)"] = simulate(TSGaussian, {}, env, horizon, n_runs, seed, n_jobs, cps)
    out[f"AdaP-UCB eps={eps:.2f}"] = simulate(AdaPUCB, {"epsilon": eps}, env, horizon, n_runs, seed, n_jobs, cps)
    out[f"DP-SE eps={eps:.2f}"] = simulate(DPSE, {"epsilon": eps}, env, horizon, n_runs, seed, n_jobs, cps)
    dp1 = out["DP-TS-UCB a=1"]
    ratio = dp1.regret_mean / mts.regret_mean
    claim = Claim(
        f"instance {name}, T={horizon:g}: at equal privacy DP-TS-UCB(a=1) has lower regret than M-TS-Gaussian",
        "lower regret (theory: ln T factor vs polynomial factor)",
        f"{dp1.regret_mean:.0f} +- {dp1.regret_se:.0f} vs {mts.regret_mean:.0f} +- {mts.regret_se:.0f} "
        f"(b={b}); ratio {ratio:.2f}",
        ratio < 1.0,
        rule=f"regret ratio < 1 at matched a-priori mu={mu:.3f} (eps={eps:.2f} at delta=1e-5)",
        details={"ratio": ratio, "mu": mu, "epsilon": eps, "mts_by_b": by_b},
    )
    return out, claim


def _plots(results: dict[str, SimResult], out_dir: Path, tag: str) -> list[str]:
    fig, ax = subplots()
    for label, r in results.items():
        ax.plot(r.checkpoints, r.regret_curve, label=label)
        ax.fill_between(
            r.checkpoints, r.regret_curve - 2 * r.regret_curve_se, r.regret_curve + 2 * r.regret_curve_se, alpha=0.2
        )
    ax.set(xscale="log", xlabel="round t", ylabel="pseudo-regret R(t)", title=f"regret ({tag})")
    ax.legend(fontsize=7)
    p1 = save_figure(fig, out_dir, f"regret_curves_{tag}")
    fig, ax = subplots()
    for label, r in results.items():
        e = r.epsilon(DELTA)
        if math.isfinite(e):
            ax.errorbar(e, r.regret_mean, yerr=2 * r.regret_se, fmt="o", label=label)
    ax.set(
        xscale="log",
        xlabel="epsilon at delta=1e-5 (a-priori)",
        ylabel="regret at T",
        title=f"privacy-regret frontier ({tag})",
    )
    ax.legend(fontsize=7)
    p2 = save_figure(fig, out_dir, f"privacy_regret_{tag}")
    return [str(p1), str(p2)]


def reproduce(full: bool = False, out_dir: Path | None = None) -> ReproResult:
    """Run the reproduction; see the module docstring."""
    out_dir = out_dir or results_dir("dp_ts_ucb")
    n_jobs = _n_jobs() if full else 1  # quick mode: worker start-up costs more than it saves
    claims = [_privacy_claim()]
    artifacts: list[str] = []
    if full:
        plan = [(name, t, 100, (0.0, 0.25, 0.5, 0.75, 1.0)) for name in INSTANCES for t in (10**4, 10**5)]
    else:
        plan = [("A", 10**4, 50, (0.0, 0.5, 1.0))]
    table = {}
    for name, horizon, n_runs, alphas in plan:
        res, claim = _run_instance(name, INSTANCES[name], horizon, n_runs, alphas, 0, n_jobs)
        claims.append(claim)
        tag = f"{name}_T{horizon}"
        artifacts += _plots(res, out_dir, tag)
        table[tag] = {k: r.to_dict() for k, r in res.items()}
        for label, r in res.items():
            e = r.epsilon(DELTA)
            priv = f"pure eps-DP, eps {e:.3g}" if r.epsilon_dp else f"mu_bound {r.mu_bound:.3g}, eps(1e-5) {e:.3g}"
            claims.append(
                Claim(
                    f"{tag}: {label}",
                    None,
                    f"regret {r.regret_mean:.0f} +- {r.regret_se:.0f}; {priv}",
                    None,
                    rule="shown, not judged",
                )
            )
        if full:
            fig, ax = subplots()
            for a in alphas:
                r = res[f"DP-TS-UCB a={a:g}"]
                ax.plot(r.checkpoints, r.regret_curve / np.log(r.checkpoints) ** (1 + a), label=f"a={a:g}")
            ax.set(xscale="log", xlabel="t", ylabel="R(t) / ln^(1+a) t", title=f"normalised regret ({tag})")
            ax.legend()
            artifacts.append(str(save_figure(fig, out_dir, f"normalised_regret_{tag}")))
    return ReproResult(
        "dp_ts_ucb",
        claims,
        settings={"full": full, "plan": plan, "delta": DELTA, "seed": 0, "n_jobs": n_jobs, "results": table},
        artifacts=artifacts,
    )
