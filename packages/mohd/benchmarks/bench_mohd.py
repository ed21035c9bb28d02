"""Train-step time and cached greedy-decode speed: MoHD (2H, delta = 1/2) gather vs masked-dense, against
``LlamaForCausalLM`` (H) and ``MixtralForCausalLM`` at equal activated parameters, beside the analytic
activated-FLOP ratios.

All models are timed in one round-robin run on the same batch (every callable once per round, in rotating order, so
machine drift hits all alike). Ratios are median times over Llama(H)'s. Usage::

    python packages/mohd/benchmarks/bench_mohd.py [--device cpu|cuda] [--size small|large] [--repeats 10]

writes ``benchmarks/results/bench_mohd_<device>_<size>.json`` and the printed table to ``.log`` beside it (the README's
figures come from there). Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from icml25_shared.bench import round_robin
from icml25_shared.device import torch_threads
from mohd import MoHDConfig, MoHDForCausalLM, activated_flops, count_active_parameters

RESULTS = Path(__file__).parent / "results"
SIZES = {
    # hidden, layers, heads, head_dim, ffn, batch, seq, prompt, new tokens
    "small": dict(hidden=128, layers=2, heads=4, head_dim=32, ffn=352, batch=8, seq=64, prompt=16, new=32),
    "medium": dict(hidden=512, layers=2, heads=8, head_dim=64, ffn=1376, batch=4, seq=128, prompt=16, new=32),
    "large": dict(hidden=1024, layers=4, heads=16, head_dim=64, ffn=2816, batch=8, seq=512, prompt=64, new=64),
}


def _models(size: dict[str, int], device: torch.device, dtype: torch.dtype) -> dict[str, torch.nn.Module]:
    llama = LlamaConfig(
        vocab_size=256,
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        head_dim=size["head_dim"],
        max_position_embeddings=max(size["seq"], size["prompt"] + size["new"]),
        pad_token_id=0,
    )
    routing = dict(num_subdims=8, num_shared=3, num_routed=1)
    mixtral = MixtralConfig(
        vocab_size=256,
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["heads"],
        head_dim=size["head_dim"],
        max_position_embeddings=llama.max_position_embeddings,
        num_local_experts=4,
        num_experts_per_tok=1,
        pad_token_id=0,
    )
    out: dict[str, torch.nn.Module] = {}
    for name, build in {
        "Llama(H)": lambda: LlamaForCausalLM(llama),
        "MoHD(2H) gather": lambda: MoHDForCausalLM(MoHDConfig.from_llama(llama, 2, impl="gather", **routing)),
        "MoHD(2H) masked": lambda: MoHDForCausalLM(MoHDConfig.from_llama(llama, 2, impl="masked", **routing)),
        "Mixtral(H) 4e top-1": lambda: MixtralForCausalLM(mixtral),
    }.items():
        torch.manual_seed(0)
        out[name] = build().to(device=device, dtype=dtype)
    return out


def bench(device: torch.device, size_name: str, repeats: int) -> dict[str, Any]:
    size = SIZES[size_name]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    models = _models(size, device, dtype)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (size["batch"], size["seq"]), generator=g).to(device)
    prompt = torch.randint(1, 256, (1, size["prompt"]), generator=g).to(device)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-7) for k, m in models.items()}

    def train_step(name: str) -> Callable[[], None]:
        model, opt = models[name], opts[name]

        def step() -> None:
            out = model(input_ids=x, labels=x, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def decode(name: str) -> Callable[[], None]:
        model = models[name]

        def run() -> None:
            with torch.inference_mode():
                model.generate(
                    prompt, max_new_tokens=size["new"], min_new_tokens=size["new"], do_sample=False, pad_token_id=0
                )

        return run

    for m in models.values():
        m.train()
    train_t = round_robin({k: train_step(k) for k in models}, repeats=repeats, device=device)
    for m in models.values():
        m.eval()
    decode_t = round_robin({k: decode(k) for k in models}, repeats=repeats, device=device)
    base_cfg = models["Llama(H)"].config
    rows = {}
    for k, m in models.items():
        pc = count_active_parameters(m)
        flops = activated_flops(m, context=size["seq"] // 2)["total"]
        rows[k] = {
            "total_params": pc.total,
            "active_params": pc.active,
            "activated_flop_ratio": flops / activated_flops(base_cfg, context=size["seq"] // 2)["total"],
            "train_step_s": train_t[k].median,
            "train_ratio": train_t[k].median / train_t["Llama(H)"].median,
            "decode_tokens_per_s": size["new"] / decode_t[k].median,
            "decode_ratio": decode_t[k].median / decode_t["Llama(H)"].median,
        }
    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dtype": str(dtype),
        "threads": torch.get_num_threads(),
        "size": {"name": size_name, **size},
        "repeats": repeats,
        "load_avg_1min": os.getloadavg()[0],
        "rows": rows,
        "gather_over_masked_train": rows["MoHD(2H) gather"]["train_step_s"] / rows["MoHD(2H) masked"]["train_step_s"],
        "gather_over_masked_decode": rows["MoHD(2H) gather"]["decode_ratio"] / rows["MoHD(2H) masked"]["decode_ratio"],
    }


def _table(res: dict[str, Any]) -> str:
    lines = [
        f"== {res['size']['name']} on {res['device']} {res['gpu'] or ''} ({res['dtype']}, {res['threads']} threads, "
        f"load {res['load_avg_1min']:.1f}, {res['repeats']} rounds)",
        f"{'model':<22}{'total':>11}{'active':>11}{'FLOP x':>8}{'train ms':>10}{'train x':>9}{'decode tok/s':>14}"
        f"{'decode x':>10}",
    ]
    for k, r in res["rows"].items():
        lines.append(
            f"{k:<22}{r['total_params']:>11,}{r['active_params']:>11,}{r['activated_flop_ratio']:>8.2f}"
            f"{1e3 * r['train_step_s']:>10.1f}{r['train_ratio']:>9.2f}{r['decode_tokens_per_s']:>14.1f}"
            f"{r['decode_ratio']:>10.2f}"
        )
    lines.append(
        f"gather / masked-dense: train {res['gather_over_masked_train']:.2f}x, "
        f"decode {res['gather_over_masked_decode']:.2f}x (goal <= 0.6x)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=list(SIZES), default=None)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    size = args.size or ("large" if device.type == "cuda" else "small")
    with torch_threads(args.threads):
        res = bench(device, size, args.repeats)
    text = _table(res)
    print(text)
    out = args.out or RESULTS / f"bench_mohd_{device.type}_{size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    out.with_suffix(".log").write_text(text + "\n")


if __name__ == "__main__":
    main()
