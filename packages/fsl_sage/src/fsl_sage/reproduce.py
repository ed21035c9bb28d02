"""``icml25 reproduce fsl_sage``: FSL-SAGE vs CSE-FSL, FedAvg and SplitFed on offline digits (spec §8).

Quick (< 1 min on 2 cores): Dirichlet α = 1 equal split, 3 clients, B = 32, E = 1, q = 5, l = 10, Adam 1e-3 /
wd 1e-4, 20 rounds, seed 0; FedAvg, SplitFed-v2, CSE-FSL, FSL-SAGE (eager).
Full (minutes): 5 seeds; IID and α ∈ {0.1, 1, 100}; all five methods; l ∈ {2, 5, 10, 20}; 30 rounds; FSL-SAGE on
the Flower simulation (payload and wire bytes).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from icml25_shared.device import torch_threads
from icml25_shared.report import Claim, ReproResult, results_dir, save_figure, subplots
from icml25_shared.seed import seed_everything

from .algorithms import ALGORITHMS, History
from .comm import expected_bytes, nbytes
from .config import FSLConfig
from .data import client_datasets, load_digits_split
from .models import digits_cnn_split

__all__ = ["reproduce", "run_method"]

logger = logging.getLogger(__name__)

TARGET = 0.93
NAMES = {
    "fsl_sage": "FSL-SAGE",
    "cse_fsl": "CSE-FSL",
    "fedavg": "FedAvg",
    "splitfed_v2": "SplitFed-v2",
    "splitfed_v1": "SplitFed-v1",
}
PAPER_GB = {"fsl_sage": 12.20, "cse_fsl": 26.02, "splitfed_v1": 60.23, "fedavg": 70.04, "splitfed_v2": 109.07}


def _ratio_text(a: float, b: float) -> str:
    if not math.isfinite(a):
        return "n/a (FSL-SAGE never reached it)"
    if not math.isfinite(b):
        return "< 1 (the other never reached it)"
    return f"{a / b:.2f}"


def run_method(
    method: str, seed: int, alpha: float | None, rounds: int, align_interval: int = 10, mode: str = "eager"
) -> tuple[History, bool]:
    """Train ``method`` on the digits split; returns (history, ledger == closed form)."""
    xtr, ytr, xte, yte = load_digits_split(0)
    data = client_datasets(xtr, ytr, 3, alpha=alpha, seed=seed)
    cfg = FSLConfig(
        rounds=rounds, batch_size=32, server_update_interval=5, align_interval=align_interval, mode=mode, seed=seed
    )
    seed_everything(seed)
    client, server, aux = digits_cnn_split()
    algo = ALGORITHMS[method](client, server, aux, cfg)
    hist = algo.fit(data, (xte, yte))
    exp = expected_bytes(
        method,
        [len(d[1]) for d in data],
        cfg.batch_size,
        cfg.q,
        cfg.align_interval,
        cfg.rounds,
        algo.smashed_numel,
        nbytes(client),
        nbytes(server),
        nbytes(aux),
        mode=mode,
    )
    return hist, hist.bytes_per_round == exp


def _plot_curves(out_dir: Path, hists: dict[str, History], name: str, title: str) -> str:
    fig, (ax1, ax2) = subplots(1, 2, figsize=(12, 4.2))
    for m, h in hists.items():
        ax1.plot(np.asarray(h.cumulative_bytes) / 1e6, h.accuracies, marker=".", label=NAMES[m])
        if not all(math.isnan(c) for c in h.grad_cosines):
            ax2.plot(range(len(h.records)), h.grad_cosines, marker=".", label=NAMES[m])
    ax1.axhline(TARGET, color="gray", ls=":", lw=1)
    ax1.set(xscale="log", xlabel="cumulative communication (MB)", ylabel="test accuracy", title=title)
    ax1.legend()
    ax2.set(xlabel="round", ylabel="cosine(estimate, true cut gradient), test data", title="gradient estimate quality")
    ax2.legend()
    return str(save_figure(fig, out_dir, name))


def reproduce(full: bool = False, out_dir: Path | None = None) -> ReproResult:
    """Run the quick (or ``full``) reproduction and return the claims."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir) if out_dir is not None else results_dir("fsl_sage")
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch_threads(1):  # tiny models: extra threads only add synchronisation
        return _reproduce(full, out_dir, t0)


