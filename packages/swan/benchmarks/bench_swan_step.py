"""Optimizer-step time of SWAN vs torch.optim.AdamW(foreach=True) and torch.optim.Muon, as ratios to AdamW.

Two settings, each timed in one round-robin run (every optimizer steps once per round, in rotating order, so
machine drift hits all alike):

- ``tiny-llama``: the reproduction's LLaMA (108,992 parameters), real gradients of one batch; SWAN and Muon are
  hybrids (AdamW on embeddings/head/norms), AdamW covers everything.
- ``llama60m``: the 7 hidden matrices of ``--layers`` LLaMA-60M blocks (hidden 512, MLP 1376), random gradients.

Also reported: optimizer-state bytes (exact). The step's memory is measured by ``bench_swan_memory.py`` (fresh
process per optimizer). SWAN's default batches same-shaped matrices only within the largest matrix's memory;
the per-matrix loop and uncapped stacking are timed beside it. Usage (one torch thread)::

    OMP_NUM_THREADS=1 python packages/swan/benchmarks/bench_swan_step.py [--layers 1] [--repeats 5] [--out PATH]

writes ``benchmarks/results/bench_swan_step.json`` and the printed table to ``.log`` beside it (the README's figures
come from there). Not run by pytest.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from icml25_shared.bench import round_robin, save_results
from icml25_shared.charlm import LlamaMatrixStack, tiny_llama_with_grads
from icml25_shared.device import get_device
from icml25_shared.training import optimizer_state_bytes
from swan import SWAN, param_groups

RESULTS = Path(__file__).parent / "results" / "bench_swan_step.json"


class _Pair:
    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts
        self.state = {k: v for o in opts for k, v in o.state.items()}

    def step(self) -> None:
        for o in self.opts:
            o.step()
        self.state = {k: v for o in self.opts for k, v in o.state.items()}


def _optimizers(model: nn.Module) -> dict[str, Callable[[], Any]]:
    """name -> factory of a fresh optimizer over ``model`` (lr tiny: weights barely move between repeats)."""
    lr = 1e-6
    groups = lambda: param_groups(model, lr=lr)  # noqa: E731

    def muon() -> Any:
        g = groups()
        opts = [torch.optim.Muon(g[0]["params"], lr=lr, weight_decay=0.0)]
        if len(g) > 1:
            opts.append(torch.optim.AdamW(g[1]["params"], lr=lr, weight_decay=0.0, foreach=True))
        return _Pair(*opts)

    return {
        "AdamW(foreach)": lambda: torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, foreach=True),
        "SWAN K=10 default": lambda: SWAN(groups()),
        "SWAN K=10 loop": lambda: SWAN(groups(), foreach=False),
        "SWAN K=10 foreach": lambda: SWAN(groups(), foreach=True, max_bucket_bytes=1 << 40),
        "SWAN NSDS": lambda: SWAN(groups(), whitening="nsds", foreach=False),
        "Muon (5 steps)": muon,
    }


def bench(name: str, model: nn.Module, device: torch.device, repeats: int) -> dict[str, Any]:
    opts = {k: f() for k, f in _optimizers(model).items()}
    for o in opts.values():  # allocate states
        o.step()
    timings = round_robin({k: o.step for k, o in opts.items()}, repeats=repeats, warmup=1, device=device)
    base = timings["AdamW(foreach)"].median
    rows = {
        k: {
            "median_s": timings[k].median,
            "ratio_to_adamw": timings[k].median / base,
            "state_bytes": optimizer_state_bytes(o),
        }
        for k, o in opts.items()
    }
    muon_t = rows["Muon (5 steps)"]["median_s"]
    return {
        "setting": name,
        "device": str(device),
        "parameters": sum(p.numel() for p in model.parameters()),
        "repeats": repeats,
        "rows": rows,
        "ns10_over_muon": rows["SWAN K=10 default"]["median_s"] / muon_t,
        "ns10_foreach_over_muon": rows["SWAN K=10 foreach"]["median_s"] / muon_t,
        "nsds_over_adamw": rows["SWAN NSDS"]["ratio_to_adamw"],
    }


def _table(res: dict[str, Any]) -> list[str]:
    lines = [
        f"== {res['setting']} on {res['device']} ({res['parameters']:,} parameters, {res['repeats']} rounds)",
        f"{'optimizer':<20}{'step ms':>10}{'x AdamW':>9}{'state bytes':>14}",
    ]
    for k, r in res["rows"].items():
        lines.append(f"{k:<20}{1e3 * r['median_s']:>10.2f}{r['ratio_to_adamw']:>9.2f}{r['state_bytes']:>14,}")
    lines.append(
        f"SWAN K=10 / Muon: default {res['ns10_over_muon']:.2f}, foreach {res['ns10_foreach_over_muon']:.2f} "
        f"(aim <= 1.5);  NSDS / AdamW {res['nsds_over_adamw']:.2f} (aim <= 1.5)"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=1, help="LLaMA-60M blocks in the matrix stack (the model has 8)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON path; the table goes to the same name .log")
    args = ap.parse_args()
    device = get_device()
    results = [
        bench("tiny-llama", tiny_llama_with_grads(device), device, args.repeats),
        bench(f"llama60m x{args.layers} layers", LlamaMatrixStack(args.layers, device), device, args.repeats),
    ]
    lines = [line for r in results for line in ["", *_table(r)]]
    print("\n".join(lines))
    save_results(args.out, results, lines)


if __name__ == "__main__":
    main()
