"""``icml25 reproduce eagles``: EAGLES' headline on real Cora split into 10 Louvain clients.

Claim (abstract: "−80% communication, −82% training FLOPs while maintaining high performance", on ogbn-proteins),
judged on the whole method: FedAvg (dense GNN, Flower's size-weighted ``FedAvg``, in process) vs EAGLES
pre-trained until the 30% density band's consensus mask is stored, then re-trained with that mask fixed (a) with
the graph sparsifier off, (b) complete with keep ratios (0.95, 0.9, 0.85, 0.8). One verdict per statement and
variant, each over seeds (t-interval of the mean): accuracy ≥ FedAvg − 2 points; upload and training MACs of
the whole method (the pre-training rounds plus the re-training, GNN plus graph sparsifier) ≤ 0.35× and ≤ 0.40×
FedAvg's over its rounds. The GNN side alone and the trade-off (when the sparsifier pays for itself) are shown.
``--full``: official widths, 3 seeds, keep ratios (0.9, 0.7, 0.5, 0.3), aggregation ablations, random split; in
parts stored under ``out_dir/parts``: ``python -m eagles.reproduce --full --out DIR --resume`` continues a run.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import partial
from pathlib import Path

from eagles.experiments import (
    ABLATIONS,
    PartStore,
    Setup,
    cost_tradeoff,
    curves_of,
    load_planetoid,
    plot_runs,
    plot_tradeoff,
    run_parts,
    summarise,
)
from icml25_shared.device import torch_threads
from icml25_shared.report import Claim, ReproResult, save_figure
from icml25_shared.verdict import seed_list

__all__ = ["reproduce"]

PAPER_UP = 0.20  # −80% communication (abstract, ogbn-proteins)
PAPER_MACS = 0.18  # −82% training FLOPs (abstract, ogbn-proteins)
TARGET = {"up": 0.35, "macs": 0.40}
"""Our target: the paper's 0.20 / 0.18 loosened because on a 10-client Cora federation the 30% band alone costs
≈ 0.30 of FedAvg's GNN; the accuracy rule reads "maintained" as within 2 points of FedAvg."""
_WHOLE = "of the whole method (the pre-training rounds that find the band plus the re-training, GNN plus graph "
_WHOLE += "sparsifier) / FedAvg's over its rounds"
_STATEMENTS = (  # per-seed figure, statement, paper, op, threshold, rule, short, unit
    ("acc_gap", "mean client test accuracy (best validation round) minus FedAvg's", "maintained", ">=", -2.0,
     "≥ −2 points (our reading of 'maintained')", "acc − FedAvg", "points"),
    ("up_method", f"upload bytes {_WHOLE}", PAPER_UP, "<=", TARGET["up"],
     f"≤ {TARGET['up']} (our target; the paper reports {PAPER_UP} on ogbn-proteins)", "total upload / FedAvg", ""),
    ("macs_method", f"training MACs {_WHOLE}", PAPER_MACS, "<=", TARGET["macs"],
     f"≤ {TARGET['macs']} (our target; the paper reports {PAPER_MACS} on ogbn-proteins)", "total MACs / FedAvg", ""),
)  # fmt: skip


def _variant_claims(name: str, label: str, v: dict) -> list[Claim]:
    """One verdict per statement, each judged over the variant's seeds."""
    return [
        Claim.over_seeds(f"EAGLES {label}: {text}", paper, v["per_seed"][key], op, thr, seeds=v["seed_ids"], rule=rule,
                         unit=unit, short=f"({name}) {short}", details={"pretrain_rounds": v["pretrain_rounds"]})
        for key, text, paper, op, thr, rule, short, unit in _STATEMENTS
    ]  # fmt: skip


