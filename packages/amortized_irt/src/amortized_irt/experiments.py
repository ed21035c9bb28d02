"""The experiments behind ``icml25 reproduce amortized_irt`` (and usable on their own): simulate-and-recover on a
HELM-shaped matrix, the held-out-entry AUC ladder, amortized calibration of held-out template items, CAT versus
random selection, and the ``--full`` extras (Swedish SAT, amortization curve, GP vs linear, generator check).

No LM × question response matrix is available offline: everything except the Swedish SAT rows is synthetic."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
from scipy.stats import spearmanr

from amortized_irt.amortized import AmortizedDifficulty, HashingFeaturizer
from amortized_irt.cat import AdaptiveTest
from amortized_irt.data import ResponseMatrix
from amortized_irt.datasets import HelmLike, draw_responses, simulate_helm_like, template_items
from amortized_irt.estimators import Rasch
from amortized_irt.metrics import auc, ctt_correlation, items_to_reach
from icml25_shared.seed import numpy_rng

__all__ = [
    "Setup",
    "QUICK",
    "FULL",
    "recovery",
    "heldout_auc",
    "amortized_templates",
    "cat_vs_random",
    "cat_bank",
    "swedish_sat_stability",
    "amortization_curve",
    "gp_vs_linear",
    "generator_check",
    "plot_cat_and_auc",
]


@dataclass(frozen=True)
class Setup:
    """Sizes of one reproduction run."""

    n_models: int = 183
    n_scenarios: int = 22
    n_items: int = 10_000
    seed: int = 0
    heldout_frac: float = 0.2
    n_template_items: int = 2000
    template_density: float = 0.35
    recovery_seeds: int = 3
    cat_scenarios: int = 6
    cat_takers: int = 200
    n_splits: int = 5
    cap: int = 400
    target_reliability: float = 0.95


QUICK = Setup()
FULL = replace(QUICK, cat_scenarios=22, recovery_seeds=5)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(cast(Any, spearmanr(x, y)).statistic)


def recovery(data: HelmLike) -> tuple[Rasch, dict[str, float]]:
    """C1: Rasch MML-EM on the whole matrix; Spearman(b̂, b) and RMSE(θ̂_EAP, θ)."""
    model = Rasch().fit(data.Y)
    rho = _spearman(model.difficulty_, data.b)
    rmse = float(np.sqrt(np.mean((model.theta_ - data.theta) ** 2)))
    per_item = np.bincount(data.Y.cols, minlength=data.Y.n_items)
    oracle = _oracle_spearman(data)
    return model, {
        "oracle_spearman_b": oracle,
        "spearman_b": rho,
        "oracle_gap": oracle - rho,
        "rmse_theta": rmse,
        "n_iter": model.n_iter_,
        "converged": model.converged_,
        "items_at_bound": int(model.at_bound_.sum()),
        "density": data.Y.density,
        "responses_per_item": float(per_item.mean()),
        "b_sd": float(np.std(data.b)),
    }


def _oracle_spearman(data: HelmLike) -> float:
    """Spearman(b̂, b) when the true per-scenario abilities are known (item-wise ML by Newton, clipped to ±8):
    the information bound of the recovery claim on this matrix."""
    Y = data.Y
    sc = np.searchsorted(np.unique(data.scenario), data.scenario)
    theta = data.theta_scenario[Y.rows, sc[Y.cols]]
    b = np.zeros(Y.n_items)
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-(theta - b[Y.cols])))
        g = np.bincount(Y.cols, Y.values - p, Y.n_items)
        h = np.bincount(Y.cols, p * (1 - p), Y.n_items)
        b = np.clip(b - g / np.maximum(h, 1e-12), -8.0, 8.0)
    return _spearman(b, data.b)


def heldout_auc(data: HelmLike, frac: float = 0.2, seed: int = 0) -> dict[str, float]:
    """C2: AUC on a random ``frac`` of the entries for the constant, LM-mean, item-mean and Rasch predictors, and
    the CTT correlation of the Rasch predictions."""
    train, test = data.Y.split_entries(frac, seed)
    model = Rasch().fit(train)

    def mean_by(idx: np.ndarray, n: int, at: np.ndarray) -> np.ndarray:
        return (np.bincount(idx, train.values, n) / np.maximum(np.bincount(idx, minlength=n), 1))[at]

    p = model.predict_proba(test)
    return {
        "constant": auc(np.zeros(test.nnz), test.values),
        "lm_mean": auc(mean_by(train.rows, train.n_takers, test.rows), test.values),
        "item_mean": auc(mean_by(train.cols, train.n_items, test.cols), test.values),
        "rasch": auc(p, test.values),
        "ctt_corr": ctt_correlation(p, test),
    }


def template_matrix(setup: Setup) -> tuple[list[str], np.ndarray, ResponseMatrix, np.ndarray]:
    """Template text items answered by ``n_models`` simulated LMs (θ ~ N(0.5, 1)) at the given density."""
    texts, b, _ = template_items(setup.n_template_items, seed=setup.seed + 1)
    rng = numpy_rng(setup.seed + 2)
    theta = rng.standard_normal(setup.n_models) + 0.5
    Y = draw_responses(theta[:, None], b[None, :], rng)
    Y[rng.random(Y.shape) > setup.template_density] = np.nan
    return texts, b, ResponseMatrix.from_dense(Y, drop_empty=False), theta


def amortized_templates(setup: Setup, regressor: Literal["linear", "mlp", "gp"] = "linear") -> dict[str, float]:
    """C3: hold out 20% of the template items; their b comes from text only (joint linear predictor on hashed
    character n-grams); AUC on their entries with predicted b vs the oracle b (fitted on their responses) vs the
    mean b, all with the abilities fitted on the training items."""
    texts, b, Y, _ = template_matrix(setup)
    tr, te = Y.split_items(setup.heldout_frac, setup.seed)
    Ytr, Yte = Y.subset_items(tr), Y.subset_items(te)
    feat = HashingFeaturizer(seed=setup.seed)
    Xtr = feat([texts[k] for k in tr])
    Xte = feat([texts[k] for k in te])
    am = AmortizedDifficulty(regressor=regressor).fit(Xtr, Ytr)
    theta = am.theta_
    b_pred = am.predict(Xte)
    b_oracle = Rasch().fit(Y).difficulty_[te]

    def heldout(bb: np.ndarray) -> float:
        return auc(theta[Yte.rows] - bb[Yte.cols], Yte.values)

    return {
        "predicted": heldout(b_pred),
        "oracle": heldout(b_oracle),
        "mean_b": heldout(np.full(len(te), am.difficulty_.mean())),
        "corr_pred_true": float(np.corrcoef(b_pred, b[te])[0, 1]),
        "rmse_pred_true": float(np.sqrt(np.mean((b_pred - b[te]) ** 2))),
        "n_train_items": len(tr),
        "n_heldout_items": len(te),
    }


def cat_bank(b: np.ndarray, thetas: np.ndarray, setup: Setup, seed: int) -> dict[str, Any]:
    """CAT (max info, EAP) vs random on one bank: reliability curves (mean over splits) and the items each needs
    to reach ``target_reliability`` (cap + 1 when never)."""
    cap = min(setup.cap, len(b))
    out: dict[str, Any] = {"bank_size": len(b), "cap": cap}
    from amortized_irt.config import Stop

    for part, sel in enumerate(("max_info", "random")):
        test = AdaptiveTest(b, selector=sel, stop=Stop(max_items=cap), seed=seed)
        df = test.simulate(thetas, n_splits=setup.n_splits, seed=seed, part=part)
        curve = df.groupby("step").reliability.mean().to_numpy()
        out[sel] = {
            "items": items_to_reach(curve, setup.target_reliability, cap=cap),
            "curve": curve,
            "rmse": df.groupby("step").rmse.mean().to_numpy(),
        }
    out["ratio"] = out["max_info"]["items"] / out["random"]["items"]
    return out


def cat_vs_random(model: Rasch, data: HelmLike, setup: Setup) -> dict[str, Any]:
    """C4: per scenario, 200 synthetic takers θ ~ N(mean, sd) of that scenario's calibrated abilities (its own
    takers, per-scenario EAP with the global b), responses from the Rasch model with the calibrated b."""
    scen = np.unique(data.scenario)[: setup.cat_scenarios]
    theta_s, _, _ = model.ability(data.Y, by="scenario")
    labels = np.unique(data.scenario)
    rows = {}
    for k, s in enumerate(scen):
        items = np.flatnonzero(data.scenario == s)
        takers = np.unique(data.Y.rows[np.isin(data.Y.cols, items)])
        th = theta_s[takers, list(labels).index(s)]
        rng = numpy_rng(setup.seed + 100 + k)
        thetas = rng.normal(th.mean(), th.std(), setup.cat_takers)
        rows[str(s)] = cat_bank(model.difficulty_[items], thetas, setup, setup.seed + k)
    cat = np.array([r["max_info"]["items"] for r in rows.values()])
    rnd = np.array([r["random"]["items"] for r in rows.values()])
    return {
        "per_scenario": rows,
        "ratio_of_means": float(cat.mean() / rnd.mean()),
        "mean_reduction": float(np.mean(1 - cat / rnd)),
        "max_reduction": float(np.max(1 - cat / rnd)),
    }


# ---------------------------------------------------------------------------------------------------- --full extras
def ten_percent_bank(model: Rasch, setup: Setup) -> dict[str, Any]:
    """CAT vs random on a random 10% sub-bank of all calibrated items, takers θ ~ N(0, 1)."""
    rng = numpy_rng(setup.seed + 7)
    sub = rng.choice(len(model.difficulty_), len(model.difficulty_) // 10, replace=False)
    return cat_bank(model.difficulty_[sub], rng.standard_normal(setup.cat_takers), setup, setup.seed + 7)


def swedish_sat_stability(setup: Setup) -> dict[str, Any]:
    """Real human data (irtorch's Swedish SAT sample): split-half stability of b̂ (two disjoint halves of the
    takers) and CAT vs random on its 160-item bank."""
    from amortized_irt.datasets import swedish_sat

    Y, _ = swedish_sat()
    rng = numpy_rng(setup.seed)
    perm = rng.permutation(Y.n_takers)
    half = Y.n_takers // 2
    b1 = Rasch().fit(Y.subset_takers(np.sort(perm[:half]))).difficulty_
    b2 = Rasch().fit(Y.subset_takers(np.sort(perm[half:]))).difficulty_
    full = Rasch().fit(Y)
    cat = cat_bank(full.difficulty_, rng.normal(full.theta_.mean(), full.theta_.std(), setup.cat_takers), setup, 1)
    return {
        "split_half_corr": float(np.corrcoef(b1, b2)[0, 1]),
        "n_takers": Y.n_takers,
        "n_items": Y.n_items,
        "cat": cat,
    }


def amortization_curve(data: HelmLike, sizes=(250, 500, 1000, 2000, 4000), seed: int = 0) -> dict[int, float]:
    """RMSE of predicted vs true b on 2,000 held-out items against the number of training items (embedding
    content, joint linear predictor); training takers are the same HELM-like LMs."""
    rng = numpy_rng(seed)
    perm = rng.permutation(data.Y.n_items)
    test, out = perm[:2000], {}
    for n in sizes:
        train = np.sort(perm[2000 : 2000 + n])
        Ytr = data.Y.subset_items(train)
        keep = np.bincount(Ytr.rows, minlength=Ytr.n_takers) > 0
        Ytr = Ytr.subset_takers(np.flatnonzero(keep))
        am = AmortizedDifficulty().fit(data.embeddings[train], Ytr)
        out[int(n)] = float(np.sqrt(np.mean((am.predict(data.embeddings[test]) - data.b[test]) ** 2)))
    return out


def gp_vs_linear(setup: Setup) -> dict[str, Any]:
    """Held-out template items: the linear and the GP predictor, both fitted jointly (``mode="joint"``, the
    default: the linear predictor inside EM, the GP by alternating with MAP-EM), AUC and RMSE."""
    small = replace(setup, n_template_items=1000)
    return {reg: amortized_templates(small, reg) for reg in ("linear", "gp")}


def generator_check(setup: Setup) -> dict[str, float]:
    """``validate_generator(TemplateGenerator)``: realised vs target difficulty after recalibration."""
    from amortized_irt.generation import TemplateGenerator, validate_generator

    rng = numpy_rng(setup.seed + 3)
    res = validate_generator(
        TemplateGenerator(seed=setup.seed), np.linspace(-1.5, 2.5, 9), rng.standard_normal(300) + 0.5, n_per_target=10
    )
    return {"corr": res["corr"], "rmse": res["rmse"]}


def simulate(setup: Setup) -> HelmLike:
    """The HELM-shaped data of a setup."""
    return simulate_helm_like(setup.n_models, setup.n_scenarios, setup.n_items, seed=setup.seed)


def plot_cat_and_auc(out_dir: Path, cat: dict, aucs: dict) -> str:
    """The reproduction's figure: reliability curves of the first CAT bank and the AUC ladder against the paper."""
    from icml25_shared.report import save_figure, subplots

    fig, (ax1, ax2) = subplots(1, 2, figsize=(10, 4))
    name, row = next(iter(cat["per_scenario"].items()))
    for sel in ("max_info", "random"):
        ax1.plot(row[sel]["curve"], label=f"{sel} ({row[sel]['items']:.0f} items to 0.95)")
    ax1.axhline(0.95, color="gray", ls=":")
    ax1.set(xlabel="items asked", ylabel="empirical reliability", title=f"CAT vs random, scenario {name}")
    ax1.legend()
    keys = ("constant", "lm_mean", "item_mean", "rasch")
    ax2.bar(keys, [aucs[k] for k in keys], color="tab:blue", label="measured")
    ax2.scatter(keys, [0.5, 0.657, 0.807, 0.8265], color="tab:red", zorder=3, label="paper (HELM)")
    ax2.set(ylim=(0.4, 1.0), ylabel="held-out entry AUC", title="AUC ladder")
    ax2.legend()
    return str(save_figure(fig, out_dir, "cat_reliability_and_auc"))
