"""Benchmark: EAGLES vs FedAvg on Cora-sized clients, one run, reported as ratios (interleaved timings).

1. factorised edge experts vs the concatenated MLP (forward + backward, the whole Cora graph);
2. one client's local round (5 steps, a Louvain client of Cora): FedAvg's dense GNN, EAGLES (a) with a 30% mask,
   EAGLES (b) complete: wall-clock and MACs (GNN, sparsifier) and payload bytes (up, down);
3. server aggregation for C ∈ {10, 50, 100} clients of random tensors of the quick model's size: EAGLES (consensus,
   distances, personalised mixing) vs Flower's ``FedAvg.aggregate_train``.

Writes benchmarks/results/bench_eagles.json and .log.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from eagles.client import forward_macs, initial_model, local_train, make_optimizer, prepare_client, state_of
from eagles.experiments import Setup, base_config, load_planetoid
from eagles.graph import EdgeExpert, MixtureGraphSparsifier
from eagles.metrics import payload_bytes
from eagles.partition import make_clients
from eagles.server import ClientReply, EaglesServer
from icml25_shared.bench import compare, round_robin, save_results
from icml25_shared.device import torch_threads

OUT = Path(__file__).parent / "results" / "bench_eagles.json"


def bench_experts(data, lines, res):
    torch.manual_seed(0)
    x, ei = data.x, data.edge_index
    f, h = x.size(1), 16
    e = EdgeExpert(f, h)

    def factorised():
        e.zero_grad()
        e(x, ei).sum().backward()

    def concatenated():
        e.zero_grad()
        inp = torch.cat([x[ei[0]], x[ei[1]], torch.ones(ei.size(1), 1)], 1)
        e.mlp(inp).sum().backward()

    c = compare(factorised, concatenated, names=("factorised", "concatenated"), warmup=1, repeats=5)
    sp = MixtureGraphSparsifier(f, base_config(Setup(), 0, keep_ratios=(0.95, 0.9, 0.85, 0.8)))
    xs = x.to_sparse().coalesce()
    c2 = compare(
        lambda: sp.expert_scores(xs, ei).sum().backward(),
        lambda: (
            torch.stack(
                [
                    ex.mlp(torch.cat([x[ei[0]], x[ei[1]], torch.ones(ei.size(1), 1)], 1)).squeeze(-1)
                    for ex in sp.experts
                ],
                1,
            )
            .sum()
            .backward()
        ),
        names=("K=4 stacked, sparse x", "K=4 concatenated"),
        warmup=1,
        repeats=5,
    )
    for cc in (c, c2):
        speed = cc.b.median / cc.a.median
        lines.append(
            f"experts ({cc.name_a} vs {cc.name_b}), Cora n={x.size(0)} m={ei.size(1)} h={h}: "
            f"{cc.a.median * 1e3:.1f} ms vs {cc.b.median * 1e3:.1f} ms, speed-up {speed:.1f}x (aim >= 3x)"
        )
        res.setdefault("experts", []).append(
            {"a": cc.name_a, "b": cc.name_b, "a_ms": cc.a.median * 1e3, "b_ms": cc.b.median * 1e3, "speedup": speed}
        )


def bench_round(data, lines, res):
    setup = Setup()
    clients = make_clients(data, 10, "louvain", 0)
    g = prepare_client(clients[0])
    cfgs = {
        "fedavg": base_config(setup, 0, weight_sparsifier=False, graph_sparsifier=False, aggregation="fedavg"),
        "a": base_config(setup, 0, graph_sparsifier=False),
        "b": base_config(setup, 0, keep_ratios=setup.keep_ratios_b),
    }
    # a 30%-density mask: the largest |W| of each masked layer (what the thresholds converge to)
    ref = initial_model(g.num_features, 7, cfgs["a"])
    mask = {}
    for k, w in ref.state_dict().items():
        if k.endswith(".weight") and k.replace(".weight", ".threshold") in ref.state_dict():
            thr = w.abs().flatten().kthvalue(int(0.7 * w.numel())).values
            mask[k] = w.abs() > thr
    models = {n: initial_model(g.num_features, 7, c, None if n == "fedavg" else mask) for n, c in cfgs.items()}
    opts = {n: make_optimizer(m, cfgs[n]) for n, m in models.items()}
    rnd = [0]

    def step(n):
        def fn():
            rnd[0] += 1
            local_train(models[n], opts[n], g, cfgs[n], 0, 2 + rnd[0])

        return fn

    t = round_robin({n: step(n) for n in cfgs}, repeats=5, warmup=1)
    base = t["fedavg"].median
    res["round"] = {}
    lines.append(f"local round (5 steps) of one Cora client (n={g.n}, m={g.edge_index.size(1)}), ratios vs FedAvg:")
    for n, m in models.items():
        macs = forward_macs(m, g, g.edge_index.size(1), training=True)
        fmacs = forward_macs(models["fedavg"], g, g.edge_index.size(1), training=True)["gnn"]
        pb = payload_bytes(state_of(m), None if n == "fedavg" else mask, mask_known=True)
        fb = payload_bytes(state_of(models["fedavg"]))["gnn"]
        row = {
            "wall_ms": t[n].median * 1e3,
            "wall_ratio": t[n].median / base,
            "macs_gnn_ratio": macs["gnn"] / fmacs,
            "macs_sparsifier_ratio": macs["sparsifier"] / fmacs,
            "macs_total_ratio": (macs["gnn"] + macs["sparsifier"]) / fmacs,
            "bytes_gnn_ratio": pb["gnn"] / fb,
            "bytes_total_ratio": (pb["gnn"] + pb["sparsifier"]) / fb,
        }
        res["round"][n] = row
        lines.append(
            f"  {n:7s} wall {row['wall_ms']:7.1f} ms ({row['wall_ratio']:.2f}x)  MACs gnn {row['macs_gnn_ratio']:.2f}x "
            f"sparsifier {row['macs_sparsifier_ratio']:.2f}x total {row['macs_total_ratio']:.2f}x  bytes up=down "
            f"gnn {row['bytes_gnn_ratio']:.2f}x total {row['bytes_total_ratio']:.2f}x"
        )
    res["round"]["note"] = "masks applied densely (W*M): the MACs are saved in the count, not in this wall-clock"
    return state_of(models["b"]), mask


def bench_server(state, mask, lines, res):
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)  # sets Flower's process task identity, which Message() needs outside a ServerApp
    cfg = base_config(Setup(), 0, keep_ratios=Setup().keep_ratios_b)
    res["server"] = {}
    for c in (10, 50, 100):
        g = torch.Generator().manual_seed(c)
        states = [{k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in state.items()} for _ in range(c)]
        masks = [{k: torch.rand(m.shape, generator=g) < 0.3 for k, m in mask.items()} for _ in range(c)]
        replies = [
            ClientReply(
                i,
                s,
                m,
                {
                    "val-acc": 0.5,
                    "test-acc": 0.5,
                    "kept-edges": 1.0,
                    "macs-gnn": 0.0,
                    "macs-sparsifier": 0.0,
                    "num-examples": 100,
                },
            )
            for i, (s, m) in enumerate(zip(states, masks, strict=True))
        ]
        msgs = [
            Message(
                RecordDict({"arrays": ArrayRecord(s), "metrics": MetricRecord({"num-examples": 100})}),
                dst_node_id=0,
                message_type="train",
            )
            for s in states
        ]
        fed = FedAvg(min_available_nodes=c)

        def eagles_agg(c=c, replies=replies):
            EaglesServer(cfg, state, c).aggregate_train(1, replies)

        def fedavg_agg(fed=fed, msgs=msgs):
            fed.aggregate_train(1, msgs)

        cc = compare(eagles_agg, fedavg_agg, names=("EAGLES", "Flower FedAvg"), warmup=0, repeats=2)
        cpu = []  # CPU seconds of this process: what the aggregation costs, whatever the machine's load
        for _ in range(2):
            t0 = time.process_time()
            eagles_agg()
            cpu.append(time.process_time() - t0)
        res["server"][c] = {
            "eagles_s": cc.a.median,
            "fedavg_s": cc.b.median,
            "ratio": cc.a.median / cc.b.median,
            "eagles_cpu_s": min(cpu),
        }
        lines.append(
            f"server aggregation C={c:3d}: EAGLES {cc.a.median:.3f} s ({min(cpu):.3f} CPU-s), Flower FedAvg "
            f"{cc.b.median:.3f} s ({cc.a.median / cc.b.median:.1f}x; aim C=100 < 1 s)"
        )


def main() -> None:
    import logging

    logging.getLogger("flwr").setLevel(logging.WARNING)
    load = os.getloadavg()[0]
    lines = [f"bench_eagles (torch {torch.__version__}, 1 thread, load {load:.1f} on {os.cpu_count()} cores)"]
    res: dict = {"load": load}
    with torch_threads(1):
        data = load_planetoid("Cora")
        bench_experts(data, lines, res)
        state, mask = bench_round(data, lines, res)
        bench_server(state, mask, lines, res)
    res["load_after"] = os.getloadavg()[0]
    for line in lines:
        print(line)
    save_results(OUT, res, lines)


if __name__ == "__main__":
    main()
