"""Benchmark: EAGLES vs FedAvg on Cora-sized clients, one run, reported as ratios (interleaved timings).

1. factorised edge experts vs the concatenated MLP (forward + backward, the whole Cora graph);
2. one client's local round (5 steps, a Louvain client of Cora): FedAvg's dense GNN, EAGLES (a) with a 30% mask,
   EAGLES (b) complete: wall-clock and MACs (GNN, sparsifier) and payload bytes (up, down);
3. server aggregation for C ∈ {10, 50, 100} clients of the quick model's size (perturbed copies, random 30% masks):
   EAGLES' strategy ``aggregate_train`` (deserialise, meter, consensus, distances, personalised mixing) vs Flower's
   ``FedAvg.aggregate_train`` on the same replies, with each step's CPU time and the floors of a perfect
   implementation (reading the payload once, the mask and mixing products) that give the limit.

Writes benchmarks/results/bench_eagles.json and .log, and its rows of benchmarks/results/performance.json
(``--performance-from FILE`` rebuilds those rows from a committed result without timing).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from eagles.client import forward_macs, initial_model, local_train, make_optimizer, prepare_client, state_of
from eagles.experiments import Setup, base_config, load_planetoid
from eagles.graph import EdgeExpert, MixtureGraphSparsifier
from eagles.metrics import payload_bytes
from eagles.partition import make_clients
from eagles.server import GATE_KEY, ClientReply, EaglesServer
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

    t = round_robin({n: step(n) for n in cfgs}, repeats=5, warmup=1, order="shuffle")
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


def _replies(cfg, state, mask, c: int) -> dict:
    """C clients' train replies as Flower delivers them (one per node), built from perturbed copies of ``state``
    and random 30%-density masks: EAGLES' (parameters, bit-packed masks, metrics with ``partition-id``) and
    FedAvg's (the same parameters, ``num-examples``)."""
    from flwr.app import MessageType

    from eagles.flower import MASK_PREFIX, pack_mask

    g = torch.Generator().manual_seed(c)
    states = [{k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in state.items()} for _ in range(c)]
    masks = [{k: torch.rand(m.shape, generator=g) < 0.3 for k, m in mask.items()} for _ in range(c)]
    metrics = {"val-acc": 0.5, "test-acc": 0.5, "kept-edges": 1.0, "macs-gnn": 0.0, "macs-sparsifier": 0.0}
    sent = [Message(RecordDict(), dst_node_id=1000 + i, message_type=MessageType.TRAIN) for i in range(c)]
    eagles_msgs, fedavg_msgs = [], []
    for i, (s, m) in enumerate(zip(states, masks, strict=True)):
        arrays = ArrayRecord({**s, **{MASK_PREFIX + k: pack_mask(v) for k, v in m.items()}})
        met = MetricRecord({**metrics, "num-examples": 100, "partition-id": i})
        eagles_msgs.append(Message(RecordDict({"arrays": arrays, "metrics": met}), reply_to=sent[i]))
        fed = RecordDict({"arrays": ArrayRecord(s), "metrics": MetricRecord({"num-examples": 100})})
        fedavg_msgs.append(Message(fed, reply_to=sent[i]))
    return {"states": states, "masks": masks, "metrics": metrics, "eagles": eagles_msgs, "fedavg": fedavg_msgs}


def _steady_round(strategy, replies) -> None:
    """One ``aggregate_train`` of a later round: the states sent are the personalised ones of the round before
    (what ``configure_train`` records), so the downlink meter reads them as they are stored."""
    strategy._sent.update(strategy.server.personal)
    strategy.aggregate_train(2, replies)


