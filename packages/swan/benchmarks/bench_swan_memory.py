"""End-to-end peak memory of training a LLaMA, SWAN vs torch.optim.AdamW, measured by the kernel in fresh processes.

Each optimizer trains ``transformers.LlamaForCausalLM`` (fp32, random initialisation, a batch of ``--batch``
sequences of ``--seq`` tokens) for two steps in its own fresh process. The peak resident set is what the kernel
reports (``VmHWM``), split into three measured windows that together cover the whole process: construction and
the first step (where AdamW allocates its moments), the second backward, the second ``optimizer.step()``; the
counter is reset between windows (``/proc/self/clear_refs``), so the process's peak is the largest of the three.
glibc serves every block over 64 KiB by ``mmap`` (``MALLOC_MMAP_THRESHOLD_``), so freed tensors leave the resident
set at once. Reported per optimizer:

- weights, gradients, optimizer state: exact tensor bytes (the breakdown);
- backward high-water mark above what was resident before it (activations + gradients), measured;
- ``optimizer.step()`` high-water mark above what was resident before it (the step's temporaries), measured;
- the end-to-end peak above the process's resident set after imports (libraries: the same in every process), and
  the whole process's peak, measured.

The **limit** is the ratio a perfect implementation of the method reaches on this input: AdamW's end-to-end peak
less exactly the two fp32 moments of the hidden matrices (what SWAN does not keep), with no temporaries of its own.

Shapes: ``350m`` is GaLore's LLaMA-350M (24 layers, hidden 1024, MLP 2736, 16 heads, vocabulary 32,000; 368M
parameters), the paper's middle model; ``60m`` its LLaMA-60M (8 x 512, MLP 1376, 8 heads). SWAN runs with the
paper's split (``param_groups``: AdamW on embeddings, head and norms). ``--ns-steps`` sets SWAN's Newton-Schulz
iterations: the iteration rotates the same four ``m x m`` buffers for every K >= 2, so the memory of K = 2 is the
memory of the default K = 10 (``tests/test_swan_memory.py`` measures both; the 60m run shows both rows) at a fifth
of the CPU time, which is what makes the 350M step fit a short CPU run. Usage::

    python packages/swan/benchmarks/bench_swan_memory.py --shape 350m [--batch 1] [--seq 256] [--ns-steps 2]
    python packages/swan/benchmarks/bench_swan_memory.py --shape 60m --batch 4

writes ``benchmarks/results/bench_swan_memory_<shape>.json`` and its table (``.log``), and the rows of
``benchmarks/results/performance.json``. Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
SHAPES = {
    "60m": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8},
    "350m": {"hidden_size": 1024, "intermediate_size": 2736, "num_hidden_layers": 24, "num_attention_heads": 16},
}
TITLES = {"60m": "LLaMA-60M (8 x 512, MLP 1376)", "350m": "LLaMA-350M (24 x 1024, MLP 2736)"}
GOALS = {"60m": "context (the embeddings are 56% of the parameters)", "350m": "<= 0.65 (paper: about 0.5)"}


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise OSError(f"{key} not in /proc/self/status")


def _reset_peak() -> int:
    """Reset the kernel's peak-RSS counter; returns the resident set now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _child(name: str, shape: str, batch: int, seq: int, ns_steps: int) -> dict[str, Any]:
    import torch
    import transformers

    from swan import SWAN, param_groups

    torch.set_num_threads(1)
    _ = transformers.LlamaForCausalLM  # the lazily imported modelling code belongs to the libraries
    baseline = _status("VmRSS")  # after imports: libraries, the same in every process
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=32000, max_position_embeddings=seq, tie_word_embeddings=False,
        num_key_value_heads=SHAPES[shape]["num_attention_heads"], **SHAPES[shape],
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    constructed = _status("VmRSS")
    lr = 1e-4
    if name == "AdamW":  # torch's default on CPU (single-tensor loop: the smallest temporaries of its variants)
        opt: Any = torch.optim.AdamW(model.parameters(), lr=lr)
    else:
        opt = SWAN(param_groups(model, lr=lr), ns_steps=ns_steps if name == "SWAN" else 10)
    matrices = param_groups(model)[0]["params"]

    def nbytes(ts: Any) -> int:
        return sum(t.numel() * t.element_size() for t in ts)

    def backward() -> None:
        model(input_ids=ids, labels=ids).loss.backward()

    t0 = time.process_time()
    backward()
    opt.step()  # step 1 (AdamW allocates its moments here)
    opt.zero_grad(set_to_none=True)
    windows = {"construction + step 1": _status("VmHWM")}
    before_backward = _reset_peak()
    backward()
    windows["backward 2"] = _status("VmHWM")
    gradients = nbytes(p.grad for p in model.parameters() if p.grad is not None)
    before_step = _reset_peak()
    opt.step()
    windows["optimizer.step 2"] = _status("VmHWM")
    cpu_s = time.process_time() - t0
    state = sum(nbytes(v for v in s.values() if torch.is_tensor(v)) for s in opt.state.values())
    peak = max(windows.values())
    return {
        "optimizer": name if name != "SWAN" else f"SWAN (K={ns_steps})",
        "ns_steps": None if name == "AdamW" else (ns_steps if name == "SWAN" else 10),
        "parameters": sum(p.numel() for p in model.parameters()),
        "matrix_parameters": sum(p.numel() for p in matrices),
        "weights": nbytes(model.parameters()),
        "gradients": gradients,
        "state": state,
        "backward_above_resident": windows["backward 2"] - before_backward,
        "step_above_resident": windows["optimizer.step 2"] - before_step,
        "baseline": baseline,
        "constructed_above_baseline": constructed - baseline,
        "resident_before_backward_above_baseline": before_backward - baseline,
        "windows": windows,
        "peak_window": max(windows, key=lambda k: windows[k]),
        "process_peak": peak,
        "peak": peak - baseline,
        "cpu_s": cpu_s,
    }


