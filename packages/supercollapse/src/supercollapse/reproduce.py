"""``icml25 reproduce supercollapse``: the paper's claims at CPU scale, on generated data (no official logs).

Quick mode (about a minute on one CPU thread):

1. C1, exact power laws (paper Sec. 3.2, Fig. 5b): ``L = t^−½ + p^−½``, p ∈ {1e2, …, 1e6}, normalised at
   ``t* = p^γ``: holds iff max_x Δ ≤ 1e-12 at γ = γ* = 1 and, for γ/γ* ∈ {0.8, 0.9, 1.1, 1.2}, max_x Δ > 1e-3 and
   grows with |γ/γ* − 1|.
2. C2, the SGD-noise model (Sec. 4: it "accurately predicts" schedules with one α per task): residual MLP D = 64,
   Fourier task (M = 1,000), Adam + μP; 3 seeds (task and model), each with const and linear at the longest of the
   run lengths {500, 750, 1,000} ({1,000, 2,000, 3,000} with --full), cosine and WSD (f = 0.2) at every length; α
   fitted on linear. Per seed: RMSE(noise model) / RMSE(τ-matched const) averaged over the lengths (the sweep, not
   its best point), judged on its 95 % t-interval over the seeds against ≤ 0.5 (our target for "far better": half
   the baseline's error), for decay from the start (C2a, cosine) and late decay (C2b, WSD) separately.
3. C3, LR decay suppresses seed variance (Fig. 1c): widths {32, 64}, 4 seeds, horizon T = κ′·p, const vs linear:
   holds iff mean_{x∈[0.5,1]} σ_linear(x) < mean σ_const(x) (σ pools 4 seeds: one judgement per base seed).

Every random source derives from ``seed``: C2 seeds ``seed_list(seed, 3)`` (task seed 42 + s, model seed s), C3
model seeds ``seed_list(seed, 4)`` on task seed 42 + seed, ``--full``'s horizon runs ``seed_list(seed, 3)`` (the
frontier the first), PLRF's features ``seed``. Seed 0 keeps the single-seed parts' figures.

``--full`` adds the whole pipeline: constant-LR frontier → horizon γ̂ → linear-decay runs at ⅓ of the fitted
horizon over five widths → L0 fit → Δ/σ, the breakdown of collapse at 0.8γ̂, 1.2γ̂ and without μP (each Δ ≥ 1.5 ×
Δ(γ̂)), the noise model against the annealing law of Tissue et al. on held-out schedules, and power-law random
features under exact GD (frontier γ̂ and Δ off it, shown).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml25_shared.report import Claim, ReproResult, save_figure
from icml25_shared.verdict import seed_list, spread
from supercollapse.experiments import (
    FULL,
    QUICK,
    Setup,
    exact_law_experiment,
    full_experiment,
    noise_model_experiment,
    noise_model_figure,
    plrf_experiment,
    variance_experiment,
)
from supercollapse.tasks import FourierRegression

__all__ = ["reproduce"]


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, setup: Setup | None = None
) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes."""
    st = setup or (FULL if full else QUICK)
    task = FourierRegression(modes=st.modes, seed=st.task_seed + seed)
    artifacts = []
    # C1
    deltas = {r: float(np.max(d)) for r, d in exact_law_experiment().items()}
    grows = all(deltas[a] < deltas[b] for a, b in ([0.9, 0.8], [1.1, 1.2]))
    c1 = deltas[1.0] <= 1e-12 and all(deltas[r] > 1e-3 for r in (0.8, 0.9, 1.1, 1.2)) and grows
    claims = [
        Claim(
            "exact power laws collapse iff the data exponent is compute-optimal; a wrong γ fans the curves out",
            "Δ = 0 at γ*, growing with |γ/γ* − 1| (Fig. 5b)",
            ", ".join(f"γ/γ*={r:g}: {d:.2e}" for r, d in deltas.items()),
            c1,
            rule="max_x Δ ≤ 1e-12 at γ*; > 1e-3 and increasing in |γ/γ*−1| otherwise",
            short="C1 exact-law collapse",
            details={"max_delta": {str(k): v for k, v in deltas.items()}},
        )
    ]
    # C2
    nm = noise_model_experiment(st, seed_list(seed, st.nm_seeds))
    claims += noise_model_claims(nm)
    artifacts.append(str(save_figure(noise_model_figure(nm, st), out_dir, "noise_model")))
    # C3
    var = variance_experiment(st, task, seed_list(seed, st.var_seeds))
    rep = var["reports"]
    s_lin, s_const = rep["linear"].mean("sigma", 0.5, 1.0), rep["const"].mean("sigma", 0.5, 1.0)
    ratio_info = {n: rep[n].mean("ratio", 0.5, 1.0) for n in rep}
    claims.append(
        Claim(
            "learning-rate decay suppresses the seed-to-seed variance of normalised curves late in training",
            "σ drops with LR decay, enabling Δ < σ (Fig. 1c)",
            f"σ linear {s_lin:.4f} vs const {s_const:.4f}; Δ/σ linear {ratio_info['linear']:.2f}, "
            f"const {ratio_info['const']:.2f}",
            s_lin < s_const,
            rule="mean_{x∈[0.5,1]} σ_linear < mean σ_const (Δ/σ shown, not judged)",
            short="C3 LR decay suppresses σ",
            details={"sigma_linear": s_lin, "sigma_const": s_const, "delta_over_sigma": ratio_info},
        )
    )
    artifacts += [str(save_figure(rep[n].plot(title=f"{n}, widths {st.var_widths}"), out_dir, f"collapse_{n}"))
                  for n in ("const", "linear")]  # fmt: skip
    settings = {k: v for k, v in vars(st).items() if k != "x_grid"} | {"seed": seed}
    if full:
        res = full_experiment(st, task, nm, seed_list(seed, st.full_seeds))
        claims += _full_claims(res, plrf_experiment(st, seed=seed), out_dir, artifacts)
    return ReproResult("supercollapse", claims, settings=settings, artifacts=artifacts)


