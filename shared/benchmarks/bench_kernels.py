"""icml25_shared.kernels on CUDA: each Triton kernel vs its torch reference and the best library op, as ratios.

    python shared/benchmarks/bench_kernels.py [--repeats 20] [--cases segmm,spmm,scan] [--out PATH]
    TRITON_INTERPRET=1 python shared/benchmarks/bench_kernels.py --smoke   # tiny shapes, any device: checks the script

Cases (the sizes of issue 25's goals):

- ``segmm``: LoRA, 64 adapters of rank 16 over 4,096 tokens (64 requests x 64 tokens, one adapter each), hidden
  4,096, bf16. ``grouped_lora`` (Triton) vs the looped reference (``impl="torch"``: one matmul pair per adapter), vs
  bslora's gathered bmm (each request's stacked factors gathered, two ``bmm``), vs padded bmm (tokens sorted into
  ``[G, longest group, K]``, two ``bmm``, scattered back) and vs ``torch._grouped_mm`` (sorted tokens and offsets)
  where it is present and runs.
- ``spmm``: a random graph with 131,072 nodes and 1M edges, 64 float32 features, 50 % of the edges kept:
  ``masked_spmm(keep=...)`` (Triton) vs ``torch.sparse.mm`` of the CSR with the mask folded into its values (the
  "dense-mask" product), vs ``torch.sparse.mm`` of a CSR rebuilt from the kept edges, and vs the torch path.
- ``scan``: T = 1,024 steps over N = 65,536 float32 columns: ``linear_scan`` with a scalar leak (the LIF membrane
  between resets) and with a per-step-and-element decay (Triton) vs the sequential torch loop; spikingjelly's cupy
  ``LIFNode`` (a LIF layer with resets, a reference point, not the same operation) when cupy is installed.

Every pair is timed interleaved by ``icml25_shared.bench.compare`` (median of ``--repeats`` calls after a warm-up,
the device synchronised around each) for the forward and for forward + backward; a ratio is ``other / triton``
(> 1: the kernel is faster). Writes ``results/bench_kernels.json`` and the printed lines to ``.log`` beside it;
the goals of issue 25 are evaluated at the end. CUDA only: without a CUDA device (and triton) it exits with a
message and runs nothing, except ``--smoke``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from icml25_shared.bench import compare
from icml25_shared.kernels import CSR, grouped_lora, linear_scan, linear_scan_reference, masked_spmm, triton_available

RESULTS = Path(__file__).parent / "results" / "bench_kernels.json"
LOG: list[str] = []


def say(line: str) -> None:
    print(line, flush=True)
    LOG.append(line)


def timed_pair(name: str, triton_fn: Callable[[], object], other: Callable[[], object], other_name: str,
               repeats: int, device: torch.device) -> dict:  # fmt: skip
    """``compare(triton, other)``; an ``other`` that raises is reported as unavailable with its error."""
    try:
        other()
    except Exception as err:  # a library op that does not run here is a result, not a failure
        say(f"  {name:34s} {other_name}: unavailable ({type(err).__name__}: {str(err).splitlines()[0][:100]})")
        return {"other": other_name, "unavailable": f"{type(err).__name__}: {err}"[:300]}
    c = compare(triton_fn, other, names=("triton", other_name), warmup=3, repeats=repeats, device=device)
    ta, tb = c.a.median * 1e3, c.b.median * 1e3
    say(f"  {name:34s} triton {ta:9.3f} ms  {other_name} {tb:9.3f} ms  ratio {c.ratio:6.2f}x")
    return c.to_dict()


def backward_of(fn: Callable[[], torch.Tensor], grad: torch.Tensor | None = None) -> Callable[[], None]:
    def run() -> None:
        out = fn()
        out.backward(grad if grad is not None else torch.ones_like(out))

    return run


def zero_grads(*ts: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        for t in ts:
            t.grad = None

    return run


# ----------------------------------------------------------------------------------------------------------------
# segmented matmul (LoRA over mixed-adapter batches)
# ----------------------------------------------------------------------------------------------------------------
def bench_segmm(repeats: int, device: torch.device, smoke: bool) -> dict:
    G, R, hidden, requests, per_request = (64, 16, 4096, 64, 64) if not smoke else (4, 16, 64, 4, 8)
    dtype = torch.bfloat16 if not smoke else torch.float32
    N = requests * per_request
    torch.manual_seed(0)
    x = torch.randn(N, hidden, device=device, dtype=dtype)
    A_rk = torch.randn(G, R, hidden, device=device, dtype=dtype) / math.sqrt(hidden)  # peft layout, stacked
    B_mr = torch.randn(G, hidden, R, device=device, dtype=dtype) / math.sqrt(R)
    A, B = A_rk.transpose(1, 2), B_mr.transpose(1, 2)  # (G, K, R), (G, R, M) views
    req_adapter = torch.randint(0, G, (requests,), device=device)
    group = req_adapter.repeat_interleave(per_request)
    say(f"segmm: LoRA, {G} adapters rank {R}, {N} tokens ({requests} x {per_request}), hidden {hidden}, {dtype}")

    def triton() -> torch.Tensor:
        return grouped_lora(x, A, B, group, scale=2.0, check_ids=False, impl="triton")

    def looped() -> torch.Tensor:
        return grouped_lora(x, A, B, group, scale=2.0, check_ids=False, impl="torch")

    def gathered_bmm() -> torch.Tensor:  # bslora's mixed batch today: each request's factors gathered
        x3 = x.view(requests, per_request, hidden)
        z = torch.bmm(x3, A_rk[req_adapter].transpose(1, 2))
        return (2.0 * torch.bmm(z, B_mr[req_adapter].transpose(1, 2))).view(N, hidden)

    def padded_bmm() -> torch.Tensor:  # the general form: tokens sorted by adapter into [G, longest, K]
        gs, perm = torch.sort(group, stable=True)
        counts = torch.bincount(gs, minlength=G)
        longest = int(counts.max())
        starts = counts.cumsum(0) - counts
        slot = torch.arange(N, device=device) - starts[gs]
        xp = x.new_zeros(G, longest, hidden)
        xp[gs, slot] = x[perm]
        yp = 2.0 * torch.bmm(torch.bmm(xp, A), B)
        y = torch.empty_like(x)
        y[perm] = yp[gs, slot]
        return y

    def grouped_mm() -> torch.Tensor:  # torch's grouped GEMM over sorted tokens (bf16, sm90+)
        gs, perm = torch.sort(group, stable=True)
        offs = torch.bincount(gs, minlength=G).cumsum(0).to(torch.int32)
        xs = x[perm]
        z = torch._grouped_mm(xs, A, offs=offs)
        ys = torch._grouped_mm(z, B, offs=offs)
        y = torch.empty_like(x)
        y[perm] = 2.0 * ys
        return y

    others = {"looped_reference": looped, "gathered_bmm": gathered_bmm, "padded_bmm": padded_bmm}
    if hasattr(torch, "_grouped_mm"):
        others["torch_grouped_mm"] = grouped_mm
    ref = looped().float()
    for name, fn in others.items():
        try:
            err = (fn().float() - ref).abs().max().item() / ref.abs().max().item()
            say(f"  check {name}: max relative difference to the reference {err:.2e}")
        except Exception:  # reported by timed_pair
            pass
    out: dict = {"shape": {"adapters": G, "rank": R, "tokens": N, "hidden": hidden, "dtype": str(dtype)}}
    out["forward"] = {n: timed_pair(f"forward vs {n}", triton, f, n, repeats, device) for n, f in others.items()}
    # forward + backward: gradients for x and both factor stacks
    x.requires_grad_()
    A_rk.requires_grad_()
    B_mr.requires_grad_()
    A, B = A_rk.transpose(1, 2), B_mr.transpose(1, 2)
    clear = zero_grads(x, A_rk, B_mr)

    def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        run = backward_of(fn)
        return lambda: (clear(), run())

    out["forward_backward"] = {
        n: timed_pair(f"fwd+bwd vs {n}", step(triton), step(f), n, repeats, device) for n, f in others.items()
    }
    return out


# ----------------------------------------------------------------------------------------------------------------
# masked CSR SpMM
# ----------------------------------------------------------------------------------------------------------------
def bench_spmm(repeats: int, device: torch.device, smoke: bool) -> dict:
    n, E, F = (131072, 1_000_000, 64) if not smoke else (64, 500, 16)
    torch.manual_seed(0)
    row, col = torch.randint(0, n, (E,), device=device), torch.randint(0, n, (E,), device=device)
    csr = CSR.from_coo(row, col, (n, n))
    values = torch.rand(E, device=device)
    x = torch.randn(n, F, device=device)
    keep = torch.rand(E, device=device) < 0.5
    say(f"spmm: {n} nodes, {E} edges, {F} float32 features, {float(keep.float().mean()):.0%} kept")

    def triton() -> torch.Tensor:
        return masked_spmm(csr, values, x, keep=keep, impl="triton")

    def torch_path() -> torch.Tensor:
        return masked_spmm(csr, values, x, keep=keep, impl="torch")

    def sparse_dense_mask() -> torch.Tensor:  # the mask folded into the values of the full CSR
        a = torch.sparse_csr_tensor(csr.crow, csr.col, values * keep, (n, n), check_invariants=False)
        return torch.sparse.mm(a, x)

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)

    def sparse_rebuilt() -> torch.Tensor:  # a CSR of the kept edges, rebuilt per call
        idx = keep.nonzero().squeeze(1)
        crow = torch.searchsorted(csr.row[idx], torch.arange(n + 1, device=device))
        a = torch.sparse_csr_tensor(crow, csr.col[idx], values[idx], (n, n), check_invariants=False)
        return torch.sparse.mm(a, x)

    others = {"sparse_mm_dense_mask": sparse_dense_mask, "sparse_mm_rebuilt_csr": sparse_rebuilt,
              "torch_path": torch_path}  # fmt: skip
    out: dict = {"shape": {"nodes": n, "edges": E, "features": F, "kept": float(keep.float().mean())}}
    out["forward"] = {k: timed_pair(f"forward vs {k}", triton, f, k, repeats, device) for k, f in others.items()}
    # forward + backward for x (torch.sparse.mm of a CSR has no gradient for its values)
    x.requires_grad_()
    clear = zero_grads(x)

    def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        run = backward_of(fn)
        return lambda: (clear(), run())

    out["forward_backward_x"] = {
        k: timed_pair(f"fwd+bwd(x) vs {k}", step(triton), step(f), k, repeats, device) for k, f in others.items()
    }
    return out


# ----------------------------------------------------------------------------------------------------------------
# decayed linear scan
# ----------------------------------------------------------------------------------------------------------------
def bench_scan(repeats: int, device: torch.device, smoke: bool) -> dict:
    T, N = (1024, 65536) if not smoke else (16, 64)
    torch.manual_seed(0)
    x = torch.randn(T, N, device=device)
    lam = 0.5 + 0.5 * torch.rand(T, N, device=device)
    say(f"scan: T = {T}, N = {N}, float32")
    out: dict = {"shape": {"T": T, "N": N, "dtype": "float32"}}
    loop_repeats = max(3, repeats // 4)  # the loop is slow; fewer calls keep the run short
    for label, decay in (("scalar_decay", 0.9), ("full_decay", lam)):
        out[label] = bench_scan_decay(label, x, decay, loop_repeats, device)
    out["spikingjelly_cupy_lif"] = bench_spikingjelly(x, repeats, device)
    return out


def bench_scan_decay(label: str, x: torch.Tensor, decay: float | torch.Tensor, repeats: int, device) -> dict:
    res = {
        "forward_vs_loop": timed_pair(
            f"{label} forward vs loop", lambda: linear_scan(x, decay, impl="triton"),
            lambda: linear_scan_reference(x, decay), "sequential_loop", repeats, device,
        )
    }  # fmt: skip
    xg = x.clone().requires_grad_()
    dg = decay.clone().requires_grad_() if isinstance(decay, torch.Tensor) else decay
    clear = zero_grads(*[t for t in (xg, dg) if isinstance(t, torch.Tensor)])
    tri = backward_of(lambda: linear_scan(xg, dg, impl="triton"))
    loop = backward_of(lambda: linear_scan_reference(xg, dg))
    res["forward_backward_vs_loop"] = timed_pair(
        f"{label} fwd+bwd vs loop", lambda: (clear(), tri()), lambda: (clear(), loop()), "sequential_loop",
        repeats, device,
    )  # fmt: skip
    return res


def bench_spikingjelly(x: torch.Tensor, repeats: int, device: torch.device) -> dict:
    """spikingjelly's cupy multi-step LIF (with resets) vs our scan with its leak, both forward only."""
    try:
        import cupy  # noqa: F401
        from spikingjelly.activation_based import functional, neuron
    except ImportError as err:
        say(f"  spikingjelly cupy LIF: not installed ({err})")
        return {"unavailable": f"not installed: {err}"}
    lif = neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m", backend="cupy").to(device)

    def sj() -> torch.Tensor:
        functional.reset_net(lif)
        return lif(x)

    return timed_pair("scan forward vs spikingjelly cupy", lambda: linear_scan(x, 0.5), sj, "spikingjelly_cupy",
                      repeats, device)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
