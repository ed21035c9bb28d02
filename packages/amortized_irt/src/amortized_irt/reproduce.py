"""``icml25 reproduce amortized_irt``: the paper's claims on a HELM-shaped synthetic matrix (183 LMs × 10,000
items over 22 scenarios, each answered by 40–90 LMs; no real LM response matrix is available offline).

Quick (≤ 60 CPU-s, one thread): C1 recovery -- oracle Spearman − MML-EM Spearman ≤ 0.005 (the oracle knows every
true ability) and RMSE(θ̂_EAP) ≤ 0.15, each on its interval over the data seeds ``seed_list(seed, 3)`` (5 in
``--full``); C2 held-out-entry AUC ladder constant < LM mean < item mean < Rasch (paper, HELM: 0.50 < 0.657 <
0.807 < 0.8265) and CTT correlation (paper 0.993); C3 amortized calibration of held-out template items from text
(AUC(predicted b) ≥ AUC(oracle b) − 0.03 and ≥ AUC(mean b) + 0.03); C4 CAT (max information, EAP) vs random:
items to empirical reliability 0.95, one ratio per scenario bank (6 banks, all 22 in ``--full``), ≤ 0.7 on the
interval over banks (paper: 50% fewer on average, up to 82%). C2–C4 use the first data seed. ``--full`` adds a
10% bank, the Swedish SAT real data, the amortization curve, GP vs linear and the generator check.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from amortized_irt import experiments as ex
from icml25_shared.report import Claim, ReproResult
from icml25_shared.verdict import SKIPPED, combine, judge, seed_list, spread

__all__ = ["reproduce"]

ORACLE_GAP = 0.005
"""How far below the known-θ oracle's Spearman MML-EM may end: a quarter of the 0.02 that a 0.98 target leaves
below perfect ranking (the oracle itself is ≈ 0.98 here, so a rule on the Spearman itself would sit on the bound)."""
CAT_RATIO = 0.7
"""Our C4 target: CAT needs at most 70% of random's items (a 30% cut; the paper reports 50% fewer on HELM)."""


def reproduce(
    full: bool, out_dir: Path, *, download: bool = False, seed: int = 0, setup: ex.Setup | None = None
) -> ReproResult:
    """Run the experiments of the module docstring and judge the claims; ``setup`` overrides the mode's sizes."""
    del download  # the only real data (Swedish SAT) ships inside the irtorch wheel
    st = setup or (ex.FULL if full else ex.QUICK)
    seeds = [st.seed + s for s in seed_list(seed, st.recovery_seeds)]
    recs, first = [], None
    for s in seeds:  # keep the first seed's data and fit for C2-C4
        data = ex.simulate(replace(st, seed=s))
        fit, rec = ex.recovery(data)
        recs.append(rec)
        first = first or (fit, data)
    assert first is not None  # seeds is never empty
    model, data = first
    st = replace(st, seed=seeds[0])
    aucs = ex.heldout_auc(data, st.heldout_frac, st.seed)
    am = ex.amortized_templates(st)
    cat = ex.cat_vs_random(model, data, st)
    ladder = aucs["constant"] < aucs["lm_mean"] < aucs["item_mean"] < aucs["rasch"]
    claims = [
        recovery_claim(recs, seeds),
        Claim(
            "Rasch predicts held-out responses best: constant < LM mean < item mean < Rasch",
            "0.50 < 0.657 < 0.807 < 0.8265 (HELM)",
            " < ".join(f"{aucs[k]:.3f}" for k in ("constant", "lm_mean", "item_mean", "rasch")),
            ladder,
            rule="strict AUC ordering on 20% held-out entries",
            unit="AUC",
            short="C2 AUC ladder",
            details=aucs,
        ),
        Claim(
            "the CTT correlation of Rasch predictions (mean predicted vs observed score per LM) is high",
            0.993,
            round(aucs["ctt_corr"], 4),
            aucs["ctt_corr"] >= 0.95,
            rule="Pearson >= 0.95 on held-out entries",
            short="C2 CTT correlation",
        ),
        Claim(
            "amortized calibration: difficulty predicted from question text is nearly as good as calibrating on "
            "responses, and clearly better than giving new items the mean difficulty",
            "0.7375 held-out items (combined)",
            f"pred {am['predicted']:.4f}, oracle {am['oracle']:.4f}, mean-b {am['mean_b']:.4f}",
            am["predicted"] >= am["oracle"] - 0.03 and am["predicted"] >= am["mean_b"] + 0.03,
            rule="AUC(pred) >= AUC(oracle) - 0.03 and >= AUC(mean b) + 0.03",
            unit="AUC",
            short="C3 amortized calibration",
            details=am,
        ),
        cat_claim(cat),
    ]
    settings = {**asdict(st), "recovery_data_seeds": seeds, "recovery": recs}
    if full:
        claims += _full_claims(model, data, st)
    return ReproResult("amortized_irt", claims, settings=settings, artifacts=[ex.plot_cat_and_auc(out_dir, cat, aucs)])


