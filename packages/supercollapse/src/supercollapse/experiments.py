"""The experiments behind ``icml25 reproduce supercollapse`` (importable: ``from supercollapse.experiments import
noise_model_experiment``).

- :func:`exact_law_experiment`: the exact power law ``L = t^−½ + p^−½`` normalised at ``t* = p^γ`` (paper Sec. 3.2,
  Fig. 5b): Δ vanishes at γ* = 1 and grows with |γ/γ* − 1|.
- :func:`noise_model_experiment`: residual MLP on the Fourier task, one width, several seeds (task and model) and a
  sweep of run lengths: const and linear at the longest length, cosine and WSD at every length; α fitted on linear,
  cosine and WSD predicted (paper Sec. 4).
- :func:`variance_experiment`: two widths, several seeds, constant vs linear decay at a horizon T ∝ p; the seed-noise
  floor σ(x) near the end of training (paper Fig. 1c).
- :func:`plrf_experiment`: power-law random features (Paquette et al. 2024; paper Sec. 3.2) under exact full-batch
  gradient descent: the constant-LR frontier → γ̂ → Δ at 0.8γ̂, γ̂ and 1.2γ̂ (exact curves, no training noise).
- :func:`full_experiment`: constant-LR frontier → horizon → linear-decay runs at the horizon → L0 fit → Δ/σ,
  the breakdown of collapse at 0.8γ̂, 1.2γ̂ and without μP, and the noise model against the annealing law.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from icml25_shared.report import subplots
from supercollapse.baselines import AnnealingLaw
from supercollapse.collapse import DEFAULT_X_GRID, collapse_deviation, collapse_report, normalize
from supercollapse.frontier import compute_frontier, fit_horizon
from supercollapse.laws import PowerLawFamily, fit_scaling_law
from supercollapse.noise import NoiseModel
from supercollapse.runs import Runs
from supercollapse.schedules import Schedule
from supercollapse.tasks import PLRF, FourierRegression
from supercollapse.train import RunSpec, parameter_count, train_family, train_run

__all__ = [
    "Setup",
    "QUICK",
    "FULL",
    "exact_law_experiment",
    "noise_model_experiment",
    "noise_model_figure",
    "variance_experiment",
    "plrf_experiment",
    "full_experiment",
]


@dataclass(frozen=True)
class Setup:
    """Sizes of the reproduction (``QUICK``: under a minute on one CPU thread; ``FULL``: minutes)."""

    modes: int = 1000
    depth: int = 2
    mlp_ratio: int = 1
    batch: int = 128
    base_lr: float = 3e-3
    # noise model (Sec. 4)
    nm_width: int = 64
    nm_steps: tuple[int, ...] = (500, 750, 1000)
    """The sweep of run lengths: cosine and WSD are predicted at every length, const and linear run at the longest."""
    nm_eval_every: int = 25
    """Noise-model runs evaluate every ``nm_eval_every`` steps (each length a multiple of it, so that WSD runs fork
    from the constant-LR run with the same evaluation steps)."""
    nm_seeds: int = 3
    """Seeds per base seed: seed s trains task ``FourierRegression(seed=task_seed + s)`` and model seed s."""
    task_seed: int = 42
    n_evals: int = 30
    eval_batches: int = 8
    wsd_frac: float = 0.2
    # variance suppression (Fig. 1c)
    var_widths: tuple[int, ...] = (32, 64)
    var_seeds: int = 4
    var_batch: int = 64
    tokens_per_param: float = 1.0
    """Horizon proxy T(p) = κ′·p samples, κ′ = ``tokens_per_param`` (tokens ∝ p, γ = 1)."""
    # full mode
    full_widths: tuple[int, ...] = (32, 45, 64, 90, 128)
    full_seeds: int = 3
    frontier_steps: int = 6000
    horizon_frac: float = 1.0
    """Full-mode runs train to ``horizon_frac`` × the fitted horizon T̂(p) (a constant factor keeps the exponent γ̂
    that collapse depends on, paper Sec. 3.2; 1/3 in ``FULL`` to fit the 15-minute CPU budget)."""
    # power-law random features (full mode)
    plrf_dims: tuple[int, ...] = (50, 100, 200, 400, 800)
    plrf_v: int = 4000
    plrf_lr: float = 0.01
    x_grid: tuple[float, ...] = field(default_factory=lambda: tuple(DEFAULT_X_GRID))


QUICK = Setup()
FULL = Setup(nm_steps=(1000, 2000, 3000), nm_eval_every=50, tokens_per_param=1.5, horizon_frac=1 / 3)


def _spec(st: Setup, width: int, seed: int, schedule: Schedule, label: str, **kw: Any) -> RunSpec:
    base = dict(
        depth=st.depth,
        mlp_ratio=st.mlp_ratio,
        batch=st.batch,
        base_lr=st.base_lr,
        n_evals=st.n_evals,
        eval_batches=st.eval_batches,
    )
    return RunSpec(width, seed, schedule, label=label, **{**base, **kw})


def _train(spec: RunSpec, task: FourierRegression, st: Setup) -> pd.DataFrame:
    return train_run(spec, task)


# -- C1: exact power laws ---------------------------------------------------------------------------------------------
def exact_law_experiment(ratios: tuple[float, ...] = (0.8, 0.9, 1.0, 1.1, 1.2)) -> dict[float, np.ndarray]:
    """Δ(x) of ``L = t^−½ + p^−½`` (γ* = 1) normalised at ``t* = p^γ`` for γ = ratio·γ*, p ∈ {1e2, …, 1e6}."""
    x = np.asarray(DEFAULT_X_GRID)
    out = {}
    for r in ratios:
        fam = PowerLawFamily(((1.0, 0.5, 0.0), (1.0, 0.0, 0.5)), gamma=r)
        out[r] = collapse_deviation(normalize(Runs.from_frame(fam.runs([1e2, 1e3, 1e4, 1e5, 1e6], x)), 0.0, x_grid=x))
    return out


# -- C2: the noise model ----------------------------------------------------------------------------------------------
def nm_schedules(st: Setup, steps: int) -> dict[str, Schedule]:
    return {
        "const": Schedule("const", steps),
        "linear": Schedule("linear", steps),
        "cosine": Schedule("cosine", steps),
        "wsd": Schedule("linear", steps, decay_frac=st.wsd_frac),
    }


def noise_model_experiment(st: Setup, seeds: list[int] | None = None) -> dict[str, Any]:
    """For each seed s (task ``FourierRegression(seed=st.task_seed + s)``, model seed s): a constant-LR trunk and a
    linear run at the longest length of ``st.nm_steps``, cosine and WSD at every length (WSD forked from the trunk
    where its decay starts, :func:`~supercollapse.train.train_family`); α fitted on linear; the RMSE of the noise
    model and of the τ-matched constant curve (α = 0) on every held-out run.

    Returns ``{"seeds", "steps", "alpha": {s: α}, "rmse": {s: {T: {name: {"noise", "tau_const"}}}},
    "ratio": {name: {s: {T: ratio}}}, "frames": {s: {T: {name: frame}}}, "predictions": (same)}``."""
    seeds = list(range(st.nm_seeds)) if seeds is None else list(seeds)
    steps = sorted(st.nm_steps)
    for T in steps:
        if T % st.nm_eval_every:
            raise ValueError(f"every nm_steps must be a multiple of nm_eval_every={st.nm_eval_every}, got {T}")
    t_max = steps[-1]
    out: dict[str, Any] = {"seeds": seeds, "steps": steps, "alpha": {}, "rmse": {}, "frames": {}, "predictions": {},
                           "ratio": {"cosine": {}, "wsd": {}}}  # fmt: skip

    def spec(seed: int, name: str, T: int) -> RunSpec:
        sch = nm_schedules(st, T)[name]
        return _spec(st, st.nm_width, seed, sch, name, n_evals=T // st.nm_eval_every)

    for seed in seeds:
        task = FourierRegression(modes=st.modes, seed=st.task_seed + seed)
        plan = [("linear", t_max)] + [(n, T) for T in steps for n in ("cosine", "wsd")]
        trunk, *rest = train_family(spec(seed, "const", t_max), [spec(seed, n, T) for n, T in plan], task)
        frames: dict[int, dict[str, pd.DataFrame]] = {T: {} for T in steps}
        frames[t_max]["const"] = trunk
        for (name, T), f in zip(plan, rest):
            frames[T][name] = f
        model = NoiseModel().fit(trunk, frames[t_max]["linear"])
        out["alpha"][seed] = model.alpha
        out["rmse"][seed], out["predictions"][seed] = {}, {}
        for T in steps:
            held = [n for n in ("linear", "cosine", "wsd") if n in frames[T]]
            out["rmse"][seed][T] = {
                n: {"noise": model.rmse(frames[T][n]), "tau_const": model.rmse(frames[T][n], alpha=0.0)} for n in held
            }
            out["predictions"][seed][T] = {n: model.predict(frames[T][n]) for n in held}
            for n in ("cosine", "wsd"):
                r = out["rmse"][seed][T][n]
                out["ratio"][n].setdefault(seed, {})[T] = r["noise"] / r["tau_const"]
        out["frames"][seed] = frames
    return out


def noise_model_figure(nm: dict, st: Setup):
    """Measured vs predicted cosine and WSD (first seed, longest run) and every seed's ratio against run length."""
    fig, axes = subplots(1, 3, figsize=(14, 4))
    s0, t_max = nm["seeds"][0], max(nm["steps"])
    frames, preds = nm["frames"][s0][t_max], nm["predictions"][s0][t_max]
    for i, name in enumerate(("cosine", "wsd")):
        f = frames[name]
        axes[i].plot(f["step"], f["loss"], "k", label=f"{name} (measured)")
        axes[i].plot(f["step"], preds[name], "C1--", label=f"noise model, α={nm['alpha'][s0]:.2f}")
        axes[i].plot(frames["const"]["step"], frames["const"]["loss"], "C0:", label="const")
        axes[i].set(xlabel="step", ylabel="test loss", yscale="log", title=f"D={st.nm_width}, {name}, seed {s0}")
        axes[i].legend(fontsize=7)
    for j, name in enumerate(("cosine", "wsd")):
        for k, s in enumerate(nm["seeds"]):
            r = nm["ratio"][name][s]
            axes[2].plot(list(r), list(r.values()), ("o-", "s--")[j], color=f"C{k}",
                         label=f"{name}, seed {s}")  # fmt: skip
    axes[2].axhline(0.5, color="k", lw=0.8, ls=":")
    axes[2].set(xlabel="run length (steps)", ylabel="RMSE noise model / τ-matched const", yscale="log",
                title="held-out schedules over seeds and lengths")  # fmt: skip
    axes[2].legend(fontsize=6, ncol=2)
    return fig


