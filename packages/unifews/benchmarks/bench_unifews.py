"""Speed of Unifews against PyG's fastest full-graph GCN path and a dense propagation, as interleaved ratios, with a
breakdown of the part sparsification touches (not run by pytest).

(a) One GCN layer, forward + backward, on Cora LCC (1,433 → 64; ``x`` a leaf without gradient, as a first layer):
    ``UnifewsGCNConv(normalize=False, cached=True)`` (δw = 0, edge sparsity η_a ∈ {0, 0.5, 0.8}) against
    ``torch_geometric.nn.GCNConv(normalize=False)``, both fed the same prebuilt CSR ``adj_t`` (normalised weights,
    self-loops included): how PyG users run a static full graph. Breakdown in the same rounds: the dense transform
    ``X Wᵀ`` (untouched by edge pruning), the peer's propagation ``GCNConv.propagate(adj_t)`` and ours (edge scores,
    threshold, kept-CSR selection, SpMM; forward + backward), under ``scheme_a="prune_all"`` (the training forward:
    masks recomputed every step) and ``"keep"`` (masks reused: evaluation, inference, frozen masks). The same on a
    synthetic power-law graph (``--powerlaw-nodes``, 64 → 64), where propagation dominates.
(b) Decoupled SGC propagation on Cora (5 hops): Unifews at δa = 0.25 (the reproduction's value; its random push
    executes about half of the dense propagation's non-zero messages) against the dense propagation at its fastest,
    ``torch.sparse.mm`` of the normalised adjacency (self-loops included, CSR built once) hop by hop; also the
    package's own δa = 0 path and each execution of the pruned hop.

η_a is hit with an absolute threshold δa at the η_a-quantile of the message norms. All callables of one part run in
one :func:`icml25_shared.bench.round_robin`; a ratio is the median over rounds of the per-round ratio (paired), its
spread the 10th-90th percentiles of those. In (a) every timed call follows the layer's dense transform (untimed), as a
propagation follows it in a training step, and the order is reshuffled every round, so peer and ours start from the
same cache state (a fixed rotation would hand each callable its predecessor's caches every round).

Limits: the touched part of (a) cannot go below the rule's row norms ``‖Z[v]‖₂`` (one O(n·f) pass) plus the SpMMs over
exactly the kept edges with the kept CSRs given for free -- the ``"keep"`` scheme's propagation, measured in the same
rounds; the whole step cannot go below the transform plus the peer's propagation at that ratio, over the transform
plus the peer's propagation; (b) cannot go below executed pushes / the dense SpMM's multiply-adds (every push at the
cost of a dense multiply-add).

Allocator: on Linux the script re-runs itself with glibc's allocator set to keep freed memory
(:data:`STEADY_MALLOC`), so that every callable meets the steady state it would reach on its own. Without it, a
callable that follows one whose frees were handed back to the system pays fresh pages: the dense SpMM measured 10-14 K
page faults and twice its time after the fused propagation (23 → 43-48 ms), and a ratio that moved with the order.

Usage: ``python benchmarks/bench_unifews.py [--repeats 30] [--threads 1]``; writes
``benchmarks/results/bench_unifews.json`` and ``.log`` (:func:`icml25_shared.bench.save_results`) and the rows of
``benchmarks/results/performance.json`` (:func:`icml25_shared.bench.write_performance`); ``--summarize`` rebuilds
those rows from the committed JSON without timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from icml25_shared.bench import Timing, round_robin, save_results, write_performance
from icml25_shared.device import torch_threads
from unifews import UnifewsConfig, UnifewsGCNConv, _fused, diffusion_weights, message_scores
from unifews.experiments import load_planetoid_lcc, synthetic_powerlaw_graph
from unifews.nn import _scores
from unifews.prop import PropGraph, unifews_propagate

from torch_geometric.nn import GCNConv  # isort: skip  (after unifews, which imports torch_geometric quietly)

RESULTS = Path(__file__).parent / "results"
SOURCE = "bench_unifews.json"
ETAS = (0.0, 0.5, 0.8)
GOALS = {0.5: 0.65, 0.8: 0.35}
PROP_GOAL = 0.7
LINES: list[str] = []


def notes_of(result: dict[str, Any]) -> list[str]:
    """The table's note, its figures read from ``result`` (the decoupled breakdown's lanes and fired share)."""
    prop = result["prop"]
    lanes = prop.get("breakdown (fused)", {}).get("kernel push lanes / dense SpMM multiply-adds per hop", [])[1:]
    cover = f"{min(lanes):.2f}-{max(lanes):.2f}x" if lanes else "most of"
    return [
        "Layer rows: ours computes the row norms and selects the kept CSR (one compiled pass) every step; the peer's "
        "backward transposes the CSR adj_t on every call. Decoupled rows: the fused hop runs denser source rows as "
        f"masked whole-row vector passes; from the second hop on, on {prop['graph']}, they cover {cover} the dense "
        f"SpMM's multiply-adds in lanes ({prop['pushes / dense non-zero messages']:.2f} of the non-zero messages "
        "fire, so few rows ever leave the vector path), each lane with more loads than a multiply-add; the limit "
        "prices an executed push as one dense multiply-add.",
    ]


def _say(line: str) -> None:
    print(line, flush=True)
    LINES.append(line)


def _per_round(t: dict[str, Timing], a: str, b: str) -> list[float]:
    return [x / y for x, y in zip(t[a].times, t[b].times)]


def _spread(ratios: list[float]) -> dict[str, float]:
    """Median of the per-round ratios and their 10th / 90th percentiles."""
    dec = statistics.quantiles(ratios, n=10, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 9
    return {"ratio": round(statistics.median(ratios), 4), "lo": round(dec[0], 4), "hi": round(dec[-1], 4)}


def _csr(ei_n: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        return torch.sparse_coo_tensor(ei_n.flip(0), w, (n, n), check_invariants=False).coalesce().to_sparse_csr()


def conv_bench(name: str, x: torch.Tensor, ei: torch.Tensor, f_out: int, repeats: int, warmup: int) -> dict:
    """Part (a) on one graph: whole step and breakdown, every callable in one round robin."""
    n = x.size(0)
    ei_n, w = diffusion_weights(ei, n, dtype=x.dtype)
    adj_t = _csr(ei_n, w, n)  # built once, as a PyG user with a static graph does
    torch.manual_seed(0)
    peer = GCNConv(x.size(1), f_out, normalize=False)
    weight = peer.lin.weight
    with torch.no_grad():
        z0 = x @ weight.t()
        s = message_scores(ei_n, w, z0)[ei_n[0] != ei_n[1]]
    z = z0.clone().requires_grad_()  # the propagated matrix, as a leaf: the breakdown's propagation alone
    g_out = torch.ones(n, f_out)
    fns = {
        "GCNConv": lambda: peer(x, adj_t).backward(g_out),
        "transform": lambda: (x @ weight.t()).backward(g_out),
        "GCNConv propagation": lambda: peer.propagate(adj_t, x=z, edge_weight=None).backward(g_out),
        "row norms": lambda: torch.linalg.vector_norm(z.detach(), dim=1),  # the rule's one O(n f) pass
    }
    kept: dict[float, dict[str, float]] = {}
    for eta in ETAS:
        delta = float(torch.quantile(s[: 1 << 24], eta)) if eta > 0 else 0.0
        for scheme in ("prune_all", "keep"):
            ours = UnifewsGCNConv(x.size(1), f_out, normalize=False, cached=True,
                                  config=UnifewsConfig(delta_a=delta, delta_w=0.0, threshold="absolute"))  # fmt: skip
            ours.lin.weight.data.copy_(weight.data)
            ours(x, adj_t)
            ours.set_scheme(scheme, "keep")
            g = ours._cached_graph
            assert g is not None
            if scheme == "prune_all":
                st = ours.last_stats
                rho = st["edges_kept"] / st["edges_in"]
                kept[eta] = {"eta_a": round(ours.sparsity()["edge"], 4), "kept_fraction": rho}
                fns[f"unifews η={eta}"] = lambda ours=ours: ours(x, adj_t).backward(g_out)

            def prop(ours=ours, g=g) -> None:  # what forward does after the transform (nn.UnifewsGCNConv.forward)
                _, agg = ours._edge_step(g, lambda: _scores(g, z), None, None, None, z=z)
                ours._propagate(g, z, agg).backward(g_out)

            fns[f"unifews propagation η={eta} {scheme}"] = prop
    # every timed call follows the layer's dense transform (untimed), as a propagation does in a training step: all
    # start from the caches that leaves; the order is reshuffled every round (no fixed predecessor)
    t = round_robin(fns, repeats=repeats, warmup=warmup, order="shuffle", between=lambda: _transform(x, weight))
    z.grad = None
    ms = {k: round(1e3 * v.median, 4) for k, v in t.items()}
    t_tr, t_pr = t["transform"].median, t["GCNConv propagation"].median
    prop_share = t_pr / (t_tr + t_pr)  # of the step's two parts, measured apart in the same rounds
    rows = []
    for eta in ETAS:
        rho = kept[eta]["kept_fraction"]
        # the best a pruning forward can do: the rule's row norms plus the SpMMs over exactly the kept edges with the
        # kept CSRs given for free (the "keep" scheme's propagation), per round
        floor = [a + b for a, b in zip(t["row norms"].times, t[f"unifews propagation η={eta} keep"].times)]
        lim_prop = statistics.median([f / p for f, p in zip(floor, t["GCNConv propagation"].times)])
        lim_step = 1.0 - prop_share * (1.0 - lim_prop)  # the transform as it is, the propagation at its limit
        step = _spread(_per_round(t, f"unifews η={eta}", "GCNConv"))
        prop = _spread(_per_round(t, f"unifews propagation η={eta} prune_all", "GCNConv propagation"))
        keep = _spread(_per_round(t, f"unifews propagation η={eta} keep", "GCNConv propagation"))
        row = {
            "graph": name, "nodes": n, "edges": int(ei_n.size(1)), **kept[eta],
            "step": {**step, "limit": round(lim_step, 4)},
            "propagation prune_all": {**prop, "limit": round(lim_prop, 4), "goal": GOALS.get(eta)},
            "propagation keep": keep,
        }  # fmt: skip
        rows.append(row)
        _say(f"{name:18s} η_a={kept[eta]['eta_a']:.2f} kept {rho:.3f}: step {step['ratio']:.3f} "
             f"[{step['lo']:.3f}, {step['hi']:.3f}] (limit {lim_step:.3f}); propagation prune_all {prop['ratio']:.3f} "
             f"[{prop['lo']:.3f}, {prop['hi']:.3f}], keep {keep['ratio']:.3f}; limit {lim_prop:.3f} (row norms + "
             f"keep), goal {GOALS.get(eta, '-')}")  # fmt: skip
    _say(f"{name:18s} breakdown (median ms): GCNConv step {ms['GCNConv']}, transform {ms['transform']}, GCNConv "
         f"propagation {ms['GCNConv propagation']} ({100 * prop_share:.1f} % of transform + propagation)")  # fmt: skip
    return {"graph": name, "rows": rows, "median_ms": ms, "peer_propagation_share": round(prop_share, 4),
            "rounds": repeats}  # fmt: skip


def _transform(x: torch.Tensor, weight: torch.Tensor) -> None:
    with torch.no_grad():
        x @ weight.t()


def dense_sgc(a: torch.Tensor, x: torch.Tensor, hops: int) -> torch.Tensor:
    """The dense propagation at its fastest: ``T^L X`` as ``L`` CSR SpMMs (``torch.sparse.mm``)."""
    p = x
    for _ in range(hops):
        p = torch.sparse.mm(a, p)
    return p


def prop_breakdown(x: torch.Tensor, ei: torch.Tensor, G: PropGraph, hops: int, delta_a: float, repeats: int) -> dict:
    """Where a fused propagation's time goes (timed apart from the round robin): the numba kernel of each pruned
    hop (thresholds, uniforms, selection and scatter of the pushes, counts) against the torch work around it
    (self-loop term, uniform hashes, column chunks, concatenation); medians over ``repeats`` calls. Also the
    kernel's push work: pushes run entry by entry plus every lane of its masked row passes (a push or a
    ``0 · value``), against the dense SpMM's multiply-adds."""
    kernel = _fused._kernel
    per_hop: list[tuple[float, int]] = []

    def timed(*args):
        t0 = time.perf_counter()
        res = kernel(*args)
        per_hop.append((time.perf_counter() - t0, int(res[4])))
        return res

    totals, kernels, hop_rows, lanes = [], [], [], []
    _fused._kernel = timed
    try:
        for _ in range(repeats):
            per_hop.clear()
            t0 = time.perf_counter()
            unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0, impl="fused")
            totals.append(time.perf_counter() - t0)
            kernels.append(sum(dt for dt, _ in per_hop))
            chunks = len(per_hop) // hops  # the hops of one chunk follow each other
            hop_rows.append([sum(per_hop[c * hops + h][0] for c in range(chunks)) for h in range(hops)])
            lanes.append([sum(per_hop[c * hops + h][1] for c in range(chunks)) for h in range(hops)])
    finally:
        _fused._kernel = kernel
    total, kern = statistics.median(totals), statistics.median(kernels)
    full = (G.m + G.n) * x.size(1)  # one hop's dense multiply-adds
    return {
        "call ms": round(1e3 * total, 2), "kernel ms": round(1e3 * kern, 2),
        "around the kernel ms": round(1e3 * (total - kern), 2), "kernel share": round(kern / total, 3),
        "kernel ms per hop": [round(1e3 * statistics.median(r[h] for r in hop_rows), 2) for h in range(hops)],
        "kernel push lanes / dense SpMM multiply-adds per hop": [round(v / full, 3) for v in lanes[0]],
    }  # fmt: skip


