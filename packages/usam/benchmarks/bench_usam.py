"""Cost of USAM and of the Monte-Carlo baselines relative to one SAM forward, and fused vs looped heads.

A random-init ``SamModel`` with the real mask-decoder width (d = 256, so 2d = 512 head inputs as in the paper) and a
reduced ViT encoder (``--image`` px, 16-px patches, ``--layers`` layers of width 256). All timed in one round-robin
run (every callable once per round, rotating order):

- ``sam``: one image, one single-point prompt (the baseline);
- ``usam``: the same through :class:`usam.UncertainSAM` with the nine heads of the released models (fused);
- ``mc_t5``: H_T inputs — five augmented copies of the image (five encoder passes, batched);
- ``mc_xp8``: H_XP inputs — eight single-point prompts on one reused image embedding (1 encoder + 1 decoder pass).

And, separately, the nine heads on 3 tokens × ``--prompts`` prompts: fused (three ``baddbmm``) vs a loop over heads.
The paper (RTX 3050 Ti, SAM2): USAM +0.9 % (Large) to +14 % (Tiny); |T| = 5 ≈ 5×. Usage::

    python packages/usam/benchmarks/bench_usam.py [--device cpu|cuda] [--dtype float32|bfloat16] [--out PATH]

writes ``benchmarks/results/bench_usam[_<device>].json`` and the table to ``.log`` beside it. Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from transformers import SamConfig, SamModel

from icml25_shared.bench import compare, round_robin, save_results, write_performance
from icml25_shared.device import torch_threads
from usam import UncertainSAM, USAMConfig, mc
from usam.config import OFFICIAL_HEAD_NAMES

RESULTS = Path(__file__).parent / "results"


def sam_model(image: int, layers: int, device: str, dtype: torch.dtype) -> SamModel:
    torch.manual_seed(0)
    vision = dict(
        hidden_size=256,
        num_hidden_layers=layers,
        num_attention_heads=8,
        image_size=image,
        patch_size=16,
        output_channels=256,
        mlp_dim=1024,
        window_size=8,
        global_attn_indexes=[layers - 1],
    )
    cfg = SamConfig(vision_config=vision, prompt_encoder_config=dict(image_size=image, patch_size=16))
    return SamModel(cfg).eval().to(device, dtype)


def performance_rows(results: dict) -> list[dict]:
    """The README's rows: USAM's forward and the Monte-Carlo baselines against SAM's own forward, fused heads
    against a loop over heads (time, ours / peer)."""
    t, load = results["timings"], results["settings"]["load"]
    sam = t["sam"]["median_s"]
    row = {"metric": "time", "load": load}
    return [
        {**row, "case": "SAM forward + 9 USAM heads", "peer": "SAM forward (SamModel)",
         "ratio": t["usam"]["median_s"] / sam, "goal": "≤ 1.05×"},
        {**row, "case": "SAM forward + 9 USAM heads", "peer": "MC over 5 augmentations (H_T)",
         "ratio": t["usam"]["median_s"] / t["mc_t5"]["median_s"]},
        {**row, "case": "SAM forward + 9 USAM heads", "peer": "MC over 8 prompts (H_XP, reused embedding)",
         "ratio": t["usam"]["median_s"] / t["mc_xp8"]["median_s"]},
        {**row, "case": "9 heads fused (3 baddbmm)", "peer": "loop over 9 heads",
         "ratio": results["heads"]["time_a"]["median_s"] / results["heads"]["time_b"]["median_s"]},
    ]  # fmt: skip


NOTES = [
    "Random-init SamModel with SAM's decoder width (256) and a reduced 2-layer ViT at 256 px, one image and one "
    "point, one thread. USAM's overhead is about 3.5 ms (nine 512-wide heads read 19 MB of weights); against a real "
    "SAM encoder that is far below 1 % but was not measured here. Fusing removes launches and Python calls, not "
    "arithmetic, so on one CPU thread it gains little; the CUDA rows (`--device cuda`) were not run."
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", action="store_true", help="rebuild performance.json from the committed result")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--image", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.summarize:
        path = RESULTS / "bench_usam.json"
        write_performance(RESULTS, path.name, performance_rows(json.loads(path.read_text())), notes=NOTES)
        return
    dtype = getattr(torch, a.dtype)
    dev = a.device
    model = sam_model(a.image, a.layers, dev, dtype)
    heads = tuple(OFFICIAL_HEAD_NAMES.values())
    usam = UncertainSAM(model, USAMConfig(heads=heads))
    g = torch.Generator().manual_seed(0)
    px = torch.randn(1, 3, a.image, a.image, generator=g).to(dev, dtype)
    pt = torch.tensor([[[[a.image / 3, a.image / 2]]]], device=dev)
    aug = px.expand(5, -1, -1, -1).contiguous()
    pts8 = torch.rand(8, 2, generator=g).mul(a.image - 1).to(dev)
    tokens = torch.randn(1, a.prompts, 3, 512, generator=g).to(dev)
    loop = [usam.heads.head(n) for n in usam.heads.names]

    with torch_threads(a.threads), torch.inference_mode():
        fns = {
            "sam": lambda: model(pixel_values=px, input_points=pt),
            "usam": lambda: usam(pixel_values=px, input_points=pt),
            "mc_t5": lambda: mc.augmentation_maps(model, aug, pt[0, 0, 0]),
            "mc_xp8": lambda: mc.prompt_maps(model, px, pts8),
        }
        t = round_robin(fns, repeats=a.repeats, warmup=2, device=dev)
        fused = compare(
            lambda: usam.heads(tokens),
            lambda: [h(tokens) for h in loop],
            names=("fused", "loop"),
            repeats=max(a.repeats, 30),
            warmup=3,
            device=dev,
        )
    base = t["sam"].median
    ratios = {
        "usam_overhead": t["usam"].median / base - 1.0,
        "mc_t5_over_sam": t["mc_t5"].median / base,
        "mc_xp8_over_sam": t["mc_xp8"].median / base,
        "fused_over_loop": fused.a.median / fused.b.median,
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"SamModel d=256, ViT {a.layers}x256 at {a.image}px, {dev} {a.dtype}, {a.threads} thread(s), load {load:.1f}",
        *(f"  {k:8s} median {v.median * 1e3:9.2f} ms" for k, v in t.items()),
        f"  USAM overhead / SAM forward   {ratios['usam_overhead'] * 100:+7.2f} %   (aim < 5 %; paper +0.9..+14 %)",
        f"  MC |T|=5 / SAM                {ratios['mc_t5_over_sam']:7.2f} x   (paper ~5x)",
        f"  MC |XP|=8 / SAM               {ratios['mc_xp8_over_sam']:7.2f} x   (paper 1.1..1.6x)",
        f"  9 heads x 3 x {a.prompts} tokens: fused {fused.a.median * 1e3:.3f} ms, loop {fused.b.median * 1e3:.3f} ms,"
        f" ratio {ratios['fused_over_loop']:.2f} (aim <= 0.5)",
    ]
    print("\n".join(lines))
    results = {
        "settings": vars(a) | {"out": str(a.out), "load": load},
        "ratios": ratios,
        "timings": {k: v.to_dict() for k, v in t.items()},
        "heads": fused.to_dict(),
    }
    name = "bench_usam.json" if dev == "cpu" else f"bench_usam_{dev}_{a.dtype}.json"
    path = save_results(a.out or RESULTS / name, results, lines)
    if dev == "cpu":
        write_performance(path.parent, path.name, performance_rows(results), notes=NOTES)


if __name__ == "__main__":
    main()
