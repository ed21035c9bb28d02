"""End-to-end memory of one training step of LLaMA-60M (the paper's smallest model), SWAN vs AdamW (and Muon).

Each optimizer runs in a fresh process (``swan.memory_profile``: the kernel's peak resident set over one step on
CPU, the allocator's peak on CUDA), on ``transformers.LlamaForCausalLM`` with the LLaMA-60M shapes (8 layers,
hidden 512, MLP 1376, 8 heads, vocabulary 32,000; 58M parameters, fp32) and a batch of ``--batch`` sequences of
``--seq`` tokens. SWAN: hidden matrices stateless, AdamW on embeddings/head/norms (``param_groups``), default
settings (and with uncapped stacking). Reported: parameters, gradients, optimizer state, the step's peak above
them, the end-to-end peak, and the ratio SWAN / AdamW (paper: about 0.5 end to end). Usage::

    python packages/swan/benchmarks/bench_swan_memory.py [--batch 4] [--seq 256] [--muon] [--out PATH]

writes ``benchmarks/results/bench_swan_memory.json`` and the table (``.log``); the README's memory section is
copied from them. ``--muon`` adds torch.optim.Muon on the hidden matrices (its CPU step takes minutes here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "bench_swan_memory.json"
OPTIMIZERS = ("AdamW", "SWAN", "SWAN stacked", "Muon")


def _child(name: str, batch: int, seq: int) -> dict[str, Any]:
    import torch
    import transformers

    from icml25_shared.device import get_device
    from swan import SWAN, memory_profile, param_groups

    torch.manual_seed(0)
    device = get_device()
    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=8, max_position_embeddings=seq, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).to(device)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    lr = 1e-4
    if name == "AdamW":
        opt: Any = torch.optim.AdamW(model.parameters(), lr=lr)
    elif name == "SWAN":
        opt = SWAN(param_groups(model, lr=lr))
    elif name == "SWAN stacked":  # every same-shaped matrix in one stack (no bucket cap): the old default
        opt = SWAN(param_groups(model, lr=lr), foreach=True, max_bucket_bytes=1 << 40)
    else:  # Muon on the hidden matrices, AdamW on the rest (the usual hybrid), one torch.optim object each
        groups = param_groups(model, lr=lr)
        opt = _Hybrid(torch.optim.Muon(groups[0]["params"], lr=lr), torch.optim.AdamW(groups[1]["params"], lr=lr))
    prof = memory_profile(model, {"input_ids": ids, "labels": ids}, opt)
    return {"optimizer": name, **prof.to_dict()}


class _Hybrid:
    """Two optimizers stepped as one (what memory_profile calls: step, zero_grad, state)."""

    def __init__(self, *opts: Any) -> None:
        self.opts = opts

    @property
    def state(self) -> dict:
        return {k: v for o in self.opts for k, v in o.state.items()}

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)


def _table(rows: list[dict[str, Any]], batch: int, seq: int) -> list[str]:
    mb = 1e6
    base = next(r for r in rows if r["optimizer"] == "AdamW")
    lines = [
        f"== LLaMA-60M (8 x 512, MLP 1376, vocab 32,000), batch {batch} x {seq} tokens, fp32, {base['device']}, "
        f"one fresh process per optimizer ({base['method']})",
        f"{'optimizer':<14}{'params MB':>10}{'grads MB':>10}{'state MB':>10}{'step peak MB':>13}{'opt.step MB':>12}"
        f"{'peak MB':>10}{'x AdamW':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['optimizer']:<14}{r['parameters'] / mb:>10.1f}{r['gradients'] / mb:>10.1f}{r['state'] / mb:>10.1f}"
            f"{r['step_peak'] / mb:>13.1f}{r['transient'] / mb:>12.1f}{r['peak'] / mb:>10.1f}"
            f"{r['peak'] / base['peak']:>9.3f}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--muon", action="store_true", help="also torch.optim.Muon (minutes per step on CPU)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", choices=OPTIMIZERS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.batch, args.seq)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    names = [n for n in OPTIMIZERS if n != "Muon" or args.muon]
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--child", name, "--batch", str(args.batch), "--seq", str(args.seq)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"{name}: peak {rows[-1]['peak'] / 1e6:.1f} MB", flush=True)
    lines = _table(rows, args.batch, args.seq)
    adamw = next(r for r in rows if r["optimizer"] == "AdamW")["peak"]
    swan = next(r for r in rows if r["optimizer"] == "SWAN")["peak"]
    lines.append(f"SWAN / AdamW end-to-end peak: {swan / adamw:.3f} (aim <= 0.6; paper about 0.5)")
    print("\n".join(lines))
    from icml25_shared.bench import save_results

    save_results(args.out, {"batch": args.batch, "seq": args.seq, "rows": rows, "swan_over_adamw": swan / adamw}, lines)


if __name__ == "__main__":
    main()