def server_case(cfg, state, mask, c: int) -> dict:
    """Callables for one client count: Flower's ``FedAvg.aggregate_train`` and EAGLES' strategy
    ``aggregate_train`` on the same replies, the server alone from tensors, each step of EAGLES' aggregation, and
    the floors a perfect implementation pays (reading the payload once, the mixing products, the mask products)."""

    from eagles import fl
    from eagles.flower import EaglesStrategy, stack_replies
    from eagles.metrics import payload_bytes_rows

    rep = _replies(cfg, state, mask, c)
    fed = FedAvg(min_available_nodes=c)
    strategy = EaglesStrategy(cfg, state, c)
    strategy.node_to_pid.update({1000 + i: i for i in range(c)})  # as the partition-id queries would set it
    strategy._sent.update(dict.fromkeys(range(c), state))  # round 1: every client was sent the initial state
    strategy.aggregate_train(1, rep["eagles"])
    client_replies = [ClientReply(i, s, m, {**rep["metrics"], "num-examples": 100}) for i, (s, m) in
                      enumerate(zip(rep["states"], rep["masks"], strict=True))]  # fmt: skip
    st = stack_replies(rep["eagles"])
    grams = fl.mask_grams(st.masks)
    d_mask = fl.mask_distance_stacked(st.masks, grams)
    d_ctx = fl.context_distance_stacked(st.states[GATE_KEY])
    a = fl.personalized_weights(d_mask, d_ctx)
    read_pool, mix_pool = fl.BufferPool(keep=1), fl.BufferPool(keep=1, huge_pages=False)  # as the strategy's
    payload = torch.cat([v.reshape(c, -1).view(torch.uint8) for v in (*st.states.values(),)], 1)
    packed = {k: torch.stack([m.reshape(-1) for m in ms]) for k, ms in
              {k: [x[k] for x in rep["masks"]] for k in mask}.items()}  # fmt: skip
    payload_copy = torch.empty_like(payload)
    mixed = {k: torch.empty_like(v) for k, v in st.states.items() if v.is_floating_point()}
    af = a.to(torch.float32)
    gate = st.states[GATE_KEY].numpy()

    def meter():
        kept = {k: g.diagonal().round().to(torch.int64) for k, g in grams.items()}
        payload_bytes_rows(st.states, nnz=kept)
        strategy.server.count_down_many(2, dict(strategy.server.personal))

    return {
        "fns": {
            "Flower FedAvg": lambda: fed.aggregate_train(1, rep["fedavg"]),
            "EAGLES strategy": lambda: _steady_round(strategy, rep["eagles"]),
            "EAGLES server (tensors in)": lambda: EaglesServer(cfg, state, c).aggregate_train(1, client_replies),
        },
        "steps": {
            "deserialise (stack_replies)": lambda: stack_replies(rep["eagles"], pool=read_pool),
            "meter (up + down bytes)": meter,
            "mask products + consensus + distance": lambda: (
                fl.consensus_stacked(st.masks),
                fl.mask_distance_stacked(st.masks, fl.mask_grams(st.masks)),
            ),
            "context distance": lambda: fl.context_distance_stacked(st.states[GATE_KEY]),
            "personalised weights": lambda: fl.personalized_weights(d_mask, d_ctx),
            "personalised mixing": lambda: fl.personalized_mix(st.states, a, mix_pool),
        },
        "floors": {
            "read the payload once": lambda: payload_copy.copy_(payload),
            "mixing products (preallocated)": lambda: [torch.mm(af, st.states[k], out=o) for k, o in mixed.items()],
            "mask products": lambda: [fl._gram(m) for m in packed.values()],
            "sort the router weights": lambda: np.sort(gate, axis=1),
        },
        "payload_mb": payload.numel() / 1e6,
    }