NM_HELD = {"cosine": ("C2a", "decays from the start (cosine)"), "wsd": ("C2b", "decays late (WSD, last 20 %)")}


def noise_model_claims(nm: dict, threshold: float = 0.5) -> list[Claim]:
    """C2a (cosine) and C2b (WSD): per seed, RMSE(noise model) / RMSE(τ-matched const) averaged over the run lengths
    of the sweep; each judged on the t-interval of that figure over the seeds (``Claim.over_seeds``)."""
    claims = []
    steps = list(nm["steps"])
    for name, (tag, what) in NM_HELD.items():
        per_seed = {s: nm["ratio"][name][s] for s in nm["seeds"]}
        values = [float(np.mean([r[T] for T in steps])) for r in per_seed.values()]
        by_steps = {str(T): spread([r[T] for r in per_seed.values()], list(per_seed)).to_dict() for T in steps}
        claims.append(
            Claim.over_seeds(
                f"the SGD-noise model with one α fitted on linear decay predicts a held-out schedule that {what} "
                "far better than the τ-matched constant-LR curve, over the sweep of run lengths",
                "'accurately predicts'; α = 0.21–0.26 per task",
                values,
                "<=",
                threshold,
                seeds=list(per_seed),
                rule=f"mean over run lengths {steps} of RMSE(noise model) / RMSE(τ-matched const) ≤ {threshold}",
                short=f"{tag} noise model, {name}",
                details={
                    "ratio_by_seed_and_steps": {str(s): {str(T): v for T, v in r.items()} for s, r in per_seed.items()},
                    "ratio_by_steps": by_steps,
                    "alpha": {str(s): a for s, a in nm["alpha"].items()},
                    "steps": steps,
                },
            )
        )
    return claims


def _full_claims(res: dict, plrf: dict, out_dir: Path, artifacts: list[str]) -> list[Claim]:
    h, law, rep = res["horizon"], res["law"], res["report"]
    artifacts.append(
        str(save_figure(rep.plot(title=f"linear decay at the horizon, γ̂={h.gamma:.2f}"), out_dir, "collapse_full"))
    )
    base, bd = res["base_delta"], res["breakdown"]
    nm = res["noise_model"]
    ann = res["annealing_rmse"]
    t_max = max(nm["steps"])
    noise_rmse = {n: {s: nm["rmse"][s][t_max][n]["noise"] for s in nm["seeds"]} for n in ann}
    return [
        Claim(
            "compute-optimal horizon and final-loss law from the constant-LR frontier (runs to "
            f"{res['horizon_frac']:.2g} × the fitted horizon)",
            "tokens ∝ p^1.03–1.05 (e = 2.03–2.05)",
            f"e = {h.exponent:.3f} (γ̂ = {h.gamma:.3f}); L = {law.a:.3g}·c^−{law.b:.3f} + {law.L0:.4f}, R² {law.r2:.3f}"
            f" (L0 used {res['L0_used']:.4f})",
            None,
            rule="shown",
            short="horizon and L0 fit",
        ),
        Claim(
            "supercollapse: with LR decay the collapse deviation falls below the seed-noise floor",
            "Δ < σ across x (Fig. 1c)",
            f"Δ/σ mean over x∈[0.2,1] = {rep.mean('ratio', 0.2):.2f}",
            None,
            rule="shown (reconstructed Δ/σ; tiny models)",
            short="Δ/σ at the horizon",
        ),
        Claim(
            "collapse breaks with a wrong data exponent or without μP",
            "worse collapse off γ* and without μP (Fig. 5)",
            ", ".join(f"{k}: {v / base:.2f}×" for k, v in bd.items()) + f" of Δ(γ̂) = {base:.4f}",
            all(v >= 1.5 * base for v in bd.values()),
            rule="mean_{x∈[0.2,1]} Δ ≥ 1.5 × Δ(γ̂) for 0.8γ̂, 1.2γ̂, no μP",
            short="collapse breakdown",
            details=bd,
        ),
        Claim(
            "noise model (1 parameter + measured noise) vs the annealing law (4 parameters), fit on const + linear",
            "noise model accurate on held-out schedules",
            ", ".join(
                f"{n}: noise {np.mean(list(noise_rmse[n].values())):.4f} vs annealing "
                f"{np.mean(list(ann[n].values())):.4f}"
                for n in ann
            )
            + f" (mean RMSE over {len(nm['seeds'])} seeds, {t_max} steps)",
            None,
            rule="shown: held-out RMSE",
            short="noise model vs annealing law",
            details={"noise": noise_rmse, "annealing": ann},
        ),
        Claim(
            "power-law random features (α = 0.6, β = 0.52; exact full-batch GD): the constant-LR frontier's γ̂ and"
            " the collapse deviation off it",
            "phase-II PLRF collapses at its compute-optimal γ* = α/β ≈ 1.15 (Sec. 3.2)",
            f"γ̂ = {plrf['horizon'].gamma:.3f}; mean_(x≥0.2) Δ: "
            + ", ".join(f"{k:g}γ̂ {v:.4f}" for k, v in plrf["delta"].items()),
            None,
            rule="shown (finite d ≤ 800 of v = 4,000: not the asymptotic regime)",
            short="PLRF frontier and Δ",
            details={"gamma_hat": plrf["horizon"].gamma, "delta": {str(k): v for k, v in plrf["delta"].items()}},
        ),
    ]
