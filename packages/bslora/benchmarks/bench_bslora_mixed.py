"""Mixed-adapter serving, N = 64 adapters: our ``adapter_names`` batch vs peft's own ``adapter_names`` batch.

    python packages/bslora/benchmarks/bench_bslora_mixed.py [--hidden 512] [--repeats 4] [--summarize]

One 8-layer random Llama (hidden 512, intermediate 1024), 64 adapters on q, k, v, up, down, one row per adapter:
ours BSLoRA SS(2,4,16), peft LoRA r = 8 (about twice our parameters). Two cases, each timed in one interleaved run
(``icml25_shared.bench.round_robin``, a fresh seeded order every round so that no side always follows the same
one) together with the bare base model (no adapter code at all):

* ``forward``: one no-grad forward of 64 rows x 64 tokens (prefill);
* ``generate``: greedy ``generate`` of 16 new tokens from 64 prompts of 16 tokens (decode: 64 rows x 1 token a step).

Breakdown: the base model's time is common to both sides and the method cannot change it, so the best ratio any
implementation could reach is ``limit = base / peft`` (adapters for free). The adapter part (total - base) of each
side is also split by operator with ``torch.profiler`` (base profile subtracted per operator: matmuls, gathers /
stacks, element-wise). Writes ``benchmarks/results/bench_bslora_mixed.{json,log}`` and the rows of
``performance.json``; ``--summarize`` rebuilds those rows from the committed JSON without re-running.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_bslora import llama, ours, peft_lora

from icml25_shared.bench import round_robin, save_results, write_performance

RESULTS = Path(__file__).parent / "results"
SOURCE = "bench_bslora_mixed.json"
N_ADAPTERS = 64
GOAL = 1 / 1.2  # >= 1.2x faster than peft's adapter_names


def _op_profile(fn) -> dict[str, float]:
    """Self CPU seconds per operator of one call of ``fn`` (under the profiler: slower, for the split only)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    return {e.key: e.self_cpu_time_total / 1e6 for e in p.key_averages()}


KINDS = {
    "matmul (bmm / baddbmm / mm / addmm)": ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm"),
    "gather / group (stack, cat, index*, copy)": (
        "aten::stack",
        "aten::cat",
        "aten::index",
        "aten::index_select",
        "aten::index_add_",
        "aten::index_put_",
        "aten::_index_put_impl_",
        "aten::copy_",
        "aten::nonzero",
    ),  # fmt: skip
    "element-wise (add, mul)": ("aten::add", "aten::add_", "aten::mul", "aten::mul_"),
}


def _adapter_split(prof: dict[str, float], base: dict[str, float]) -> dict[str, float]:
    """Adapter part of a profile: per kind, its operators' self time minus the base model's, plus the rest."""
    out = {}
    for kind, ops in KINDS.items():
        out[kind] = sum(prof.get(o, 0.0) - base.get(o, 0.0) for o in ops)
    total = sum(prof.values()) - sum(base.values())
    out["other (Python dispatch, views, remaining ops)"] = total - sum(out.values())
    out["total"] = total
    return out


def run_case(case: str, fns: dict, repeats: int) -> dict:
    """Interleaved timings of base / ours / peft, per-round ratios, the limit and the profiled split."""
    load0 = os.getloadavg()[0]
    t = round_robin(fns, repeats=repeats, warmup=1, order="shuffle")
    load1 = os.getloadavg()[0]
    per_round = [o / p for o, p in zip(t["ours"].times, t["peft"].times, strict=True)]
    limits = [b / p for b, p in zip(t["base"].times, t["peft"].times, strict=True)]
    med = {k: v.median for k, v in t.items()}
    adapter = {k: med[k] - med["base"] for k in ("ours", "peft")}
    ad_rounds = [
        (o - b) / (p - b) for o, p, b in zip(t["ours"].times, t["peft"].times, t["base"].times, strict=True) if p > b
    ]
    prof = {k: _op_profile(fns[k]) for k in ("base", "ours", "peft")}
    return {
        "case": case,
        "median_s": med,
        "times_s": {k: v.times for k, v in t.items()},
        "ratio": med["ours"] / med["peft"],
        "ratio_rounds": per_round,
        "limit": med["base"] / med["peft"],
        "limit_rounds": limits,
        "adapter_s": adapter,
        "adapter_ratio": adapter["ours"] / adapter["peft"] if adapter["peft"] > 0 else None,
        "adapter_ratio_rounds": ad_rounds,
        "base_share_of_peft": med["base"] / med["peft"],
        "profile_adapter_split_s": {k: _adapter_split(prof[k], prof["base"]) for k in ("ours", "peft")},
        "load_1min": [load0, load1],
        "order": "shuffle",
    }