# -- C3: variance suppression -----------------------------------------------------------------------------------------
def variance_experiment(st: Setup, task: FourierRegression, seeds: list[int] | None = None) -> dict[str, Any]:
    """const vs linear at T(p) = κ′·p samples, model ``seeds`` (default ``range(var_seeds)``) per width; σ(x) and
    Δ(x) per schedule."""
    seeds = list(range(st.var_seeds)) if seeds is None else list(seeds)
    out: dict[str, Any] = {"reports": {}, "frames": {}}
    for name in ("const", "linear"):
        parts = []
        for w in st.var_widths:
            p = parameter_count(w, st.depth, task.dim, st.mlp_ratio)
            steps = max(st.n_evals, round(st.tokens_per_param * p / st.var_batch))
            for seed in seeds:
                spec = _spec(st, w, seed, Schedule(name, steps), name, batch=st.var_batch, estimator="none")
                parts.append(_train(spec, task, st))
        runs = Runs.from_frame(pd.concat(parts, ignore_index=True))
        # L0 = 0: the variance claim compares schedules on the same normalisation, no fitted L0 needed
        out["reports"][name] = collapse_report(normalize(runs, 0.0, x_grid=np.asarray(st.x_grid)))
        out["frames"][name] = runs.frame
    return out


# -- PLRF (full mode) --------------------------------------------------------------------------------------------------
def plrf_experiment(st: Setup, scales: tuple[float, ...] = (0.8, 1.0, 1.2), seed: int = 0) -> dict[str, Any]:
    """PLRF (α = 0.6, β = 0.52, phase II) trained by exact full-batch GD (``PLRF.gd_loss``, lr small: close to
    gradient flow) for every d in ``plrf_dims``: the constant-LR frontier gives γ̂ (compute 6·d·t), then Δ(x) of
    the curves normalised at t = t(d₀)·(d/d₀)^(scale·γ̂) with L0 = 0 (the model's loss vanishes as d, t → ∞).
    ``seed`` draws the random features W."""
    task = PLRF(0.6, 0.52, v=st.plrf_v, seed=seed)
    k = np.unique(np.round(np.geomspace(1, 1e7, 600)))
    parts = [
        pd.DataFrame({"run_id": f"plrf-d{d}", "size": float(d), "seed": 0, "schedule": "const", "step": k,
                      "compute": 6.0 * d * k, "loss": task.gd_loss(d, k, lr=st.plrf_lr)})
        for d in st.plrf_dims
    ]  # fmt: skip
    runs = Runs.from_frame(pd.concat(parts, ignore_index=True))
    horizon = fit_horizon(compute_frontier(runs))
    d0 = st.plrf_dims[len(st.plrf_dims) // 2]
    t0 = float(horizon.tokens(d0))
    x = np.asarray(st.x_grid)
    delta = {}
    for sc in scales:
        c_star = {float(d): 6.0 * d * t0 * (d / d0) ** (sc * horizon.gamma) for d in st.plrf_dims}
        delta[sc] = float(np.nanmean(collapse_deviation(normalize(runs, 0.0, c_star=c_star, x_grid=x))[x >= 0.2]))
    return {"horizon": horizon, "delta": delta, "runs": runs}


# -- full mode --------------------------------------------------------------------------------------------------------
def _horizon_runs(st, task, horizon, gamma_scale, seeds, schedule="linear", freeze_at=None, anchor=None):
    """Runs at T(p) = f·T̂(p_anchor)·(p/p_anchor)^(γ·gamma_scale), T̂ the fitted horizon, f = ``horizon_frac``, one
    per model seed in ``seeds``."""
    parts = []
    ps = {w: parameter_count(w, st.depth, task.dim, st.mlp_ratio) for w in st.full_widths}
    p0 = anchor or ps[st.full_widths[len(st.full_widths) // 2]]
    t0 = st.horizon_frac * float(horizon.tokens(p0))
    for w, p in ps.items():
        samples = t0 * (p / p0) ** (horizon.gamma * gamma_scale)
        steps = max(st.n_evals, int(round(samples / st.batch)))
        for seed in seeds:
            spec = _spec(st, w, seed, Schedule(schedule, steps), schedule, estimator="none", freeze_at=freeze_at)
            parts.append(_train(spec, task, st))
    return Runs.from_frame(pd.concat(parts, ignore_index=True))


def full_experiment(
    st: Setup, task: FourierRegression, nm: dict[str, Any] | None = None, seeds: list[int] | None = None
) -> dict[str, Any]:
    """The full pipeline of paper Sec. 2–4 at CPU scale (see the module docstring). ``nm``: the result of
    :func:`noise_model_experiment` at ``st`` when already run (reused when ``nm_width`` is the middle full width).
    ``seeds``: the model seeds of the horizon runs (default ``range(full_seeds)``); the frontier uses the first."""
    seeds = list(range(st.full_seeds)) if seeds is None else list(seeds)
    const_parts = [
        _train(_spec(st, w, seeds[0], Schedule("const", st.frontier_steps), "const", estimator="none", n_evals=60),
               task, st)
        for w in st.full_widths
    ]  # fmt: skip
    const = Runs.from_frame(pd.concat(const_parts, ignore_index=True))
    front = compute_frontier(const)
    horizon = fit_horizon(front, flops_per_param_token=6.0)
    main = _horizon_runs(st, task, horizon, 1.0, seeds)
    finals = main.meta().groupby("size")[["final_compute", "final_loss"]].mean()
    law = fit_scaling_law(np.asarray(finals["final_compute"]), np.asarray(finals["final_loss"]))
    x = np.asarray(st.x_grid)
    # the law is fitted on seed means, so one seed may end below its L0: clip just under every final loss
    l0_used = min(law.L0, 0.99 * float(main.meta()["final_loss"].min()))
    report = collapse_report(normalize(main, l0_used, x_grid=x))
    base_delta = report.mean("delta", 0.2)
    breakdown = {}
    for label, kw in {"0.8 gamma": {"gamma_scale": 0.8}, "1.2 gamma": {"gamma_scale": 1.2},
                      "no muP": {"gamma_scale": 1.0, "freeze_at": 384}}.items():  # fmt: skip
        runs = _horizon_runs(st, task, horizon, kw["gamma_scale"], seeds, freeze_at=kw.get("freeze_at"))
        l0 = min(law.L0, 0.99 * float(runs.meta()["final_loss"].min()))
        d = collapse_deviation(normalize(runs, l0, x_grid=x))
        breakdown[label] = float(np.nanmean(d[x >= 0.2]))
    if nm is None or st.nm_width != st.full_widths[len(st.full_widths) // 2]:
        nm = noise_model_experiment(replace(st, nm_width=st.full_widths[len(st.full_widths) // 2]))
    # the annealing law on each noise-model seed at the longest length: fit on const + linear, cosine/WSD held out
    t_max = max(nm["steps"])
    scheds = nm_schedules(st, t_max)
    ann_rmse: dict[str, dict[int, float]] = {"cosine": {}, "wsd": {}}
    for seed in nm["seeds"]:
        frames = nm["frames"][seed][t_max]
        curves = [(scheds[n](np.arange(t_max)), frames[n]["step"].to_numpy(), frames[n]["loss"].to_numpy())
                  for n in ("const", "linear")]  # fmt: skip
        ann = AnnealingLaw().fit(curves)
        for name in ("cosine", "wsd"):
            f = frames[name]
            pred = ann.predict(scheds[name](np.arange(t_max)), f["step"].to_numpy())
            ann_rmse[name][seed] = float(np.sqrt(np.mean((pred - f["loss"].to_numpy()) ** 2)))
    return {
        "frontier": front, "horizon": horizon, "horizon_frac": st.horizon_frac, "law": law, "L0_used": l0_used,
        "report": report, "base_delta": base_delta, "breakdown": breakdown, "noise_model": nm,
        "annealing_rmse": ann_rmse, "const": const, "main": main,
    }  # fmt: skip
