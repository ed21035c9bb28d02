"""Forward+backward time and peak memory of TimeBase vs DLinear vs a PatchTST-sized model, at equal T, H, C.

Run: ``python packages/timebase/benchmarks/bench_timebase.py [--channels 321] [--horizon 720] [--batch 16]``.
Every comparison is one interleaved run (``icml25_shared.bench.compare``); results are ratios (> 1: TimeBase
faster / smaller), printed and written to ``benchmarks/results/bench_timebase.json`` (``--out``). Also CPU
inference latency per sample vs DLinear (paper Table 3: 3.3x) and the materialised affine map (y = x A + c) as an
inference fast path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from icml25_shared.bench import compare, peak_memory
from timebase import PatchTST, TimeBase, TimeBaseConfig
from timebase.baselines import DLinear

RESULTS = Path(__file__).parent / "results" / "bench_timebase.json"


def _train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--channels", type=int, default=321)
    ap.add_argument("--seq-len", type=int, default=720)
    ap.add_argument("--horizon", type=int, default=720)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON report is written")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t, h, c, b = args.seq_len, args.horizon, args.channels, args.batch
    x, y = torch.randn(b, t, c), torch.randn(b, h, c)
    models = {
        "TimeBase": TimeBase(TimeBaseConfig(t, h)),
        "DLinear": DLinear(t, h),
        "PatchTST": PatchTST(t, h, c, patch_len=16, stride=8, d_model=128, n_layers=3, n_heads=16, d_ff=256),
    }
    report: dict[str, object] = {
        "setting": {k: v for k, v in vars(args).items() if k != "out"},
        "params": {k: m.num_parameters() for k, m in models.items()},
        "macs_per_sample": {k: m.macs(c) for k, m in models.items()},
    }
    tb_step = _train_step(models["TimeBase"], x, y)
    for peer in ("DLinear", "PatchTST"):
        xp, yp = (x[:2], y[:2]) if peer == "PatchTST" else (x, y)  # PatchTST: a smaller batch, see 'note'
        peer_step = _train_step(models[peer], xp, yp)
        tb_small = _train_step(models["TimeBase"], xp, yp) if peer == "PatchTST" else tb_step
        cmp = compare(tb_small, peer_step, names=("TimeBase", peer), repeats=args.repeats if peer == "DLinear" else 3)
        mem_tb, mem_peer = peak_memory(tb_small), peak_memory(peer_step)
        report[f"fwd_bwd_vs_{peer}"] = {
            "batch": len(xp),
            "time_ratio_peer_over_timebase": cmp.ratio,
            **cmp.to_dict(),
            "peak_mem_bytes": {"TimeBase": mem_tb, peer: mem_peer},
            "mem_ratio_peer_over_timebase": mem_peer / max(mem_tb, 1),
        }
        print(json.dumps({f"fwd_bwd_vs_{peer}": report[f"fwd_bwd_vs_{peer}"]}, default=float), flush=True)
    tb = models["TimeBase"].eval()
    a, c0 = tb.as_affine()
    x1 = torch.randn(1, t, c)
    with torch.no_grad():
        inf = compare(lambda: tb(x1), lambda: models["DLinear"](x1), names=("TimeBase", "DLinear"), repeats=50)
        aff = compare(
            lambda: torch.einsum("btc,th->bhc", x, a) + c0[:, None],
            lambda: tb(x),
            names=("affine", "TimeBase"),
            repeats=args.repeats,
        )
    report["cpu_inference_per_sample_vs_DLinear"] = {
        "ratio_dlinear_over_timebase": inf.ratio,
        **inf.to_dict(),
        "paper": "3.25 ms / 0.98 ms = 3.3x",
    }
    report["affine_fast_path_vs_module"] = {"ratio_module_over_affine": aff.ratio, **aff.to_dict()}
    report["note"] = "PatchTST fwd+bwd is measured at batch 2 (memory); TimeBase re-measured at the same batch."
    text = json.dumps(report, indent=2, default=float)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