def _cpu_ms(fn, repeats: int = 3) -> float:
    """Least CPU time of this process over ``repeats`` calls, in ms (what a step costs, whatever the load)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best * 1e3


def bench_server(state, mask, lines, res, counts=(10, 50, 100)):
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)  # sets Flower's process task identity, which Message() needs outside a ServerApp
    cfg = base_config(Setup(), 0, keep_ratios=Setup().keep_ratios_b)
    res["server"] = {}
    lines.append(
        "server aggregation, one round, C clients of the quick model (379,617 parameters, 184,320 masked weights at "
        "30% density): EAGLES' strategy aggregate_train vs Flower's FedAvg.aggregate_train on the same replies"
    )
    for c in counts:
        case = server_case(cfg, state, mask, c)
        floor_fns = list(case["floors"].values())
        fns = {**case["fns"], "floor": lambda floor_fns=floor_fns: [fn() for fn in floor_fns]}
        t = round_robin(fns, repeats=7, warmup=1, order="shuffle")  # four callables: no fixed predecessor
        fed, eag, core = (t[k] for k in ("Flower FedAvg", "EAGLES strategy", "EAGLES server (tensors in)"))
        ratios = [e / f for e, f in zip(eag.times, fed.times, strict=True)]
        steps = {k: _cpu_ms(fn) for k, fn in case["steps"].items()}
        floors = {k: _cpu_ms(fn) for k, fn in case["floors"].items()}
        limit = t["floor"].median / fed.median
        row = {
            "fedavg_s": fed.median,
            "eagles_s": eag.median,
            "eagles_server_tensors_s": core.median,
            "ratio": eag.median / fed.median,
            "ratio_lo": min(ratios),
            "ratio_hi": max(ratios),
            "steps_cpu_ms": steps,
            "floors_cpu_ms": floors,
            "limit": limit,
            "payload_mb": case["payload_mb"],
        }
        res["server"][c] = row
        lines.append(
            f"  C={c:3d}: EAGLES {eag.median * 1e3:7.1f} ms, Flower FedAvg {fed.median * 1e3:7.1f} ms: "
            f"{row['ratio']:.2f}x [{row['ratio_lo']:.2f}, {row['ratio_hi']:.2f}] (limit {limit:.2f}x); "
            f"EAGLES server from tensors {core.median * 1e3:.1f} ms"
        )
        lines.append("         steps (CPU ms): " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()))
        lines.append("         floors (CPU ms): " + ", ".join(f"{k} {v:.1f}" for k, v in floors.items()))


NOTES = [
    "Server aggregation: one round of EAGLES' strategy aggregate_train (read the replies, meter up- and downlink "
    "bytes, consensus mask, mask and router distances, weights, C personalised models) against Flower's own "
    "FedAvg.aggregate_train on the same parameters, timed alternately (median of 7 rounds, one torch thread).",
    "Limit: what any implementation of the method pays, over Flower's FedAvg: reading the payload once, the mask "
    "products, sorting every client's router weights (the closed form of D_ctx) and the mixing products A·Θ "
    "(preallocated); personalised mixing is C times FedAvg's arithmetic (C × C × P multiply-adds against C × P). "
    "Left above it: unpacking the masks, the |W| > t counts of the downlink meter, the router Gram matrix, the "
    "consensus and Flower's own reply checks (each step's CPU ms is in the log).",
]


def performance_rows(result: dict) -> list[dict]:
    """The rows of ``performance.json`` from one result of this script: the aggregation time ratio per C."""
    rows = []
    for c, r in sorted(result["server"].items(), key=lambda kv: int(kv[0])):
        rows.append(
            {
                "case": f"server aggregation, C = {c} clients, 380k parameters",
                "peer": "Flower FedAvg.aggregate_train",
                "metric": "time",
                "ratio": r["ratio"],
                "lo": r["ratio_lo"],
                "hi": r["ratio_hi"],
                "limit": r["limit"],
                "goal": "< 1 s and <= 1.0x (<= 1.3x the limit)" if int(c) == 100 else None,
                "load": result["load"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json
    import logging

    from icml25_shared.bench import write_performance

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT, help="result JSON (its .log and performance.json beside it)")
    ap.add_argument("--performance-from", type=Path, default=None, help="only write performance.json from FILE")
    args = ap.parse_args(argv)
    if args.performance_from is not None:
        result = json.loads(args.performance_from.read_text())
        path = write_performance(args.out.parent, args.performance_from.name, performance_rows(result), notes=NOTES)
        print(f"wrote {path}")
        return
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
    lines.append(f"load at the end {res['load_after']:.1f}")
    for line in lines:
        print(line)
    save_results(args.out, res, lines)
    print(f"wrote {write_performance(args.out.parent, args.out.name, performance_rows(res), notes=NOTES)}")


if __name__ == "__main__":
    main()