def measure(hidden: int, repeats: int) -> dict:
    base, _ = llama(hidden)
    rows = [f"a{i}" for i in range(N_ADAPTERS)]
    mo = ours(copy.deepcopy(base), N_ADAPTERS)
    mp = peft_lora(copy.deepcopy(base), N_ADAPTERS)
    g = torch.Generator().manual_seed(1)
    fwd_ids = torch.randint(0, 128, (N_ADAPTERS, 64), generator=g)
    gen_ids = torch.randint(0, 128, (N_ADAPTERS, 16), generator=g)
    gen_kw = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False, "pad_token_id": 0}
    fwd = {
        "base": lambda: base(input_ids=fwd_ids),
        "ours": lambda: mo(input_ids=fwd_ids, adapter_names=rows),
        "peft": lambda: mp(input_ids=fwd_ids, adapter_names=rows),
    }
    gen = {
        "base": lambda: base.generate(gen_ids, **gen_kw),
        "ours": lambda: mo.generate(gen_ids, adapter_names=rows, **gen_kw),
        "peft": lambda: mp.generate(input_ids=gen_ids, adapter_names=rows, **gen_kw),
    }
    cases = []
    with torch.no_grad():
        # the two sides serve the same rows with their own adapters: check both actually differ from the base
        b = fwd["base"]().logits
        assert not torch.allclose(fwd["ours"]().logits, b) and not torch.allclose(fwd["peft"]().logits, b)
        cases.append(run_case(f"forward, {N_ADAPTERS} rows x 64 tokens", fwd, repeats))
        cases.append(run_case(f"generate, {N_ADAPTERS} prompts x 16 tokens + 16 new", gen, repeats))
    return {"hidden": hidden, "adapters": N_ADAPTERS, "threads": 1, "repeats": repeats, "cases": cases}


def rows_of(res: dict) -> list[dict]:
    out = []
    for c in res["cases"]:
        load = max(c["load_1min"])
        what = f"{c['case']}, {res['adapters']} adapters, hidden {res['hidden']}"
        out.append({
            "case": f"mixed batch ({what}), SS(2,4,16) vs LoRA-8",
            "peer": "peft adapter_names",
            "metric": "time",
            "ratio": c["ratio"],
            "lo": min(c["ratio_rounds"]),
            "hi": max(c["ratio_rounds"]),
            "limit": c["limit"],
            "goal": f"<= {GOAL:.2f} (1.2x faster)",
            "load": load,
        })  # fmt: skip
        if c["adapter_ratio"] is not None and c["adapter_ratio"] >= 0:
            # per-round differences of two noisy timings can go below 0 under load: no spread is given then
            rounds = c["adapter_ratio_rounds"]
            spread = (min(rounds), max(rounds)) if rounds and min(rounds) >= 0 else (None, None)
            out.append({
                "case": f"adapter part only (total - base), {c['case']}",
                "peer": "peft adapter_names",
                "metric": "time",
                "ratio": c["adapter_ratio"],
                "lo": spread[0],
                "hi": spread[1],
                "limit": 0.0,
                "goal": f"<= {GOAL:.2f}",
                "load": load,
            })  # fmt: skip
    return out


NOTES = [
    "Mixed batches: the bare base model's time is common to ours and peft and no adapter implementation can "
    "remove it, so the limit of the whole-batch ratio is base / peft; where the limit is above 0.83 the 1.2x goal "
    "is out of reach on this input; where it is below, what separates the whole-batch ratio from the limit is the "
    "adapter work that remains (ours against peft's: the adapter-only row, total - base).",
]


def lines_of(res: dict) -> list[str]:
    lines = [f"hidden {res['hidden']}, {res['adapters']} adapters, one row each, 1 torch thread"]
    for c in res["cases"]:
        m = c["median_s"]
        lines.append(
            f"{c['case']}: base {m['base']:.3f} s, ours {m['ours']:.3f} s, peft {m['peft']:.3f} s; ours/peft "
            f"{c['ratio']:.3f} [{min(c['ratio_rounds']):.3f}, {max(c['ratio_rounds']):.3f}], limit {c['limit']:.3f}; "
            f"adapter part ours {c['adapter_s']['ours']:.3f} s vs peft {c['adapter_s']['peft']:.3f} s "
            f"(ratio {c['adapter_ratio']:.3f}); load {c['load_1min'][0]:.2f}-{c['load_1min'][1]:.2f}"
        )
        for side in ("ours", "peft"):
            split = c["profile_adapter_split_s"][side]
            parts = ", ".join(f"{k} {v:.3f}" for k, v in split.items())
            lines.append(f"  profiled adapter split, {side} (s, under the profiler): {parts}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed JSON")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results folder")
    args = ap.parse_args()
    results = args.results
    if args.summarize:
        res = json.loads((results / SOURCE).read_text())
    else:
        torch.set_num_threads(1)
        t0, c0 = time.perf_counter(), time.process_time()
        res = measure(args.hidden, args.repeats)
        res["wall_s"], res["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        lines = lines_of(res)
        lines.append(f"{res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} CPU-s")
        print("\n".join(lines))
        save_results(results / SOURCE, res, lines)
    write_performance(results, SOURCE, rows_of(res), notes=NOTES)
    print("median load", statistics.median(x for c in res["cases"] for x in c["load_1min"]))


if __name__ == "__main__":
    main()
