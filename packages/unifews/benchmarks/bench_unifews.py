"""Propagation speed of Unifews, as ratios, in one run (not run by pytest).

(a) forward+backward of ``UnifewsGCNConv`` (δw = 0) at edge sparsity η_a ∈ {0, 0.5, 0.8, 0.9} versus PyG ``GCNConv``
    and versus a full CSR SpMM with the same weights, on Cora LCC and a synthetic power-law graph
    (≈ 200 k nodes, 4 M directed edges, 64 features); the propagation alone: kept-edge SpMM versus full SpMM;
(b) decoupled precompute: seconds per hop versus pushes executed (Cora, and the power-law graph).

η_a is hit by choosing the absolute threshold δa as the η_a-quantile of the first forward's message norms.
All callables of one η_a are timed interleaved, each round in a fresh random order, so machine drift hits them
alike; each ratio is the median over rounds of the per-round ratio (paired), next to the ratio of medians.
The load average is printed before and after: on a shared machine the ratios are only as good as the quiet.

Usage: ``python benchmarks/bench_unifews.py [--small] [--repeats 15] [--threads 1]``
(``--small``: 20 k nodes instead of 200 k). Every row is printed as it is measured, and the whole run is written to
``benchmarks/results/bench_unifews.json`` (``bench_unifews_small.json`` with ``--small``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from unifews import UnifewsConfig, UnifewsGCNConv, diffusion_weights, message_scores, spmm
from unifews.experiments import load_planetoid_lcc, synthetic_powerlaw_graph
from unifews.functional import _csr
from unifews.prop import PropGraph, unifews_propagate

RESULTS = Path(__file__).parent / "results"


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of each callable per round; each round runs them in a fresh random order (seeded), so that no
    callable always follows the same one (a fixed rotation let a millisecond SpMM inherit the cache state of the
    large call before it)."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    g = torch.Generator().manual_seed(0)
    for _ in range(repeats):
        for j in torch.randperm(len(names), generator=g).tolist():
            name = names[j]
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def paired(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of ``t_a / t_b``."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def _bench_eta(name, x, ei_n, w, peer, eta, repeats, warmup) -> dict:
    with torch.no_grad():
        z = x @ peer.lin.weight.t()
        s = message_scores(ei_n, w, z)[ei_n[0] != ei_n[1]]
    delta = float(torch.quantile(s[: min(s.numel(), 1 << 24)], eta)) if eta > 0 else 0.0
    cfg = UnifewsConfig(delta_a=delta, delta_w=0.0, threshold="absolute")
    ours = UnifewsGCNConv(x.size(1), peer.out_channels, normalize=False, config=cfg)
    ours.lin.weight.data.copy_(peer.lin.weight.data)
    xr = x.clone().requires_grad_()
    ours(xr, ei_n, w)
    eta_real = ours.sparsity()["edge"]
    keep = ours.edge_keep
    ei_k, w_k = ei_n[:, keep], w[keep]
    full_csr = _csr(ei_n[1], ei_n[0], w, x.size(0), x.size(0))  # built once: the strictest full-SpMM baseline

    fns = {
        "unifews": lambda: ours(xr, ei_n, w).sum().backward(),
        "gcnconv": lambda: peer(xr, ei_n, w).sum().backward(),
        "csr": lambda: spmm(ei_n, w, xr @ peer.lin.weight.t()).sum().backward(),
        "kept_spmm": lambda: spmm(ei_k, w_k, z),
        "full_spmm": lambda: spmm(ei_n, w, z),
        "full_prebuilt": lambda: full_csr @ z,
    }
    t = interleaved(fns, repeats, warmup)  # z carries no grad: the SpMM-only callables build no graph
    xr.grad = None
    med = {k: statistics.median(v) for k, v in t.items()}
    return {
        "graph": name,
        "eta_a": round(eta_real, 3),
        "fwd+bwd unifews / GCNConv": round(paired(t, "unifews", "gcnconv"), 3),
        "fwd+bwd unifews / full CSR": round(paired(t, "unifews", "csr"), 3),
        "prop kept / full SpMM": round(paired(t, "kept_spmm", "full_spmm"), 3),
        "prop kept / full prebuilt CSR": round(paired(t, "kept_spmm", "full_prebuilt"), 3),
        "target <= (1 - eta) + 0.1": round(1 - eta_real + 0.1, 3),
        "ratio of medians (unifews/GCNConv, unifews/CSR, kept/full)": [
            round(med["unifews"] / med["gcnconv"], 3),
            round(med["unifews"] / med["csr"], 3),
            round(med["kept_spmm"] / med["full_spmm"], 3),
        ],
        "median_ms": {k: round(1e3 * v, 3) for k, v in med.items()},
    }


def conv_bench(name: str, x: torch.Tensor, ei: torch.Tensor, f_out: int, repeats: int, warmup: int = 2) -> list[dict]:
    from torch_geometric.nn import GCNConv  # after unifews, which imports torch_geometric quietly

    ei_n, w = diffusion_weights(ei, x.size(0))
    torch.manual_seed(0)
    peer = GCNConv(x.size(1), f_out, normalize=False)
    rows = []
    for eta in (0.0, 0.5, 0.8, 0.9):
        rows.append(_bench_eta(name, x, ei_n, w, peer, eta, repeats, warmup))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def prop_bench(name: str, x: torch.Tensor, ei: torch.Tensor, hops: int, deltas, repeats: int) -> list[dict]:
    """Seconds per hop vs pushes executed; the δa values are timed interleaved (median over rounds)."""
    G = PropGraph(ei, x.size(0), 0.5, x.dtype)
    fns = {d: (lambda d=d: unifews_propagate(x, ei, hops, d, graph=G, generator=0)) for d in deltas}
    t = interleaved(fns, repeats, warmup=0)
    dense_s = statistics.median(t[deltas[0]])
    _, st0 = unifews_propagate(x, ei, hops, deltas[0], graph=G, generator=0)
    rows = []
    for d in deltas:
        _, st = unifews_propagate(x, ei, hops, d, graph=G, generator=0)
        s = statistics.median(t[d])
        rows.append(
            {
                "graph": name,
                "delta_a": d,
                "s_per_hop": round(s / hops, 4),
                "Mpushes_per_hop": round(st.total_macs / hops / 1e6, 3),
                "pushes / dense": round(st.total_macs / st0.total_macs, 3),
                "time / dense": round(s / dense_s, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    out: dict = {"loadavg_start": _load(), "threads": args.threads, "repeats": args.repeats, "small": args.small}
    print(json.dumps(out), flush=True)
    cora = load_planetoid_lcc("Cora")
    out["conv"] = conv_bench("Cora LCC", cora.x, cora.edge_index, 64, args.repeats)
    n = 20_000 if args.small else 200_000
    ei = synthetic_powerlaw_graph(n, 20.0, seed=0)  # ≈ 4 M directed edges at n = 200 k
    x = torch.randn(n, 64, generator=torch.Generator().manual_seed(0))
    # GCNConv materialises the m × 64 messages here (seconds per call): fewer rounds on the large graph
    out["conv"] += conv_bench(f"power-law n={n}, m={ei.size(1)}", x, ei, 64, max(3, args.repeats // 5), warmup=1)
    out["prop"] = prop_bench("Cora LCC", cora.x, cora.edge_index, 5, (0.0, 0.1, 0.25, 0.5, 1.0), 3)
    out["prop"] += prop_bench(f"power-law n={n}", x, ei, 2, (0.0, 0.25, 1.0), 1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    end = {"loadavg_end": _load(), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    print(json.dumps(end), flush=True)
    out.update(end)
    return out


if __name__ == "__main__":
    res = main()
    RESULTS.mkdir(exist_ok=True)
    name = "bench_unifews" + ("_small" if res["small"] else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {RESULTS / (name + '.json')}")
