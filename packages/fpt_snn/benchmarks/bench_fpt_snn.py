"""fwd+bwd time and peak memory of one LIF layer: FPT (dense, chunked) vs spikingjelly LIFNode / PSN vs a naive loop.

    python packages/fpt_snn/benchmarks/bench_fpt_snn.py                       # the issue's grid (long on CPU)
    python packages/fpt_snn/benchmarks/bench_fpt_snn.py --T 8 32 128 512 --N 4096 --threads 1 2

Every case is timed interleaved with spikingjelly's multi-step ``LIFNode`` (its hand-written CPU op, or its CUDA
kernels on a GPU) by ``icml25_shared.bench.compare`` (median of ``--repeats`` fwd+bwd calls after a warm-up, torch
threads pinned) and reported as the ratio of the two medians. Cases
whose estimated cost is too large are skipped (``--max-seconds``) and printed as such. JSON goes to ``--out``
(default ``benchmarks/results/bench_fpt_snn.json`` next to this script, the file the README's table is copied from).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fpt_snn.functional import fpt_lif, lif_reference
from icml25_shared.bench import compare, measure, peak_memory
from icml25_shared.device import get_device, synchronize


def _cases(x: torch.Tensor, T: int) -> dict[str, Callable[[], None]]:
    from spikingjelly.activation_based import functional, neuron

    lif = neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m").to(x.device)
    psn = neuron.PSN(T).to(x.device)

    def sj() -> None:
        functional.reset_net(lif)
        lif(x).sum().backward()

    return {
        "spikingjelly_lif": sj,
        "spikingjelly_psn": lambda: psn(x).sum().backward(),
        "fpt_dense": lambda: fpt_lif(x, K=3, output="heaviside", path="dense").sum().backward(),
        "fpt_chunked": lambda: fpt_lif(x, K=3, output="heaviside", path="chunked").sum().backward(),
        "fpt_chunked_bernoulli": lambda: fpt_lif(x, K=3, output="bernoulli", path="chunked").sum().backward(),
        "naive_loop": lambda: lif_reference(x).sum().backward(),
    }


def _estimate(name: str, T: int, N: int, gpu: bool) -> float:
    """A rough cost in seconds on one CPU core (to skip hopeless cases); GPU cases are never skipped."""
    if gpu:
        return 0.0
    elems = T * N
    if name in ("fpt_dense", "spikingjelly_psn"):
        return 4 * 2 * T * elems / 5e9 + elems * 60 / 5e8
    if name == "naive_loop":
        return elems * 80 / 5e8 * (1 + N / 32768)
    return elems * 80 / 5e8


def _write(out: Path, dev: torch.device, rows: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(dev), "torch": torch.__version__, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, nargs="+", default=[8, 32, 128, 512, 2048])
    ap.add_argument("--N", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=5.0, help="skip a case whose estimated time exceeds this")
    ap.add_argument("--memory", action="store_true", help="also measure peak memory (one extra call per case)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_fpt_snn.json")
    args = ap.parse_args(argv)
    try:
        import spikingjelly  # noqa: F401
    except ImportError:
        print("spikingjelly is needed for the peer timings: pip install icml25-fpt-snn[spikingjelly]", file=sys.stderr)
        return 1
    dev = get_device(args.device)
    gpu = dev.type == "cuda"
    rows = []
    thread_list = args.threads if not gpu else [torch.get_num_threads()]
    for threads in thread_list:
        torch.set_num_threads(threads)
        for N in args.N:
            for T in args.T:
                x = (torch.randn(T, N, device=dev) + 0.5).requires_grad_(True)
                cases = _cases(x, T)
                res: dict[str, float | None] = {}
                mem: dict[str, int | None] = {}
                ratio: dict[str, float | None] = {"spikingjelly_lif": 1.0}
                sj = cases["spikingjelly_lif"]
                for name, fn in cases.items():
                    if _estimate(name, T, N, gpu) > args.max_seconds:
                        res[name] = None
                        continue
                    try:
                        kw = {"warmup": 1, "repeats": args.repeats, "device": dev if gpu else None}
                        if name == "spikingjelly_lif":
                            res[name] = measure(fn, **kw).median
                        else:  # interleaved with the peer, so that machine drift hits both alike
                            c = compare(sj, fn, names=("spikingjelly_lif", name), **kw)
                            res[name], ratio[name] = c.b.median, c.ratio
                        if args.memory:
                            mem[name] = peak_memory(fn, device=dev if gpu else None)
                    except RuntimeError as err:  # out of memory on a big case
                        res[name] = None
                        print(f"  {name} T={T} N={N}: {err.__class__.__name__}: {str(err)[:80]}", file=sys.stderr)
                    x.grad = None
                ref = res.get("spikingjelly_lif")
                row = {"threads": threads, "N": N, "T": T, "seconds": res, "peak_bytes": mem}
                row["ratio_to_spikingjelly"] = {k: ratio.get(k) if v else None for k, v in res.items()}
                naive, chunk = res.get("naive_loop"), res.get("fpt_chunked")
                row["chunked_speedup_over_naive"] = naive / chunk if naive and chunk else None
                rows.append(row)
                cells = "  ".join(
                    f"{k}={'skip' if v is None else f'{1e3 * v:.1f}ms'}"
                    + (f"({row['ratio_to_spikingjelly'][k]:.2f}x)" if v and ref else "")
                    for k, v in res.items()
                )
                print(f"threads={threads} N={N} T={T}: {cells}", flush=True)
                _write(args.out, dev, rows)  # after every row, so an interrupted run keeps what it measured
                del x
                if gpu:
                    synchronize(dev)
    _write(args.out, dev, rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