def _table(rows: list[dict[str, Any]], shape: str, batch: int, seq: int, limit: float) -> list[str]:
    mb = 1e6
    base = rows[0]
    lines = [
        f"== {TITLES[shape]}, vocab 32,000, {base['parameters'] / 1e6:.1f}M parameters "
        f"({base['matrix_parameters'] / 1e6:.1f}M in hidden matrices), batch {batch} x {seq} tokens, fp32, CPU, "
        "one fresh process per optimizer, peak RSS measured by the kernel (VmHWM)",
        f"{'optimizer':<14}{'weights':>9}{'grads':>9}{'state':>9}{'bwd+':>9}{'step+':>9}{'peak':>10}"
        f"{'process':>10}{'x AdamW':>9}  peak in",
    ]
    for r in rows:
        lines.append(
            f"{r['optimizer']:<14}{r['weights'] / mb:>9.1f}{r['gradients'] / mb:>9.1f}{r['state'] / mb:>9.1f}"
            f"{r['backward_above_resident'] / mb:>9.1f}{r['step_above_resident'] / mb:>9.1f}{r['peak'] / mb:>10.1f}"
            f"{r['process_peak'] / mb:>10.1f}{r['peak'] / base['peak']:>9.3f}  {r['peak_window']}"
        )
    lines += [
        "MB; bwd+ / step+: high-water mark of the second backward / optimizer.step() above what was resident before "
        "it; peak: end-to-end peak above the process after imports "
        f"({base['baseline'] / mb:.0f} MB of libraries); process: the whole process's peak",
        f"limit (AdamW's peak less the matrices' two fp32 moments, 8 x {base['matrix_parameters'] / 1e6:.1f}M bytes): "
        f"{limit:.3f}",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="350m")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ns-steps", type=int, default=2)
    ap.add_argument("--child", choices=("AdamW", "SWAN", "SWAN K=10"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.shape, args.batch, args.seq, args.ns_steps)))
        return
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("needs Linux /proc/self/clear_refs to reset the peak-RSS counter")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    names = ["AdamW", "SWAN"] + (["SWAN K=10"] if args.shape == "60m" and args.ns_steps != 10 else [])
    rows, loads = [], [os.getloadavg()[0]]
    for name in names:
        cmd = [sys.executable, __file__, "--child", name, "--shape", args.shape, "--batch", str(args.batch)]
        cmd += ["--seq", str(args.seq), "--ns-steps", str(args.ns_steps)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        loads.append(os.getloadavg()[0])
        print(
            f"{rows[-1]['optimizer']}: peak {rows[-1]['peak'] / 1e6:.1f} MB ({rows[-1]['cpu_s']:.0f} CPU-s)", flush=True
        )
    adamw, swan = rows[0], rows[1]
    ratio = swan["peak"] / adamw["peak"]
    limit = (adamw["peak"] - 8 * adamw["matrix_parameters"]) / adamw["peak"]
    lines = _table(rows, args.shape, args.batch, args.seq, limit)
    lines.append(
        f"SWAN / AdamW end-to-end peak: {ratio:.3f} (whole process {swan['process_peak'] / adamw['process_peak']:.3f})"
        f"; limit {limit:.3f}; goal {GOALS[args.shape]}; load {max(loads):.2f}"
    )
    print("\n".join(lines))
    from icml25_shared.bench import save_results, write_performance

    source = f"bench_swan_memory_{args.shape}.json"
    results = {
        "shape": args.shape, "config": SHAPES[args.shape], "batch": args.batch, "seq": args.seq,
        "ns_steps": args.ns_steps, "rows": rows, "swan_over_adamw": ratio, "limit": limit, "load_1min": loads,
    }  # fmt: skip
    save_results(RESULTS / source, results, lines)
    row = {
        "case": f"end-to-end training peak, {TITLES[args.shape]}, batch {args.batch} x {args.seq}, fp32 CPU",
        "peer": "torch.optim.AdamW",
        "metric": "peak memory",
        "ratio": ratio,
        "lo": None,
        "hi": None,
        "limit": limit,
        "goal": GOALS[args.shape],
        "load": max(loads),
    }
    notes = [
        "Peak resident memory of a whole training process (construction and two fp32 steps on one CPU thread), each "
        "optimizer in a fresh process, measured by the kernel (VmHWM) above the libraries' resident set; SWAN with "
        "the paper's split (AdamW on embeddings, head and norms), K = 2 Newton-Schulz steps (the same buffers as "
        "the default K = 10, tested).",
        "Limit: AdamW's peak less exactly the two fp32 moments of the hidden matrices, which SWAN does not keep. "
        "Weights, gradients, activations and the embeddings' and head's AdamW moments stay, so the limit falls "
        "towards the paper's 0.5 only as the hidden matrices' share of the parameters grows (deeper, wider models).",
    ]
    write_performance(RESULTS, source, [row], notes=notes)


if __name__ == "__main__":
    main()
