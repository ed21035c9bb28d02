"""Speed of Unifews against PyG's fastest full-graph GCN path, as interleaved ratios (not run by pytest).

(a) forward+backward of ``UnifewsGCNConv(normalize=False, cached=True)`` (δw = 0, edge sparsity η_a ∈ {0, 0.5, 0.8})
    against ``torch_geometric.nn.GCNConv(normalize=False)``, both fed the same prebuilt CSR ``adj_t`` (normalised
    weights, self-loops included): how PyG users run full-graph GCNs. Cora LCC (1,433 → 64) and a synthetic
    power-law graph (200 k nodes, ≈ 4 M directed edges, 64 → 64; ``--small``: 20 k nodes).
(b) decoupled SGC propagation on Cora (5 hops): Unifews at the δa whose random push executes about half of the dense
    pushes (δa = 0.25, the reproduction's value) against the dense CSR SpMM propagation (δa = 0); ``impl="auto"``
    (calibrated in the warm-up) and each execution of the pruned hop (fused one-pass numba hop, masked) timed in
    the same rounds.

η_a is hit with an absolute threshold δa at the η_a-quantile of the message norms. All callables of one graph run in
one :func:`icml25_shared.bench.round_robin` (rotating order); a ratio is the median over rounds of the per-round
ratio (paired), next to the ratio of medians. The load average is recorded at the start and the end.

Goals (issue 20): fwd+bwd ≤ 1.1× / 0.65× / 0.35× at η_a = 0 / 0.5 / 0.8 on both graphs; decoupled ≤ 0.7× the dense
time at ≈ 0.5× pushes.

Usage: ``python benchmarks/bench_unifews.py [--small] [--repeats 10] [--threads 1]``; writes
``benchmarks/results/bench_unifews[_small].json`` and ``.log`` (:func:`icml25_shared.bench.save_results`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from pathlib import Path

import torch

from icml25_shared.bench import Timing, round_robin, save_results
from icml25_shared.device import torch_threads
from unifews import UnifewsConfig, UnifewsGCNConv, _fused, diffusion_weights, message_scores
from unifews.experiments import load_planetoid_lcc, synthetic_powerlaw_graph
from unifews.prop import HOP_COSTS, PropGraph, choose_impl, unifews_propagate

from torch_geometric.nn import GCNConv  # isort: skip  (after unifews, which imports torch_geometric quietly)

RESULTS = Path(__file__).parent / "results"
ETAS = (0.0, 0.5, 0.8)
GOALS = {0.0: 1.1, 0.5: 0.65, 0.8: 0.35}
LINES: list[str] = []


def _say(line: str) -> None:
    print(line, flush=True)
    LINES.append(line)


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def paired(t: dict[str, Timing], a: str, b: str) -> float:
    """Median over rounds of ``t_a / t_b``."""
    return statistics.median(x / y for x, y in zip(t[a].times, t[b].times))


def _csr_adj_t(ei_n: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        return torch.sparse_coo_tensor(ei_n.flip(0), w, (n, n), check_invariants=False).coalesce().to_sparse_csr()


def conv_bench(name: str, x: torch.Tensor, ei: torch.Tensor, f_out: int, repeats: int, warmup: int) -> list[dict]:
    n = x.size(0)
    ei_n, w = diffusion_weights(ei, n, dtype=x.dtype)
    adj_t = _csr_adj_t(ei_n, w, n)  # built once, as a PyG user with a static graph does
    torch.manual_seed(0)
    peer = GCNConv(x.size(1), f_out, normalize=False)
    xr = x.clone().requires_grad_()
    with torch.no_grad():
        z = x @ peer.lin.weight.t()
        s = message_scores(ei_n, w, z)[ei_n[0] != ei_n[1]]
    fns = {"GCNConv": lambda: peer(xr, adj_t).sum().backward()}
    etas = {}
    for eta in ETAS:
        delta = float(torch.quantile(s[: 1 << 24], eta)) if eta > 0 else 0.0
        ours = UnifewsGCNConv(x.size(1), f_out, normalize=False, cached=True,
                              config=UnifewsConfig(delta_a=delta, delta_w=0.0, threshold="absolute"))  # fmt: skip
        ours.lin.weight.data.copy_(peer.lin.weight.data)
        ours(xr, adj_t)
        etas[eta] = round(ours.sparsity()["edge"], 3)
        fns[f"unifews η={eta}"] = lambda ours=ours: ours(xr, adj_t).sum().backward()
    t = round_robin(fns, repeats=repeats, warmup=warmup)
    xr.grad = None
    rows = []
    for eta in ETAS:
        key = f"unifews η={eta}"
        ratio = paired(t, key, "GCNConv")
        row = {
            "graph": name, "nodes": n, "edges": int(ei_n.size(1)), "eta_a": etas[eta],
            "fwd+bwd unifews / GCNConv(adj_t)": round(ratio, 3),
            "ratio of medians": round(t[key].median / t["GCNConv"].median, 3),
            "goal": GOALS[eta], "met": ratio <= GOALS[eta],
            "median_ms": {"unifews": round(1e3 * t[key].median, 2), "GCNConv": round(1e3 * t["GCNConv"].median, 2)},
            "rounds": repeats,
        }  # fmt: skip
        rows.append(row)
        _say(f"{name:32s} η_a={etas[eta]:.2f}  fwd+bwd {row['median_ms']['unifews']:9.1f} ms vs GCNConv "
             f"{row['median_ms']['GCNConv']:9.1f} ms  paired ratio {ratio:.3f}  goal <= {GOALS[eta]}  "
             f"{'met' if row['met'] else 'NOT met'}")  # fmt: skip
    return rows


def prop_bench(name: str, x: torch.Tensor, ei: torch.Tensor, hops: int, delta_a: float, repeats: int) -> dict:
    G = PropGraph(ei, x.size(0), 0.5, x.dtype)
    fns = {
        "dense": lambda: unifews_propagate(x, ei, hops, 0.0, graph=G),
        "unifews": lambda: unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0),  # impl="auto"
    }
    for impl in ("fused", "masked") if _fused.AVAILABLE else ("masked",):
        fns[impl] = lambda impl=impl: unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0, impl=impl)
    t = round_robin(fns, repeats=repeats, warmup=1)  # the warm-up calls calibrate impl="auto" and compile numba
    _, st0 = fns["dense"]()
    _, st = fns["unifews"]()
    key = (G.n, G.m, x.dtype, x.device.type)
    costs = HOP_COSTS.get(key, {})
    chosen = choose_impl(costs, G.n, G.m, min(x.size(1), (1 << 22) // G.m), st.macs[-1]) if costs else "?"
    ratio = paired(t, "unifews", "dense")
    row = {
        "graph": name, "hops": hops, "delta_a": delta_a,
        "pushes / dense": round(st.total_macs / st0.total_macs, 3),
        "time / dense": round(ratio, 3), "goal": 0.7, "met": ratio <= 0.7,
        "auto chose (last hop)": chosen,
        "auto cost model (s per unit of work)": {k: float(f"{v:.3g}") for k, v in costs.items()},
        "time / dense by execution": {k: round(paired(t, k, "dense"), 3) for k in fns if k not in ("dense",)},
        "median_s_per_hop": {k: round(t[k].median / hops, 4) for k in fns},
        "rounds": repeats,
    }  # fmt: skip
    _say(f"{name:32s} decoupled SGC δa={delta_a}: {row['pushes / dense']:.2f}x pushes, paired time ratio "
         f"{ratio:.2f} (goal <= 0.7)  {'met' if row['met'] else 'NOT met'}; auto chose {chosen}; by execution "
         f"{row['time / dense by execution']}")  # fmt: skip
    return row


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    t0, c0 = time.perf_counter(), time.process_time()
    out: dict = {"loadavg_start": _load(), "threads": args.threads, "repeats": args.repeats, "small": args.small,
                 "torch": torch.__version__}  # fmt: skip
    _say(f"load average at start {out['loadavg_start']}, {args.threads} thread(s)")
    with torch_threads(args.threads):
        cora = load_planetoid_lcc("Cora")
        out["conv"] = conv_bench("Cora LCC", cora.x, cora.edge_index, 64, args.repeats, warmup=2)
        n = 20_000 if args.small else 200_000
        ei = synthetic_powerlaw_graph(n, 20.0, seed=0)  # ≈ 4 M directed edges at n = 200 k
        x = torch.randn(n, 64, generator=torch.Generator().manual_seed(0))
        out["conv"] += conv_bench(f"power-law n={n}", x, ei, 64, max(3, args.repeats // 2), warmup=1)
        out["prop"] = [prop_bench("Cora LCC", cora.x, cora.edge_index, 5, 0.25, 5)]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out.update({"loadavg_end": _load(), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)})
    _say(f"load average at end {out['loadavg_end']}; {out['wall_s']} s wall, {out['cpu_s']} CPU-s")
    return out


if __name__ == "__main__":
    res = main()
    name = "bench_unifews" + ("_small" if res["small"] else "")
    print("wrote", save_results(RESULTS / f"{name}.json", res, LINES))