def _reproduce(full: bool, out_dir: Path, t0: float) -> ReproResult:
    rounds = 30 if full else 20
    methods = ["fsl_sage", "cse_fsl", "fedavg", "splitfed_v2"]
    hists: dict[str, History] = {}
    ledger_ok: dict[str, bool] = {}
    for m in methods:
        hists[m], ledger_ok[m] = run_method(m, 0, 1.0, 20)
    b = {m: hists[m].bytes_to_accuracy(TARGET) for m in methods}
    sage = b["fsl_sage"]
    ratio = {m: (sage / b[m] if math.isfinite(b[m]) else (0.0 if math.isfinite(sage) else math.nan)) for m in methods}
    holds1 = sage < min(b["fedavg"], b["splitfed_v2"]) and sage <= 1.1 * b["cse_fsl"]
    fmt = lambda x: f"{x / 1e6:.2f} MB" if math.isfinite(x) else "never"  # noqa: E731
    claims = [
        Claim(
            "FSL-SAGE reaches 93% test accuracy with less communication than FedAvg and SplitFed, and no more than "
            "CSE-FSL (digits, Dirichlet α=1, 3 clients, 20 rounds, seed 0)",
            "CIFAR-10/ResNet-18, ≈81%: SAGE 12.20 GB; ratio vs CSE-FSL 0.47, FedAvg 0.17, SplitFed-SS 0.11 "
            "(read off the official figures)",
            "; ".join(f"{NAMES[m]} {fmt(b[m])}" for m in methods)
            + " → SAGE/"
            + ", /".join(f"{NAMES[m]} {_ratio_text(sage, b[m])}" for m in ("cse_fsl", "fedavg", "splitfed_v2")),
            holds1,
            rule="B_SAGE < min(B_FedAvg, B_SplitFed-v2) and B_SAGE ≤ 1.1·B_CSE (B: bytes at first accuracy ≥ 0.93)",
            details={"bytes_to_93": b, "ratios": ratio},
        )
    ]
    cos_s, cos_c = hists["fsl_sage"].records[10].grad_cosine, hists["cse_fsl"].records[10].grad_cosine
    claims.append(
        Claim(
            "Mechanism: after the round-10 alignment the client's gradient estimate agrees better with the true cut "
            "gradient than CSE-FSL's local-loss gradient (cosine on test data, end of round 10)",
            "alignment makes the aux estimate track the server gradient (paper §4); spec prototype 0.88-0.91 vs "
            "0.63-0.69",
            f"FSL-SAGE {cos_s:.3f} vs CSE-FSL {cos_c:.3f}",
            cos_s > cos_c,
            rule="cosine_SAGE > cosine_CSE at round 10",
        )
    )
    claims.append(
        Claim(
            "Per-round ledger bytes equal the closed form expected_bytes (spec §4) for every method",
            "-",
            ", ".join(
                f"{NAMES[m]} {'equal' if ledger_ok[m] else 'DIFFERENT'} "
                f"({hists[m].bytes_per_round[0] / 1e6:.3f} MB in round 0)"
                for m in methods
            ),
            all(ledger_ok.values()),
            rule="History.bytes_per_round == expected_bytes(...) for all rounds",
        )
    )
    claims.append(
        Claim(
            "Final test accuracy after 20 rounds (shown)",
            "CIFAR-10 at ≈200 GB: SAGE ≈0.85, CSE ≈0.835, SplitFed-MS ≈0.84, FedAvg ≈0.82, SplitFed-SS ≈0.815",
            ", ".join(f"{NAMES[m]} {hists[m].accuracies[-1]:.3f}" for m in methods),
            None,
        )
    )
    artifacts = [_plot_curves(out_dir, hists, "accuracy_vs_bytes", "digits, Dirichlet α = 1, seed 0")]
    settings: dict[str, Any] = {
        "data": "sklearn digits, 1437 train / 360 test, 3 clients, Dirichlet α=1 equal split",
        "batch_size": 32,
        "local_epochs": 1,
        "q": 5,
        "l": 10,
        "rounds": 20,
        "seed": 0,
        "mode": "eager",
        "optimizer": "Adam lr 1e-3, wd 1e-4 (client/server); aux Adam lr 1e-3",
        "align_epochs": 100,
        "align_batch_size": 1000,
        "buffer_size": 1000,
        "per_round": {
            m: {
                "bytes": hists[m].bytes_per_round,
                "accuracy": hists[m].accuracies,
                "grad_cosine": hists[m].grad_cosines,
            }
            for m in methods
        },
    }
    if full:
        claims += _full(out_dir, artifacts, settings, rounds)
    res = ReproResult("fsl_sage", claims, mode="full" if full else "quick", settings=settings, artifacts=artifacts)
    res.runtime_s = time.perf_counter() - t0
    res.save_json(out_dir / "fsl_sage.json")
    return res


