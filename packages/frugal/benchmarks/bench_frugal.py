"""Optimizer-step time and state bytes of FRUGAL (block, svd, columns) vs torch.optim.AdamW(foreach=True) and
galore_torch.GaLoreAdamW at the same ρ = 0.25, as ratios.

Two settings, each timed in one round-robin run (every optimizer steps once per round, in rotating order, so
machine drift hits all alike):

- ``tiny-llama``: the reproduction's LLaMA (108,992 parameters), real gradients of one batch; FRUGAL and GaLore
  run AdamW on embeddings/head/norms, AdamW runs everything.
- ``llama60m``: the 7 projectable matrices of ``--layers`` LLaMA-60M blocks (hidden 512, MLP 1376), random
  gradients, every matrix projectable.

Steady state: T is larger than the run, so no step refreshes the subspace; the refresh step (an SVD of every
matrix for ``svd`` and GaLore) is timed separately with T = 1. Usage::

    python packages/frugal/benchmarks/bench_frugal.py [--layers 1] [--repeats 20] [--threads 1] [--out PATH]

writes ``benchmarks/results/bench_frugal.json`` and the printed table to ``.log`` beside it (the README's figures
come from there). Not run by pytest.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from frugal import FRUGAL, param_groups
from frugal.experiments import state_bytes
from icml25_shared.bench import current_rss, round_robin, save_results
from icml25_shared.charlm import LlamaMatrixStack, tiny_llama_with_grads
from icml25_shared.device import get_device, torch_threads

RESULTS = Path(__file__).parent / "results" / "bench_frugal.json"
RHO, LR, NEVER = 0.25, 1e-6, 10**9


def _groups(model: nn.Module) -> list[dict[str, Any]]:
    if isinstance(model, LlamaMatrixStack):
        return [{"params": list(model.mats), "projectable": True}]
    return param_groups(model)


def _galore_groups(model: nn.Module, gap: int) -> list[dict[str, Any]]:
    groups = _groups(model)
    out = [{"params": g["params"]} for g in groups if not g["projectable"]]
    by_shape: dict[tuple[int, ...], list[torch.Tensor]] = {}
    for p in groups[-1]["params"]:
        by_shape.setdefault(tuple(p.shape), []).append(p)
    for shape, ps in by_shape.items():
        out.append(
            {"params": ps, "rank": round(RHO * min(shape)), "update_proj_gap": gap, "scale": 0.25, "proj_type": "std"}
        )
    return out


def _optimizers(model: nn.Module, gap: int) -> dict[str, Callable[[], torch.optim.Optimizer]]:
    from galore_torch import GaLoreAdamW

    def frugal(selector: str) -> Callable[[], torch.optim.Optimizer]:
        return lambda: FRUGAL(
            _groups(model), lr=LR, density=RHO, update_gap=gap, selector=selector, weight_decay=0.0, foreach=True
        )

    return {
        "AdamW(foreach)": lambda: torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, foreach=True),
        "GaLoreAdamW": lambda: GaLoreAdamW(_galore_groups(model, gap), lr=LR, no_deprecation_warning=True),
        "FRUGAL block": frugal("block"),
        "FRUGAL svd": frugal("svd"),
        "FRUGAL columns": frugal("columns"),
    }


def bench(name: str, model: nn.Module, device: torch.device, repeats: int) -> dict[str, Any]:
    steady = {k: f() for k, f in _optimizers(model, NEVER).items()}
    for o in steady.values():  # allocate states and choose the subspace once
        o.step()
    timings = round_robin({k: o.step for k, o in steady.items()}, repeats=repeats, device=device)
    refresh = {k: f() for k, f in _optimizers(model, 1).items() if k in ("GaLoreAdamW", "FRUGAL svd")}
    for o in refresh.values():
        o.step()
    refresh_t = round_robin({k: o.step for k, o in refresh.items()}, repeats=max(3, repeats // 4), device=device)
    base = timings["AdamW(foreach)"].median
    rows = {
        k: {
            "median_s": timings[k].median,
            "ratio_to_adamw": timings[k].median / base,
            "state_bytes": state_bytes(o),
            "state_ratio_to_adamw": state_bytes(o) / state_bytes(steady["AdamW(foreach)"]),
        }
        for k, o in steady.items()
    }
    for k, t in refresh_t.items():
        rows[k]["refresh_step_s"] = t.median
    return {
        "setting": name,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "rss_bytes": current_rss(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "repeats": repeats,
        "rows": rows,
        "block_over_adamw": rows["FRUGAL block"]["ratio_to_adamw"],
        "svd_over_galore": rows["FRUGAL svd"]["median_s"] / rows["GaLoreAdamW"]["median_s"],
        "svd_refresh_over_galore_refresh": rows["FRUGAL svd"]["refresh_step_s"] / rows["GaLoreAdamW"]["refresh_step_s"],
    }


def _table(res: dict[str, Any]) -> list[str]:
    lines = [
        f"== {res['setting']} on {res['device']} ({res['parameters']:,} parameters, {res['repeats']} rounds, "
        f"{res['torch_threads']} threads, load {res['load_average']:.1f})",
        f"{'optimizer':<16}{'step ms':>10}{'x AdamW':>9}{'state bytes':>14}{'x AdamW':>9}{'refresh ms':>12}",
    ]
    for k, r in res["rows"].items():
        refresh = f"{1e3 * r['refresh_step_s']:>12.2f}" if "refresh_step_s" in r else f"{'':>12}"
        lines.append(
            f"{k:<16}{1e3 * r['median_s']:>10.2f}{r['ratio_to_adamw']:>9.2f}{r['state_bytes']:>14,}"
            f"{r['state_ratio_to_adamw']:>9.3f}{refresh}"
        )
    lines.append(
        f"block / AdamW {res['block_over_adamw']:.2f} (aim <= 1.2);  svd / GaLore {res['svd_over_galore']:.2f} "
        f"(aim <= 1.0);  refresh svd / GaLore {res['svd_refresh_over_galore_refresh']:.2f}"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=1, help="LLaMA-60M blocks in the matrix stack (the model has 8)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON path; the table goes to the same name .log")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable ratios on a shared machine)")
    args = ap.parse_args()
    device = get_device()
    with torch_threads(args.threads):
        results = [
            bench("tiny-llama", tiny_llama_with_grads(device), device, args.repeats),
            bench(f"llama60m x{args.layers} layers", LlamaMatrixStack(args.layers, device), device, args.repeats),
        ]
    lines = [line for r in results for line in ["", *_table(r)]]
    print("\n".join(lines))
    save_results(args.out, results, lines)


if __name__ == "__main__":
    main()
