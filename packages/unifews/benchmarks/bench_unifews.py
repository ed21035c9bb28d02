"""Propagation speed of Unifews, as ratios, in one run (not run by pytest).

(a) forward+backward of ``UnifewsGCNConv`` (δw = 0) at edge sparsity η_a ∈ {0, 0.5, 0.8, 0.9} versus PyG ``GCNConv``
    and versus a full CSR SpMM with the same weights, on Cora LCC and a synthetic power-law graph;
(b) decoupled precompute: seconds per hop versus pushes executed.

η_a is hit by choosing the absolute threshold δa as the η_a-quantile of the first forward's message norms.
Usage: ``python benchmarks/bench_unifews.py [--small]`` (``--small``: 20 k nodes instead of 200 k).
"""

from __future__ import annotations

import argparse
import json

import torch
from unifews import UnifewsConfig, UnifewsGCNConv, diffusion_weights, message_scores, spmm
from unifews.data import load_planetoid_lcc, synthetic_powerlaw_graph
from unifews.prop import PropGraph, unifews_propagate

from icml25_shared.bench import compare, measure


def _bench_eta(name, x, ei_n, w, peer, eta, repeats) -> dict:
    with torch.no_grad():
        z = x @ peer.lin.weight.t()
        s = message_scores(ei_n, w, z)[ei_n[0] != ei_n[1]]
    delta = float(torch.quantile(s[: min(s.numel(), 1 << 24)], eta)) if eta > 0 else 0.0
    cfg = UnifewsConfig(delta_a=delta, delta_w=0.0, threshold="absolute")
    ours = UnifewsGCNConv(x.size(1), peer.out_channels, normalize=False, config=cfg)
    ours.lin.weight.data.copy_(peer.lin.weight.data)
    xr = x.clone().requires_grad_()

    def run_ours():
        ours(xr, ei_n, w).sum().backward()

    def run_peer():
        peer(xr, ei_n, w).sum().backward()

    def run_csr():
        spmm(ei_n, w, xr @ peer.lin.weight.t()).sum().backward()

    run_ours()
    eta_real = ours.sparsity()["edge"]
    c_peer = compare(run_ours, run_peer, names=("unifews", "GCNConv"), repeats=repeats)
    c_csr = compare(run_ours, run_csr, names=("unifews", "CSR SpMM"), repeats=repeats)
    keep = ours.edge_keep  # propagation alone: kept-edge SpMM vs full SpMM
    t_kept = measure(lambda: spmm(ei_n[:, keep], w[keep], z), repeats=repeats)
    t_full = measure(lambda: spmm(ei_n, w, z), repeats=repeats)
    return {
        "graph": name,
        "eta_a": round(eta_real, 3),
        "fwd+bwd unifews / GCNConv": round(1 / c_peer.ratio, 3),
        "fwd+bwd unifews / full CSR": round(1 / c_csr.ratio, 3),
        "propagation kept / full SpMM": round(t_kept.median / t_full.median, 3),
        "target <= (1 - eta) + 0.1": round(1 - eta_real + 0.1, 3),
    }


def conv_bench(name: str, x: torch.Tensor, ei: torch.Tensor, f_out: int, repeats: int) -> list[dict]:
    from torch_geometric.nn import GCNConv  # after unifews, which imports torch_geometric quietly

    ei_n, w = diffusion_weights(ei, x.size(0))
    torch.manual_seed(0)
    peer = GCNConv(x.size(1), f_out, normalize=False)
    rows = []
    for eta in (0.0, 0.5, 0.8, 0.9):
        rows.append(_bench_eta(name, x, ei_n, w, peer, eta, repeats))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def prop_bench(x: torch.Tensor, ei: torch.Tensor, hops: int) -> list[dict]:
    G = PropGraph(ei, x.size(0), 0.5, x.dtype)
    rows = []
    for delta in (0.0, 0.1, 0.25, 0.5, 1.0):
        t = measure(lambda d=delta: unifews_propagate(x, ei, hops, d, graph=G, generator=0), warmup=0, repeats=1)
        _, st = unifews_propagate(x, ei, hops, delta, graph=G, generator=0)
        rows.append(
            {
                "delta_a": delta,
                "s_per_hop": round(t.median / hops, 4),
                "Mpushes_per_hop": round(st.total_macs / hops / 1e6, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cora = load_planetoid_lcc("Cora")
    conv_bench("Cora LCC", cora.x, cora.edge_index, 64, args.repeats)
    n = 20_000 if args.small else 200_000
    ei = synthetic_powerlaw_graph(n, 20.0, seed=0)  # ≈ 4 M directed edges at n = 200 k
    x = torch.randn(n, 64)
    conv_bench(f"power-law n={n}, m={ei.size(1)}", x, ei, 64, args.repeats)
    prop_bench(cora.x, cora.edge_index, 5)


if __name__ == "__main__":
    main()
