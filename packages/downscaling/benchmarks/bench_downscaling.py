"""Serving cost of downscaled models as ratios to the dense fp32 model, and the wrappers' overhead against the
host libraries called directly, all from one run.

Models: a Llama with 4 layers, d = 128, 4 heads, MLP 384, tied embeddings (0.86 M parameters, random init; speed
and bytes do not depend on training) and the KD student shape (2 layers, d = 64, MLP 192). Candidates: torch.ao
int8 dynamic, torchao int8 weight-only, 50 % Wanda (masks made permanent: dense kernels, so no speed-up is
expected), 50 % heads (structured: the model shrinks), the student. Forward latency of a ``(batch, 64)`` input is
timed round-robin (every model once per round, in a fresh seeded random order each round); tokens/s follows;
J/token is **estimated** (15 W per CPU thread x time) unless a counter is readable. Wrapper overhead: ``quantize``
vs ``torch.ao.quantization.quantize_dynamic`` (which copies the model itself) and ``torchao.quantize_`` on a deep
copy, ``prune(heads)`` vs the same ``torch_pruning.prune_linear_*`` slicing on a deep copy: each pair alternated
(direct first in even rounds, ours first in odd ones), a full garbage collection untimed before every call (with
the objects alive at setup frozen, so that it takes 0.2 ms, not 200 ms): every call copies a model and leaves about
600 objects in reference cycles, and a collection triggered inside one call would otherwise charge it for the
other's garbage. A wrapper's ratio is the median of its per-round ratios. The work of the wrappers that the direct
calls do not do is timed on its own (``quantize``'s input walk and byte count; ``prune(heads)``'s walk over its copy
and its scoring of the key/value groups, which the direct slicing is handed, each on a fresh copy). Every ratio
comes with its spread: the min and max of the per-round ratios. FLOPs/token of the dense model: FlopCounterMode vs
2 x fvcore's ``FlopCountAnalysis`` (multiply-adds), with eager and SDPA attention. Usage (``--threads 1`` by default)::

    python packages/downscaling/benchmarks/bench_downscaling.py [--batch 8] [--repeats 20] [--overhead-repeats 100]

writes ``benchmarks/results/bench_downscaling.json`` and the printed table (``.log``). Not run by pytest.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from downscaling import PruneConfig, finalize, prune, quantize
from downscaling.experiments import ModelSize, new_model
from downscaling.flops import count_flops
from downscaling.profiling import WATTS_PER_CPU_THREAD, read_energy_counter, weight_bytes
from downscaling.prune import _drop_groups
from downscaling.prune import _scan as _prune_scan
from downscaling.quantize import _scan, _torch_ao_linear_bytes
from icml25_shared.bench import Timing, paired, round_robin, save_results, write_performance
from icml25_shared.device import torch_threads

RESULTS = Path(__file__).parent / "results" / "bench_downscaling.json"


def _direct_torch_ao(m: torch.nn.Module) -> Any:
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)  # copies the model itself (inplace=False)


def _direct_torchao(m: torch.nn.Module) -> Any:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    q = copy.deepcopy(m).eval()
    quantize_(q, Int8WeightOnlyConfig())
    return q


def _direct_heads(m: torch.nn.Module, removed: dict[int, list[int]]) -> Any:
    import torch_pruning as tp

    q = copy.deepcopy(m)
    hd, group = 32, 1
    for i, layer in enumerate(q.model.layers):
        att = layer.self_attn
        rows = [g * group * hd + r for g in removed[i] for r in range(group * hd)]
        tp.prune_linear_out_channels(att.q_proj, rows)
        tp.prune_linear_out_channels(att.k_proj, rows)
        tp.prune_linear_out_channels(att.v_proj, rows)
        tp.prune_linear_in_channels(att.o_proj, rows)
    q.config.head_dim, q.config.num_attention_heads, q.config.num_key_value_heads = hd, 2, 2
    return q


def _overhead(direct: Any, ours: Any, repeats: int) -> dict[str, Any]:
    """Alternate ``direct`` and ``ours`` (rotating order; with two callables: direct first in even rounds), an
    untimed full garbage collection before every call; per-round ratios ours / direct."""
    t = round_robin({"direct": direct, "downscaling": ours}, repeats=repeats, warmup=2, between=gc.collect)
    return {
        "a": "direct",
        "b": "downscaling",
        "time_a": t["direct"].to_dict(),
        "time_b": t["downscaling"].to_dict(),
    } | paired(t["downscaling"], t["direct"])


def performance_rows(results: dict) -> list[dict]:
    """The README's rows (ours / peer): each downscaled model's serving latency against dense fp32, and each
    wrapper against the host library called directly (interleaved)."""
    load = results["settings"]["load"]
    models = results["models"]
    dense = models["dense fp32"]["latency_ms"]

    def spread(r: list[float] | None) -> dict[str, float | None]:
        return {"lo": min(r) if r else None, "hi": max(r) if r else None}

    rows = [
        {"case": f"serve: {name}", "peer": "dense fp32 model", "metric": "latency", "ratio": m["latency_ms"] / dense,
         **spread(m.get("ratio_rounds")), "load": load}
        for name, m in models.items() if name != "dense fp32"
    ]  # fmt: skip
    for name, cmp in results["overhead"].items():
        ours, peer = name.split(" vs ")
        rows.append({"case": f"wrapper: {ours}", "peer": peer, "metric": "time",
                     "ratio": cmp["ratio"],
                     **spread(cmp.get("ratio_rounds")), "goal": "≤ 1.05×", "load": load})  # fmt: skip
    return rows


def _median_s(fn: Any, repeats: int = 200) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Timing(times).median


def _median_on_copies(fn: Any, model: torch.nn.Module, repeats: int = 100) -> float:
    """Median time of ``fn`` on a fresh deep copy of ``model`` (copy and a garbage collection untimed), as ``prune``
    meets its own copy."""
    times = []
    for _ in range(repeats):
        m = copy.deepcopy(model)
        gc.collect()
        t0 = time.perf_counter()
        fn(m)
        times.append(time.perf_counter() - t0)
    return Timing(times).median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--overhead-repeats", type=int, default=100, help="rounds of each wrapper-vs-direct pair")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    load_start = os.getloadavg()[0]
    with torch_threads(a.threads):
        dense = new_model(ModelSize(4, 128, 384), 64, 0).eval()
        x = torch.randint(0, 65, (a.batch, 64), generator=torch.Generator().manual_seed(0))
        calib = torch.randint(0, 65, (8, 64), generator=torch.Generator().manual_seed(1))
        heads = prune(dense, PruneConfig("heads", 0.5))
        models = {
            "dense fp32": dense,
            "int8 dynamic (torch.ao)": quantize(dense, "int8_dynamic", "torch.ao").model,
            "int8 weight-only (torchao)": quantize(dense, "int8_weight", "torchao").model,
            "Wanda 50% (dense kernels)": finalize(prune(dense, PruneConfig("wanda", 0.5, calib=calib)).model),
            "heads 50% (structured)": heads.model,
            "KD student 2x64": new_model(ModelSize(2, 64, 192), 64, 0).eval(),
        }
        with torch.inference_mode():
            t = round_robin(
                {k: (lambda m=m: m(input_ids=x)) for k, m in models.items()},
                repeats=a.repeats,
                warmup=2,
                order="shuffle",
            )
        flops = {k: count_flops(m if "int8 dynamic" not in k else dense, x) / x.numel() for k, m in models.items()}
        watts = WATTS_PER_CPU_THREAD * a.threads
        base = t["dense fp32"].median
        rows = {}
        for k, m in models.items():
            med = t[k].median
            rows[k] = {
                "latency_ms": 1e3 * med,
                "tokens_per_s": x.numel() / med,
                "weight_bytes": weight_bytes(m),
                "flops_per_token": flops[k],
                "joules_per_token_est": watts * med / x.numel(),
                "speedup": base / med,
                "bytes_ratio": weight_bytes(dense) / weight_bytes(m),
                "ratio_rounds": [b / d for d, b in zip(t["dense fp32"].times, t[k].times, strict=True)],
            }
        gc.collect()
        gc.freeze()  # the objects alive now are never garbage: the collections between calls skip them
        n = a.overhead_repeats
        ov = {
            "quantize int8_dynamic vs quantize_dynamic": _overhead(
                lambda: _direct_torch_ao(dense), lambda: quantize(dense, "int8_dynamic", "torch.ao"), n
            ),
            "quantize int8_weight vs torchao.quantize_": _overhead(
                lambda: _direct_torchao(dense), lambda: quantize(dense, "int8_weight", "torchao"), n
            ),
            "prune heads vs torch_pruning slicing": _overhead(
                lambda: _direct_heads(dense, heads.record["removed_kv_groups"]),
                lambda: prune(dense, PruneConfig("heads", 0.5)), n,
            ),
        }  # fmt: skip
        # the part of quantize(int8_dynamic) that is not quantize_dynamic: its one walk over the input (checks, bytes
        # before, biases) and its count of the int8 bytes after
        q8 = quantize(dense, "int8_dynamic", "torch.ao").model
        biases = _scan(dense).biases
        own = {
            "scan_input_s": _median_s(lambda: _scan(dense)),
            "count_int8_bytes_s": _median_s(lambda: _torch_ao_linear_bytes(q8, dense, biases)),
        }
        own["share_of_direct"] = (
            sum(own.values()) / ov["quantize int8_dynamic vs quantize_dynamic"]["time_a"]["median_s"]
        )
        ov["quantize int8_dynamic vs quantize_dynamic"]["own_work"] = own
        # the part of prune(heads) that the direct slicing does not do: the walk over its copy (Linear check, parameter
        # count, device) and the scoring of the key/value groups (which the direct call is handed)
        cfg: Any = dense.config  # a LlamaConfig
        own = {
            "scan_copy_s": _median_on_copies(_prune_scan, dense),
            "score_groups_s": _median_on_copies(
                lambda m: _drop_groups(list(m.model.layers), cfg.num_attention_heads, cfg.num_key_value_heads,
                                       cfg.hidden_size // cfg.num_attention_heads, 2, None), dense),
        }  # fmt: skip
        pair = ov["prune heads vs torch_pruning slicing"]
        own["gap_s"] = pair["time_b"]["median_s"] - pair["time_a"]["median_s"]
        own["share_of_direct"] = (own["scan_copy_s"] + own["score_groups_s"]) / pair["time_a"]["median_s"]
        pair["own_work"] = own
        gc.unfreeze()
    fv: dict[str, Any] | str = "not installed: FLOPs vs fvcore not measured"
    if importlib.util.find_spec("fvcore"):
        from downscaling.flops import fvcore_flops

        eager = copy.deepcopy(dense)
        eager.config._attn_implementation = "eager"
        fv = {
            "flopcounter_per_token": count_flops(dense, x) / x.numel(),
            "fvcore_sdpa_per_token": fvcore_flops(dense, x)["flops"] / x.numel(),
            "fvcore_eager_per_token": fvcore_flops(eager, x)["flops"] / x.numel(),
        }
        fv["ratio_eager"] = fv["fvcore_eager_per_token"] / fv["flopcounter_per_token"]
        fv["ratio_sdpa"] = fv["fvcore_sdpa_per_token"] / fv["flopcounter_per_token"]
    lines = [
        f"threads {a.threads}, batch {a.batch} x 64 tokens, repeats {a.repeats}, order shuffle, "
        f"load {load_start:.1f} -> {os.getloadavg()[0]:.1f}, "
        f"energy {'RAPL readable' if read_energy_counter() is not None else 'estimated (no counter readable)'}",
        f"{'model':30s} {'latency ms':>10s} {'tok/s':>9s} {'speedup':>8s} {'bytes':>10s} {'bytes ÷':>8s} "
        f"{'FLOPs/tok':>10s} {'J/tok est':>10s}",
    ]
    for k, r in rows.items():
        lines.append(
            f"{k:30s} {r['latency_ms']:10.2f} {r['tokens_per_s']:9.0f} {r['speedup']:8.2f} {r['weight_bytes']:10d} "
            f"{r['bytes_ratio']:8.2f} {r['flops_per_token']:10.0f} {r['joules_per_token_est']:10.2e}"
        )
    lines.append("wrapper overhead (median of the per-round ratios downscaling / direct [min, max]; aim <= 1.05):")
    for k, c in ov.items():
        lines.append(
            f"  {k:45s} {c['ratio']:6.3f} [{c['lo']:.3f}, {c['hi']:.3f}]  ({1e3 * c['time_a']['median_s']:.2f} ms "
            f"direct, {1e3 * c['time_b']['median_s']:.2f} ms ours, {len(c['ratio_rounds'])} rounds)"
        )
    own = ov["quantize int8_dynamic vs quantize_dynamic"]["own_work"]
    lines.append(
        f"  quantize int8_dynamic's own work: input walk {1e3 * own['scan_input_s']:.3f} ms + int8 byte count "
        f"{1e3 * own['count_int8_bytes_s']:.3f} ms = {100 * own['share_of_direct']:.1f} % of quantize_dynamic"
    )
    own = ov["prune heads vs torch_pruning slicing"]["own_work"]
    lines.append(
        f"  prune(heads)'s own work: walk over its copy {1e3 * own['scan_copy_s']:.3f} ms + scoring the kv groups "
        f"{1e3 * own['score_groups_s']:.3f} ms = {100 * own['share_of_direct']:.1f} % of the direct slicing "
        f"(median gap {1e3 * own['gap_s']:.3f} ms)"
    )
    if isinstance(fv, dict):
        lines.append(
            f"FLOPs/token of dense fp32: FlopCounterMode {fv['flopcounter_per_token']:.0f}, fvcore x 2 (eager "
            f"attention) {fv['fvcore_eager_per_token']:.0f} (ratio {fv['ratio_eager']:.4f}), fvcore x 2 (SDPA, "
            f"which fvcore skips) {fv['fvcore_sdpa_per_token']:.0f} (ratio {fv['ratio_sdpa']:.4f})"
        )
    else:
        lines.append(f"fvcore: {fv}")
    print("\n".join(lines))
    load = max(load_start, os.getloadavg()[0])
    results = {"settings": vars(a) | {"out": str(a.out), "load": load, "load_start": load_start}, "models": rows,
               "overhead": ov, "fvcore": fv}  # fmt: skip
    out = save_results(a.out, results, lines)
    write_performance(out.parent, out.name, performance_rows(results))


if __name__ == "__main__":
    import sys

    if "--summarize" in sys.argv:  # rebuild performance.json from the committed result
        import json

        committed = Path(__file__).parent / "results" / "bench_downscaling.json"
        write_performance(committed.parent, committed.name, performance_rows(json.loads(committed.read_text())))
    else:
        main()