def reproduce(
    full: bool,
    out_dir: Path,
    *,
    download: bool = False,
    seed: int = 0,
    setup: Setup | None = None,
    resume: bool = False,
    run_missing: bool = True,
) -> ReproResult:
    """Quick (``full=False``) or ``full=True`` (``Setup.full()``, each part stored in ``out_dir/parts`` as it
    finishes) on the seeds ``seed_list(seed, n)``, n the setup's number of seeds. ``resume``: reuse stored parts
    (made with the same setup, else an error); ``run_missing=False``: run nothing, summarise the stored parts.
    ``setup`` shrinks a run (tests only)."""
    setup = setup or (Setup.full() if full else Setup())
    setup = replace(setup, seeds=tuple(seed_list(seed, len(setup.seeds))))
    store = PartStore(Path(out_dir) / "parts", setup, resume=resume or not run_missing) if full else None
    with torch_threads(1):
        data = load_planetoid(setup.dataset, download=download)
        runs, log = run_parts(setup, data, store, run_missing=run_missing)
    res = summarise(setup, runs)
    claims: list[Claim] = []
    if log["missing"]:
        done = len(log["parts"])
        claims.append(
            Claim(
                "every part of the run finished (the table covers the parts done: see settings.parts)",
                "all",
                f"{done} of {done + len(log['missing'])} parts",
                False,
                short="all parts finished",
            )
        )
    if not res["complete"]:
        claims.append(
            Claim(f"pre-training reaches the {setup.target_band:.0%} density band", "reached", "missed", False,
                  short="target band reached")
        )  # fmt: skip
    for name, label in (("b", "(b), complete"), ("a", "(a), graph sparsifier off")):
        if name in res:
            claims += _variant_claims(name, label, res[name])
    artifacts = []
    if "a" in res and "b" in res:
        a, b = res["a"], res["b"]
        claims.append(
            Claim(
                "EAGLES: the GNN side alone (re-training rounds, no graph sparsifier, no pre-training) / FedAvg's: "
                "upload and MACs equal the chosen band's weight density by construction; kept-edge fraction of (b)",
                "0.20 / 0.18",
                f"(a) up {a['up_gnn_ratio']:.2f}×, MACs {a['macs_gnn_ratio']:.2f}×; (b) up {b['up_gnn_ratio']:.2f}×, "
                f"MACs {b['macs_gnn_ratio']:.2f}×, edges {b['kept_edges']:.2f}",
                None,
                rule="shown: a part of the cost, not the method's",
                details={"a": a, "b": b},
                short="GNN side only",
            )
        )
        t = cost_tradeoff(setup, res, data)
        r, d, w = t["rounds"], t["degree"], t["width"]
        f8 = dict(zip(w["h"], w["ogbn_proteins_sparsifier_over_gnn"], strict=True)).get(setup.expert_hidden, 0.0)
        claims.append(
            Claim(
                "When the graph sparsifier pays for itself (cost model anchored at this run): (a) reaches the upload "
                "target after R re-train rounds (pre-training paid once); (b)'s cost as R grows; the sparsifier's "
                "upload over FedAvg's GNN at F = 8; it saves MACs only for expert width h < (1 − kept)·Σf_out/2K",
                None,
                f"(a) ≤ {TARGET['up']} from R = {r['a_reaches_target_upload_at_R']}; (b) → {r['b_limit_up']:.2f}×; "
                f"F = 8: {f8:.3f}×; h < {d['h_max_to_pay']:.1f}",
                None,
                rule="shown: a model of the measured costs (see settings.tradeoff)",
                details=t,
                short="sparsifier trade-off",
            )
        )
        artifacts.append(str(save_figure(plot_tradeoff(t, (TARGET["up"], TARGET["macs"])), out_dir, "eagles_tradeoff")))
    for name in [k for k in res if k.startswith("b") and k[1:].isdigit()] + [
        k for k in (*ABLATIONS, "random_b") if k in res
    ]:
        v = res[name]
        claims.append(
            Claim(
                f"{name}: accuracy minus FedAvg's (same split), kept edges, whole-method upload / FedAvg's, over "
                f"{v['seeds']} seed(s)",
                None,
                f"{v['acc'] - v['fedavg_acc']:+.1f} pts, edges {v['kept_edges']:.2f}, up {v['up_method_ratio']:.2f}×",
                None,
                details=v,
                short=f"{name} vs FedAvg"[:32],
            )
        )
    settings = {k: v for k, v in res["setup"].items() if k != "extra"}
    settings["fedavg_acc"] = res.get("fedavg_acc")
    settings["band"] = [r.get("band") for r in runs]
    if store is not None:
        settings["parts"] = log["parts"]
        settings["missing_parts"] = log["missing"]
    settings["curves"] = curves_of(runs)
    return ReproResult(
        "eagles",
        claims,
        settings=settings,
        artifacts=[str(save_figure(plot_runs(setup, runs), out_dir, "eagles_cora")), *artifacts],
    )


reproduce_resume = partial(reproduce, resume=True)
"""``--resume``: :func:`reproduce` reusing the parts stored in ``out_dir/parts``."""
reproduce_stored = partial(reproduce, run_missing=False)
"""``--summarise-only``: :func:`reproduce` of the stored parts only, running nothing."""


def main(argv: list[str] | None = None) -> int:
    """``python -m eagles.reproduce --full --out DIR [--resume | --summarise-only]``: the icml25 runner's stamping."""
    from icml25_shared.runner import run_in_process

    p = argparse.ArgumentParser(prog="python -m eagles.reproduce", description=main.__doc__)
    p.add_argument("--full", action="store_true", help="the full run (parts stored under OUT/parts)")
    p.add_argument("--out", type=Path, required=True, help="output folder (result_<mode>.json, plots, parts/)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="reuse the finished parts stored in OUT/parts")
    mode.add_argument("--summarise-only", action="store_true", help="run nothing; summarise the stored parts")
    p.add_argument("--download", action="store_true", help="download Cora if it is not installed")
    p.add_argument("--seed", type=int, default=0, help="base seed (the run's seeds: seed·n … seed·n + n − 1)")
    args = p.parse_args(argv)
    if (args.resume or args.summarise_only) and not args.full:
        p.error("--resume and --summarise-only apply to --full runs (quick mode stores no parts)")
    fn = "reproduce_resume" if args.resume else "reproduce_stored" if args.summarise_only else "reproduce"
    res = run_in_process(
        "eagles", f"eagles.reproduce:{fn}", args.out, full=args.full, download=args.download, seed=args.seed
    )
    return 1 if getattr(res, "crashed", False) else 0


if __name__ == "__main__":
    raise SystemExit(main())