def ratio(entry: dict) -> float | None:
    return entry.get("ratio_b_over_a")


def goals(res: dict) -> list[dict]:
    """Issue 25's goals, each with the measured ratio and whether it holds (None: not measured here)."""
    out = []

    def add(text: str, value: float | None, holds: Callable[[float], bool]) -> None:
        out.append({"goal": text, "measured": value, "met": None if value is None else bool(holds(value))})

    if "segmm" in res:
        f = res["segmm"]["forward"]
        add("segmm >= 3x the looped reference", ratio(f["looped_reference"]), lambda r: r >= 3.0)
        add("segmm >= 1.5x padded bmm", ratio(f["padded_bmm"]), lambda r: r >= 1.5)
    if "spmm" in res:
        r = ratio(res["spmm"]["forward"]["sparse_mm_dense_mask"])
        add("masked spmm <= 0.6x the time of dense-mask torch.sparse.mm", None if r is None else 1.0 / r,
            lambda t: t <= 0.6)  # fmt: skip
    if "scan" in res:
        add("scan >= 5x the sequential loop (scalar leak, forward)",
            ratio(res["scan"]["scalar_decay"]["forward_vs_loop"]), lambda r: r >= 5.0)  # fmt: skip
        sj = ratio(res["scan"]["spikingjelly_cupy_lif"])
        add("scan <= 1.0x spikingjelly's cupy LIF", None if sj is None else 1.0 / sj, lambda t: t <= 1.0)
    for g in out:
        state = "not measured" if g["met"] is None else ("met" if g["met"] else "NOT met")
        shown = "-" if g["measured"] is None else f"{g['measured']:.2f}"
        say(f"goal: {g['goal']:60s} measured {shown:>6s}  {state}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cases", default="segmm,spmm,scan")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default results/bench_kernels.json)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device (CPU: TRITON_INTERPRET=1)")
    args = ap.parse_args()
    if not args.smoke and not (torch.cuda.is_available() and triton_available()):
        sys.exit(
            "bench_kernels: needs a CUDA device and the triton package "
            f"(cuda available: {torch.cuda.is_available()}, triton installed: {triton_available()}); nothing was run"
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out_path = args.out or (Path(tempfile.gettempdir()) / "bench_kernels_smoke.json" if args.smoke else RESULTS)
    import triton

    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "repeats": args.repeats,
        "smoke": args.smoke,
    }
    say(f"bench_kernels on {meta['device']} (torch {meta['torch']}, triton {meta['triton']})")
    benches = {"segmm": bench_segmm, "spmm": bench_spmm, "scan": bench_scan}
    res = {}
    for case in args.cases.split(","):
        res[case] = benches[case](args.repeats, device, args.smoke)
    report = {"meta": meta, "cases": res, "goals": goals(res) if not args.smoke else "not evaluated (--smoke)"}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    out_path.with_suffix(".log").write_text("\n".join(LOG) + "\n")
    say(f"wrote {out_path}")


if __name__ == "__main__":
    main()