def prop_bench(x: torch.Tensor, ei: torch.Tensor, hops: int, delta_a: float, repeats: int) -> dict:
    """Part (b): decoupled SGC on Cora."""
    n, f = x.shape
    G = PropGraph(ei, n, 0.5, x.dtype)
    ei_n, w = diffusion_weights(ei, n, dtype=x.dtype)
    a = _csr(ei_n, w, n)
    fns = {
        "dense torch.sparse.mm": lambda: dense_sgc(a, x, hops),
        "dense (unifews δa=0)": lambda: unifews_propagate(x, ei, hops, 0.0, graph=G),
        "unifews auto": lambda: unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0),
    }
    if _fused.AVAILABLE:
        fns["unifews fused"] = lambda: unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0, impl="fused")
    # the warm-up calibrates impl="auto" and compiles numba; a fresh order every round (no fixed predecessor)
    t = round_robin(fns, repeats=repeats, warmup=1, order="shuffle")
    p_ref = dense_sgc(a, x, hops)
    p0, st0 = unifews_propagate(x, ei, hops, 0.0, graph=G)
    _, st = unifews_propagate(x, ei, hops, delta_a, graph=G, generator=0)
    assert torch.allclose(p0, p_ref, atol=1e-5), "the two dense propagations disagree"
    limit = st.total_macs / st.full_macs
    peer = "dense torch.sparse.mm"
    res = {k: _spread(_per_round(t, k, peer)) for k in fns if k != peer}
    visits = n * f * hops  # (node, feature) entries a pruned hop looks at
    row = {
        "graph": "Cora LCC", "hops": hops, "delta_a": delta_a,
        "pushes / dense non-zero messages": round(st.total_macs / st0.total_macs, 4),
        "pushes / dense SpMM multiply-adds (limit)": round(limit, 4),
        "pushes per hop": st.macs, "dense non-zero messages per hop": st0.macs, "dense SpMM MACs": st.full_macs,
        "time / dense": res, "goal": PROP_GOAL,
        "ns per dense SpMM multiply-add": round(1e9 * t[peer].median / st.full_macs, 3),
        "ns per executed push (auto)": round(1e9 * t["unifews auto"].median / st.total_macs, 3),
        "ns per (node, feature) entry per hop (auto)": round(1e9 * t["unifews auto"].median / visits, 3),
        "median_ms": {k: round(1e3 * v.median, 2) for k, v in t.items()}, "rounds": repeats,
    }  # fmt: skip
    _say(f"decoupled SGC, Cora, {hops} hops, δa={delta_a}: {row['pushes / dense non-zero messages']:.2f}x the "
         f"non-zero messages, {limit:.3f}x the SpMM's multiply-adds (limit); time / dense SpMM "
         + ", ".join(f"{k} {v['ratio']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]" for k, v in res.items())
         + f" (goal <= {PROP_GOAL})")  # fmt: skip
    if _fused.AVAILABLE:
        bd = prop_breakdown(x, ei, G, hops, delta_a, repeats)
        bd["dense torch.sparse.mm ms per hop"] = round(1e3 * t[peer].median / hops, 2)
        row["breakdown (fused)"] = bd
        _say(
            f"decoupled SGC breakdown (fused, median ms): call {bd['call ms']}, numba kernel {bd['kernel ms']} "
            f"({100 * bd['kernel share']:.0f} %; per hop {bd['kernel ms per hop']}), torch around it "
            f"{bd['around the kernel ms']}; dense SpMM {bd['dense torch.sparse.mm ms per hop']} per hop; kernel push "
            f"lanes / SpMM multiply-adds per hop {bd['kernel push lanes / dense SpMM multiply-adds per hop']}"
        )
    return row