def _full(out_dir: Path, artifacts: list[str], settings: dict[str, Any], rounds: int) -> list[Claim]:
    from icml25_shared.progress import track

    seeds = [0, 1, 2, 3, 4]
    alphas: list[float | None] = [None, 0.1, 1.0, 100.0]
    methods = list(NAMES)
    budget = None
    acc_at: dict[str, dict[str, list[float]]] = {}
    wins: dict[str, int] = {}
    b93: dict[str, dict[str, list[float]]] = {}
    cos: dict[str, list[list[float]]] = {"fsl_sage": [], "cse_fsl": []}
    for alpha in track(alphas, "full: partitions"):
        key = "iid" if alpha is None else f"alpha={alpha:g}"
        acc_at[key] = {m: [] for m in methods}
        b93[key] = {m: [] for m in methods}
        wins[key] = 0
        for seed in seeds:
            hs = {m: run_method(m, seed, alpha, rounds)[0] for m in methods}
            if budget is None:  # a fixed budget: what FSL-SAGE spends in its first half of the rounds
                budget = hs["fsl_sage"].cumulative_bytes[rounds // 2]
            for m, h in hs.items():
                ok = [a for a, c in zip(h.accuracies, h.cumulative_bytes) if c <= budget]
                acc_at[key][m].append(max(ok) if ok else 0.0)
                b93[key][m].append(h.bytes_to_accuracy(TARGET))
            if alpha == 1.0:
                for m in cos:
                    cos[m].append(hs[m].grad_cosines)
            wins[key] += int(hs["fsl_sage"].bytes_to_accuracy(TARGET) < hs["cse_fsl"].bytes_to_accuracy(TARGET))
    abl: dict[int, list[float]] = {}
    for ell in (2, 5, 10, 20):
        abl[ell] = [
            run_method("fsl_sage", s, 1.0, rounds, align_interval=ell)[0].bytes_to_accuracy(TARGET) for s in seeds
        ]
    # plots: accuracy at a fixed budget vs α; cosine vs round
    fig, (ax1, ax2) = subplots(1, 2, figsize=(12, 4.2))
    keys = list(acc_at)
    for m in methods:
        ax1.plot(keys, [np.mean(acc_at[k][m]) for k in keys], marker="o", label=NAMES[m])
    ax1.set(ylabel=f"best test accuracy within {budget / 1e6:.1f} MB", title="accuracy at a fixed budget (5 seeds)")
    ax1.legend()
    for m, runs in cos.items():
        arr = np.asarray(runs)
        ax2.plot(arr.mean(0), label=NAMES[m])
    ax2.set(xlabel="round", ylabel="cosine with true cut gradient", title="Dirichlet α = 1, mean of 5 seeds")
    ax2.legend()
    artifacts.append(str(save_figure(fig, out_dir, "full_budget_and_cosine")))
    flower = _flower_check(rounds)
    settings["full"] = {
        "accuracy_at_budget": acc_at,
        "budget_bytes": budget,
        "bytes_to_93": b93,
        "align_interval_ablation_bytes_to_93": abl,
        "flower": flower,
    }
    claims = [
        Claim(
            "FSL-SAGE reaches 93% with fewer bytes than CSE-FSL on how many seeds (5 seeds per partition)",
            "2.13× less than CSE-FSL (CIFAR-10), gap largest at α = 1",
            ", ".join(f"{k}: {wins[k]}/5" for k in keys),
            None,
        ),
        Claim(
            "Accuracy at a fixed budget, FSL-SAGE vs FedAvg under heterogeneity (α = 0.1, mean of 5 seeds)",
            "α = 1 at 80 GiB: SAGE ≈0.83 vs FedAvg ≈0.41",
            f"SAGE {np.mean(acc_at['alpha=0.1']['fsl_sage']):.3f} vs "
            f"FedAvg {np.mean(acc_at['alpha=0.1']['fedavg']):.3f}",
            bool(np.mean(acc_at["alpha=0.1"]["fsl_sage"]) > np.mean(acc_at["alpha=0.1"]["fedavg"])),
            rule="mean accuracy at budget: SAGE > FedAvg",
        ),
        Claim(
            "Alignment interval ablation: median bytes to 93% (α = 1, 5 seeds)",
            "l ∈ {2, 5, 10, 20} ablation in the paper",
            ", ".join(f"l={ell}: {np.median(v) / 1e6:.2f} MB" for ell, v in abl.items()),
            None,
        ),
    ]
    if flower:
        claims.append(
            Claim(
                "FSL-SAGE on the Flower simulation equals the in-process lazy loop (payload bytes per round)",
                "-",
                f"payload {flower['payload_total'] / 1e6:.3f} MB vs in-process {flower['inprocess_total'] / 1e6:.3f} "
                f"MB; wire {flower['wire_total'] / 1e6:.3f} MB; max |Δ client weight| {flower['max_abs_diff']:.2e}",
                flower["payload_equal"] and flower["max_abs_diff"] < 1e-5,
                rule="payload bytes equal and weights within 1e-5",
            )
        )
    return claims


def _flower_check(rounds: int) -> dict[str, Any]:
    """FSL-SAGE (lazy) on Flower's simulation engine vs the in-process lazy loop, digits α = 1, seed 0."""
    try:
        from flwr.simulation import run_simulation

        from .flower import make_client_app, make_server_app
    except ImportError:  # flwr[simulation] not installed
        return {}
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    xtr, ytr, xte, yte = load_digits_split(0)
    data = client_datasets(xtr, ytr, 3, alpha=1.0, seed=0)
    cfg = FSLConfig(rounds=rounds, batch_size=32, mode="lazy", seed=0)

    def model_fn():
        seed_everything(0)
        return digits_cnn_split()

    out: dict[str, Any] = {}
    server_app = make_server_app(model_fn, cfg, rounds, 3, on_finish=lambda s, r: out.update(s=s, r=r))
    client_app = make_client_app(model_fn, lambda pid, n: data[pid], cfg)
    run_simulation(server_app, client_app, 3, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "s" not in out:
        return {}
    c, s, a = model_fn()
    algo = ALGORITHMS["fsl_sage"](c, s, a, cfg)
    algo.fit(data)
    fl = dict(out["r"].arrays.to_torch_state_dict())
    diff = max(float((v - fl[k]).abs().max()) for k, v in algo.clients[0].state_dict().items())
    per_fl = [out["s"].ledger.total_where(round=t) for t in range(rounds)]
    per_ip = [algo.ledger.total_where(round=t) for t in range(rounds)]
    return {
        "payload_total": sum(per_fl),
        "inprocess_total": sum(per_ip),
        "wire_total": out["s"].wire.total,
        "payload_equal": per_fl == per_ip,
        "max_abs_diff": diff,
    }
