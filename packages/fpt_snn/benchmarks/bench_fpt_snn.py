"""fwd+bwd time and activation memory of one LIF layer: FPTLIFNode vs spikingjelly's LIFNode, interleaved.

    python packages/fpt_snn/benchmarks/bench_fpt_snn.py                  # the default grid, 1 thread
    python packages/fpt_snn/benchmarks/bench_fpt_snn.py --N 4096 --T 128 512 --paths auto dense chunked scan

Each case times ``FPTLIFNode(tau=2, decay_input=False, K=3)`` (soft sweeps, Heaviside output: the defaults) and
spikingjelly's ``LIFNode(tau=2, decay_input=False, v_reset=None, step_mode="m")`` (its CPU op, or its CUDA kernels
on a GPU), both as a user calls them: ``node(x).sum().backward()`` on a float32 ``[T, N]`` input that requires grad.
The pair is timed alternately by ``icml25_shared.bench.compare`` (median of ``--repeats`` after a warm-up, torch
threads pinned) and reported as the ratio of the two medians (FPT / spikingjelly; < 1: FPT faster), with the spread
of the per-round ratios (min and max over the rounds).

Activation memory is what autograd keeps between forward and backward: the bytes of the distinct storages packed
by ``torch.autograd.graph.saved_tensors_hooks`` during one forward (exact, deterministic; CPU RSS deltas are not).
On CUDA the peak allocator growth of one fwd+bwd (``icml25_shared.bench.peak_memory``) is reported too.

JSON goes to ``--out`` (default ``benchmarks/results/bench_fpt_snn.json`` next to this script) after every case,
with the load average before and after each case. At the end its rows are merged into
``benchmarks/results/performance.json`` (``icml25_shared.bench.write_performance``), from which the README's
performance table is generated; ``--performance-from FILE`` does only that, from a committed result, without timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fpt_snn import FPTLIFNode
from icml25_shared.bench import compare, peak_memory, write_performance
from icml25_shared.device import get_device, synchronize, torch_threads

GOALS = {
    "N=4096, T>=128": "ratio <= 1.0",
    "N=65536, T=128 (CPU)": "ratio <= 2.0",
    "activation memory": "FPT <= 2x spikingjelly",
    "GPU, T>=256": "FPT >= 3x faster than spikingjelly's torch backend (ratio <= 0.33)",
}


def saved_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``fn()`` runs its forward."""
    storages: dict[tuple[int, str], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        storages[(st.data_ptr(), str(t.device))] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(storages.values())


PEER = "spikingjelly LIFNode"
NOTES = [
    "`node(x).sum().backward()` on float32 [T, N], FPTLIFNode(tau=2, K=3) with its defaults vs spikingjelly's LIFNode "
    "(its fused CPU op), timed alternately (median of 5 rounds, spread: min-max of the per-round ratios, one torch "
    "thread). No time limit is given: on one CPU thread "
    "FPT has no parallelism to win back, and its K = 3 sweeps touch about 3x the numbers of spikingjelly's one pass."
]


def _goal(N: int, T: int) -> str | None:
    if N == 4096 and T >= 128:
        return GOALS["N=4096, T>=128"]
    if N == 65536 and T == 128:
        return GOALS["N=65536, T=128 (CPU)"]
    return None


def performance_rows(result: dict) -> list[dict]:
    """The rows of ``performance.json`` from one result of this script: the time ratio of every case and the
    activation-memory ratio at the longest T of each N."""
    rows = []
    where = "GPU" if "peak_bytes_fpt" in (result["rows"] or [{}])[0] else "CPU"
    for r in result["rows"]:
        rows.append(
            {
                "case": f"fwd+bwd, T={r['T']}, N={r['N']}, {where}, path {r['path']}",
                "peer": PEER,
                "metric": "time",
                "ratio": r["ratio_fpt_over_sj"],
                "lo": min(r["ratio_rounds"]) if r.get("ratio_rounds") else None,
                "hi": max(r["ratio_rounds"]) if r.get("ratio_rounds") else None,
                "goal": _goal(r["N"], r["T"]),
                "load": max(r["load_before"], r["load_after"]),
            }
        )
    for N in sorted({r["N"] for r in result["rows"]}):
        r = max((r for r in result["rows"] if r["N"] == N), key=lambda r: r["T"])
        rows.append(
            {
                "case": f"saved for backward, T={r['T']}, N={N}, path {r['path']}",
                "peer": PEER,
                "metric": "activation memory",
                "ratio": r["memory_ratio_fpt_over_sj"],
                "limit": 1.0 / (r["saved_bytes_sj"] / r["input_bytes"]),
                "goal": "ratio <= 2.0",
                "load": max(r["load_before"], r["load_after"]),
            }
        )
    return rows


def _cases(x: torch.Tensor, path: str) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    from spikingjelly.activation_based import functional, neuron

    lif = neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m").to(x.device)
    fpt = FPTLIFNode(tau=2.0, decay_input=False, K=3, path=path).to(x.device)

    def sj_forward() -> torch.Tensor:
        functional.reset_net(lif)
        return lif(x)

    return sj_forward, lambda: fpt(x)


def _fwd_bwd(forward: Callable[[], torch.Tensor], x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        forward().sum().backward()
        x.grad = None

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--T", type=int, nargs="+", default=[8, 128, 512, 2048])
    ap.add_argument("--paths", nargs="+", default=["auto"], choices=["auto", "dense", "chunked", "scan"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-elements", type=int, default=2**25, help="skip cases with T*N above this (CPU only)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_fpt_snn.json")
    ap.add_argument("--performance-from", type=Path, default=None, help="only write performance.json from FILE")
    args = ap.parse_args(argv)
    if args.performance_from is not None:
        result = json.loads(args.performance_from.read_text())
        path = write_performance(args.out.parent, args.performance_from.name, performance_rows(result), notes=NOTES)
        print(f"wrote {path}")
        return 0
    try:
        import spikingjelly  # noqa: F401
    except ImportError:
        print("spikingjelly is needed for the peer timings: pip install icml25-fpt-snn[spikingjelly]", file=sys.stderr)
        return 1
    dev = get_device(args.device)
    gpu = dev.type == "cuda"
    meta = {
        "device": torch.cuda.get_device_name(dev) if gpu else platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": args.threads,
        "torch": torch.__version__,
        "spikingjelly": __import__("importlib.metadata").metadata.version("spikingjelly"),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "repeats": args.repeats,
        "goals": GOALS,
    }
    rows: list[dict] = []
    with torch_threads(args.threads):
        for N in args.N:
            for T in args.T:
                elements = T * N
                if not gpu and elements > args.max_elements:
                    print(f"N={N} T={T}: skipped (T*N > --max-elements {args.max_elements})", flush=True)
                    continue
                g = torch.Generator().manual_seed(0)
                x = (torch.randn(T, N, generator=g) + 0.5).to(dev).requires_grad_(True)
                for path in args.paths:
                    sj_fwd, fpt_fwd = _cases(x, path)
                    load_before = os.getloadavg()[0]
                    cmp = compare(
                        _fwd_bwd(sj_fwd, x),
                        _fwd_bwd(fpt_fwd, x),
                        names=("spikingjelly_lif", f"fpt_{path}"),
                        warmup=1,
                        repeats=args.repeats,
                        device=dev if gpu else None,
                    )
                    row = {
                        "N": N,
                        "T": T,
                        "path": path,
                        "ratio_fpt_over_sj": cmp.ratio,
                        "ratio_rounds": [b / a for a, b in zip(cmp.a.times, cmp.b.times, strict=True)],
                        "sj_ms": 1e3 * cmp.a.median,
                        "fpt_ms": 1e3 * cmp.b.median,
                        "timings": cmp.to_dict(),
                        "saved_bytes_sj": saved_bytes(sj_fwd),
                        "saved_bytes_fpt": saved_bytes(fpt_fwd),
                        "input_bytes": x.numel() * x.element_size(),
                        "load_before": load_before,
                        "load_after": os.getloadavg()[0],
                    }
                    row["memory_ratio_fpt_over_sj"] = row["saved_bytes_fpt"] / max(1, row["saved_bytes_sj"])
                    if gpu:
                        row["peak_bytes_sj"] = peak_memory(_fwd_bwd(sj_fwd, x), device=dev)
                        row["peak_bytes_fpt"] = peak_memory(_fwd_bwd(fpt_fwd, x), device=dev)
                        synchronize(dev)
                    rows.append(row)
                    print(
                        f"N={N} T={T} path={path}: spikingjelly {row['sj_ms']:.1f} ms, FPT {row['fpt_ms']:.1f} ms, "
                        f"ratio {cmp.ratio:.2f}x; saved {row['saved_bytes_fpt'] / row['input_bytes']:.2f}x / "
                        f"{row['saved_bytes_sj'] / row['input_bytes']:.2f}x the input "
                        f"(load {load_before:.1f} -> {row['load_after']:.1f})",
                        flush=True,
                    )
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
                del x
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    if rows:
        print(
            f"wrote {write_performance(args.out.parent, args.out.name, performance_rows({'rows': rows}), notes=NOTES)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