def performance_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``performance.json`` from one result of this script."""
    load = max(result["loadavg_start"][0], result["loadavg_end"][0])
    peer = "PyG GCNConv, cached CSR adj_t"
    out = []
    for part in result["conv"]:
        for r in part["rows"]:
            if r["eta_a"] < 0.25:
                continue
            cora = part["graph"].startswith("Cora")
            tag = f"{part['graph']}, GCN layer fwd+bwd, η_a = {r['eta_a']:.1f}"
            p = r["propagation prune_all"]
            if cora:  # on Cora the propagation is the part pruning touches; elsewhere it is most of the step
                out.append({"case": f"{tag}: propagation (scores, selection, SpMM)", "peer": peer, "metric": "time",
                            "ratio": p["ratio"], "lo": p["lo"], "hi": p["hi"], "limit": p["limit"],
                            "goal": f"≤ {p['goal']}", "load": load})  # fmt: skip
            s = r["step"]
            out.append({"case": f"{tag}: whole step", "peer": peer, "metric": "time", "ratio": s["ratio"],
                        "lo": s["lo"], "hi": s["hi"], "limit": s["limit"], "goal": None, "load": load})  # fmt: skip
    d = result["prop"]
    best = min(d["time / dense"].items(), key=lambda kv: kv[1]["ratio"] if kv[0].startswith("unifews") else 1e9)
    v = d["time / dense"]["unifews auto"]
    out.append({"case": f"decoupled SGC, Cora, {d['hops']} hops, δa = {d['delta_a']} "
                        f"({d['pushes / dense non-zero messages']:.2f}× pushes), impl auto", "peer":
                "dense propagation (torch.sparse.mm)", "metric": "time", "ratio": v["ratio"], "lo": v["lo"],
                "hi": v["hi"], "limit": d["pushes / dense SpMM multiply-adds (limit)"], "goal": f"≤ {d['goal']}",
                "load": load})  # fmt: skip
    if best[0] != "unifews auto":
        _say(f"(fastest pruned execution: {best[0]} {best[1]['ratio']:.2f})")
    return out


STEADY_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"
"""glibc tunables of the timed process: allocations up to 32 MiB from the heap, which is never trimmed."""


def _steady_allocator() -> None:
    """Re-run this script under :data:`STEADY_MALLOC` (Linux, once; ``GLIBC_TUNABLES`` already set: left alone)."""
    if sys.platform.startswith("linux") and "GLIBC_TUNABLES" not in os.environ:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "GLIBC_TUNABLES": STEADY_MALLOC})


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30, help="rounds of the Cora layer comparison")
    ap.add_argument("--prop-repeats", type=int, default=15, help="rounds of the decoupled comparison")
    ap.add_argument("--powerlaw-nodes", type=int, default=50_000, help="0 skips the power-law graph")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--summarize", action="store_true", help="only rebuild performance.json from the committed JSON")
    ap.add_argument("--prop-only", action="store_true", help="only part (b); prints, writes nothing")
    args = ap.parse_args()
    if args.summarize:
        result = json.loads((RESULTS / SOURCE).read_text())
        print("wrote", write_performance(RESULTS, SOURCE, performance_rows(result), notes=notes_of(result)))
        raise SystemExit(0)
    _steady_allocator()
    t0, c0 = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"loadavg_start": [round(v, 2) for v in os.getloadavg()], "threads": args.threads,
                           "repeats": args.repeats, "torch": torch.__version__,
                           "glibc_tunables": os.environ.get("GLIBC_TUNABLES")}  # fmt: skip
    _say(f"load average at start {out['loadavg_start']}, {args.threads} thread(s)")
    with torch_threads(args.threads):
        cora = load_planetoid_lcc("Cora")
        if args.prop_only:
            out["prop"] = prop_bench(cora.x, cora.edge_index, 5, 0.25, args.prop_repeats)
            print(f"load average at end {[round(v, 2) for v in os.getloadavg()]}")
            raise SystemExit(0)
        out["conv"] = [conv_bench("Cora LCC", cora.x, cora.edge_index, 64, args.repeats, warmup=3)]
        if args.powerlaw_nodes:
            n = args.powerlaw_nodes
            ei = synthetic_powerlaw_graph(n, 20.0, seed=0)
            x = torch.randn(n, 64, generator=torch.Generator().manual_seed(0))
            out["conv"].append(conv_bench(f"power-law n={n}", x, ei, 64, max(3, args.repeats // 6), warmup=1))
        out["prop"] = prop_bench(cora.x, cora.edge_index, 5, 0.25, args.prop_repeats)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    out.update(wall_s=round(wall, 1), cpu_s=round(cpu, 1))
    _say(f"load average at end {out['loadavg_end']}; {out['wall_s']} s wall, {out['cpu_s']} CPU-s")
    return out


if __name__ == "__main__":
    res = main()
    print("wrote", save_results(RESULTS / SOURCE, res, LINES))
    print("wrote", write_performance(RESULTS, SOURCE, performance_rows(res), notes=notes_of(res)))