def recovery_claim(recs: list[dict], seeds: list[int]) -> Claim:
    """C1 from one recovery record per data seed: the gap to the known-θ oracle and RMSE(θ), each judged on its
    interval over the seeds; the absolute Spearman figures are shown beside them."""
    gaps = [r["oracle_spearman_b"] - r["spearman_b"] for r in recs]
    v_gap, s_gap = judge(gaps, "<=", ORACLE_GAP, seeds=seeds)
    v_rmse, s_rmse = judge([r["rmse_theta"] for r in recs], "<=", 0.15, seeds=seeds)
    s_mml, s_or = (spread([r[k] for r in recs], seeds) for k in ("spearman_b", "oracle_spearman_b"))
    return Claim(
        "Rasch MML-EM on a sparse HELM-shaped matrix recovers item difficulties (as well as an estimator that knows "
        "every true ability) and LM abilities",
        f"recovery (no figure given; our targets: Spearman within {ORACLE_GAP} of the known-theta oracle, "
        "RMSE(theta) <= 0.15)",
        f"oracle - MML Spearman {s_gap.text(4)} (MML {s_mml.mean:.4f}, oracle {s_or.mean:.4f}); "
        f"RMSE(theta) {s_rmse.text(3)}",
        None,
        rule=f"oracle Spearman - MML Spearman <= {ORACLE_GAP} and RMSE(theta_EAP) <= 0.15, each on the 95% "
        f"t-interval of the mean over {len(seeds)} data seeds (the oracle: item-wise ML with the true abilities)",
        short="C1 recovery vs oracle",
        details={"seeds": s_gap.to_dict(), "verdicts": {"oracle_gap": v_gap, "rmse_theta": v_rmse}, "per_seed": recs}
        | {f"{k}_seeds": v.to_dict() for k, v in (("rmse_theta", s_rmse), ("spearman_b", s_mml), ("oracle", s_or))},
        verdict=combine(v_gap, v_rmse),
    )


def cat_claim(cat: dict) -> Claim:
    """C4 from the per-bank CAT/random ratios, judged on their interval over the banks."""
    rows = {k: {"cat": r["max_info"]["items"], "random": r["random"]["items"], "ratio": r["ratio"]}
            for k, r in cat["per_scenario"].items()}  # fmt: skip
    ratios = [r["ratio"] for r in rows.values()]
    claim = Claim.over_seeds(
        f"CAT (max information, EAP) reaches reliability 0.95 with fewer items than random selection "
        f"({len(rows)} scenario banks)",
        "50% fewer on average, up to 82%",
        ratios,
        "<=",
        CAT_RATIO,
        seeds=list(range(len(ratios))),
        rule=f"items(CAT) / items(random) <= {CAT_RATIO} per scenario bank (200 takers, 5 splits, cap 400); the "
        "interval's 'seeds' are the banks",
        short="C4 CAT vs random",
        details={"per_scenario": rows, **{k: v for k, v in cat.items() if k != "per_scenario"}},
    )
    claim.measured = (
        f"ratio {str(claim.measured).replace('seeds', 'banks')} (mean cut {cat['mean_reduction']:.0%}, "
        f"max {cat['max_reduction']:.0%})"
    )
    return claim


def _full_claims(model, data, st: ex.Setup) -> list[Claim]:
    sub = ex.ten_percent_bank(model, st)
    claims = [
        Claim(
            "CAT vs random on a random 10% sub-bank (1,000 items)",
            "fewer items with CAT",
            f"CAT {sub['max_info']['items']:.0f} vs random {sub['random']['items']:.0f} (ratio {sub['ratio']:.2f})",
            sub["ratio"] < 1.0,
            rule="items to reliability 0.95, CAT < random",
            short="10% bank CAT vs random",
        )
    ]
    try:
        sat = ex.swedish_sat_stability(st)
        cat = sat["cat"]
        claims.append(
            Claim(
                "real data (Swedish SAT, 5,000 x 160): difficulty estimates are stable across disjoint halves",
                "none given (our target 0.95: a test-retest level usual for a calibrated bank)",
                f"split-half corr {sat['split_half_corr']:.4f}; CAT {cat['max_info']['items']:.0f} vs random "
                f"{cat['random']['items']:.0f} items to 0.95",
                sat["split_half_corr"] >= 0.95,
                rule="Pearson(b_half1, b_half2) >= 0.95",
                short="SAT split-half stability",
            )
        )
    except ModuleNotFoundError as err:
        claims.append(Claim("Swedish SAT", None, f"skipped: {err}", None, short="SAT (skipped)", verdict=SKIPPED))
    curve = ex.amortization_curve(data, seed=st.seed)
    gp = ex.gp_vs_linear(replace(st, seed=st.seed + 1))
    gen = ex.generator_check(st)
    return claims + [
        Claim(
            "amortized predictor error falls as more items are calibrated (embedding content, held-out items)",
            "decreasing",
            ", ".join(f"{n}: {v:.3f}" for n, v in curve.items()),
            list(curve.values())[-1] < list(curve.values())[0],
            rule="RMSE(b_pred, b) at the largest training set < at the smallest",
            short="amortization RMSE vs items",
            details={str(k): v for k, v in curve.items()},
        ),
        Claim(
            "GP vs linear amortized predictor (held-out template items, AUC)",
            None,
            f"linear {gp['linear']['predicted']:.4f}, GP {gp['gp']['predicted']:.4f} "
            f"(oracle {gp['linear']['oracle']:.4f})",
            None,
            rule="shown",
            short="GP vs linear",
            details=gp,
        ),
        Claim(
            "validate_generator(TemplateGenerator): realised difficulty tracks the target after recalibration",
            "none given (our target 0.8: the generator must order difficulties clearly)",
            f"corr {gen['corr']:.3f}, RMSE {gen['rmse']:.3f}",
            gen["corr"] >= 0.8,
            rule="Pearson(realised, target) >= 0.8",
            short="generator validation",
        ),
    ]
