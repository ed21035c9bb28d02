"""A small transformers ``SamModel`` trained from scratch to segment the toy's scenes (CPU, bit-reproducible).

No SAM weights can be downloaded offline, so USAM is tested on the decoder tokens of the smallest honest stand-in:
transformers' own ``SamModel`` (ViT image encoder, prompt encoder, two-way-transformer mask decoder, IoU head),
shrunk to 64-px images, trained the way SAM is trained (Kirillov et al. 2023, Sec. 3 and App. A):

- scenes of 1..N wholes, each a group of touching objects that may carry a part (part ⊂ object ⊂ whole: the
  task ambiguity USAM measures), objects of varied size and count; a *curriculum* from large to small objects
  (objects of 4 % of the image are a deep empty-mask minimum for a randomly initialised decoder);
- one prompt point inside a GT instance of a uniformly drawn level, three masks per prompt
  (``multimask_output=True``), only the best of the three trained (SAM's minimum over the masks);
- SAM's loss 20·focal + dice on that mask, plus a mask-size-balanced BCE (the mean BCE over the foreground pixels
  and over the background pixels, weighted equally, so a small object weighs as much as the background), plus the
  MSE between every mask's ``iou_scores`` and its true IoU (the IoU head is the model's SamScore);
- SAM's positional-encoding scale 1.0 (transformers' ``SamPositionalEmbedding`` uses hidden/2, at which adjacent
  cells' encodings are nearly orthogonal) and SAM's initialisation (PyTorch's default layer initialisation, the
  reference implementation's; transformers' ``_init_weights`` leaves this small encoder at weights of about 1e-10);
- AdamW with linear warm-up and cosine decay, gradient clipping, one torch thread.

The recipe (:data:`RECIPE`) and the seed determine the weights bit for bit on one thread (``scripts/
train_small_sam.py`` rebuilds the shipped checkpoint and compares its sha256). Usage::

    from usam.small_sam import load_small_sam
    model = load_small_sam()          # the shipped checkpoint, eval mode
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as tF
from torch import nn
from transformers import SamModel

from icml25_shared.device import torch_threads
from icml25_shared.validate import check_int
from usam.targets import iou, sample_prompts
from usam.toy import _scene
from usam.toy_sam import toy_sam_config

__all__ = [
    "CHECKPOINT",
    "RECIPE",
    "Recipe",
    "SmallSamFit",
    "evaluate_small_sam",
    "load_small_sam",
    "sam_init_",
    "small_sam_config",
    "train_small_sam",
]

CHECKPOINT = Path(__file__).parent / "assets" / "small_sam.safetensors"
"""The shipped checkpoint (safetensors state dict of :func:`small_sam_config`'s ``SamModel``)."""


@dataclass(frozen=True)
class Recipe:
    """Everything the training depends on besides the seed."""

    image_size: int = 64
    patch_size: int = 4
    hidden: int = 32
    steps: int = 2000
    images_per_batch: int = 4
    prompts_per_image: int = 4
    lr: float = 2e-3
    warmup: int = 200
    weight_decay: float = 1e-4
    clip: float = 1.0
    focal_weight: float = 20.0
    balanced_weight: float = 1.0
    pe_scale: float = 1.0
    # curriculum: object radii (px) go linearly from ``radius_start`` to ``radius_end`` over the first
    # ``curriculum`` fraction of the steps, the number of wholes per scene from 1..2 to 1..``wholes_end``
    radius_start: tuple[float, float] = (9.0, 14.0)
    radius_end: tuple[float, float] = (3.0, 10.0)
    wholes_end: int = 4
    curriculum: float = 0.5
    eval_every: int = 250


RECIPE = Recipe()


def small_sam_config(recipe: Recipe = RECIPE):
    """The ``SamConfig`` of the small model (64-px images, 4-px patches, width 32)."""
    return toy_sam_config(recipe.hidden, recipe.image_size, recipe.patch_size)


def sam_init_(model: SamModel, pe_scale: float = 1.0) -> SamModel:
    """SAM's initialisation in place: PyTorch's default init of every layer (as in the reference code), zero
    absolute/relative position embeddings of the ViT, and random Fourier features N(0, pe_scale²) for the
    positional encoding of the image grid and the prompts (SAM: scale 1.0)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d, nn.LayerNorm, nn.Embedding)):
            module.reset_parameters()
        elif hasattr(module, "weight") and hasattr(module, "bias") and type(module).__name__.endswith("LayerNorm"):
            norm: Any = module  # transformers' own LayerNorm classes
            with torch.no_grad():
                norm.weight.fill_(1.0)
                norm.bias.zero_()
    encoder: Any = model.vision_encoder  # its pos_embed exists (SamVisionConfig.use_abs_pos)
    with torch.no_grad():
        encoder.pos_embed.zero_()
        for name, p in model.vision_encoder.named_parameters():
            if "rel_pos" in name:
                p.zero_()
        pe = model.shared_image_embedding.positional_embedding
        pe.copy_(pe_scale * torch.randn(pe.shape))
    return model


def _scene_batch(
    rng: np.random.Generator, n: int, size: int, radius: tuple[float, float], wholes_max: int, prompts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n clean scenes with one point and one GT mask per prompt: images (n, S, S, 3), points (n, P, 1, 2), gts."""
    images, pts, gts = [], [], []
    min_area = 12 if radius[0] < 5 else 25
    while len(images) < n:
        image, wholes = _scene(rng, size, radius, wholes_max, min_area)
        objects = [o for w in wholes for o in w["objects"]]
        pools = [[o["part"] for o in objects if o["part"] is not None], [o["mask"] for o in objects]]
        pools.append([w["mask"] for w in wholes])
        pools = [p for p in pools if p]
        if not pools:
            continue
        masks = []
        for _ in range(prompts):
            pool = pools[int(rng.integers(len(pools)))]
            masks.append(pool[int(rng.integers(len(pool)))])
        image = image + rng.normal(0, 0.02, image.shape)
        images.append(np.clip(image, 0, 1).astype(np.float32))
        pts.append([sample_prompts(m, 2, rng=rng, erode=3)[1:] for m in masks])
        gts.append(np.stack(masks))
    return np.stack(images), np.asarray(pts, dtype=np.float32), np.stack(gts).astype(np.float32)


def _losses(logits: torch.Tensor, gt: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Per-mask loss (…, K): focal_weight·focal + dice + balanced_weight·(size-balanced BCE)."""
    bce = tF.binary_cross_entropy_with_logits(logits, gt, reduction="none")
    p = torch.sigmoid(logits)
    pt = p * gt + (1 - p) * (1 - gt)
    alpha = 0.25 * gt + 0.75 * (1 - gt)
    focal = (alpha * (1 - pt) ** 2 * bce).mean((-2, -1))
    pf, gf = p.flatten(-2), gt.flatten(-2)
    dice = 1 - (2 * (pf * gf).sum(-1) + 1) / (pf.sum(-1) + gf.sum(-1) + 1)
    fg = gt.sum((-2, -1))
    bg = gt.shape[-1] * gt.shape[-2] - fg
    balanced = 0.5 * (bce * gt).sum((-2, -1)) / fg.clamp_min(1) + 0.5 * (bce * (1 - gt)).sum((-2, -1)) / bg.clamp_min(1)
    return recipe.focal_weight * focal + dice + recipe.balanced_weight * balanced


@dataclass
class SmallSamFit:
    """A trained small ``SamModel``, its loss every 100 steps and held-out evaluations."""

    model: SamModel
    losses: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    steps: int = 0
    cpu_s: float = 0.0
    recipe: dict[str, Any] = field(default_factory=dict)


def _stage(recipe: Recipe, step: int) -> tuple[tuple[float, float], int]:
    t = min(1.0, step / max(1.0, recipe.curriculum * recipe.steps))
    lo = recipe.radius_start[0] + t * (recipe.radius_end[0] - recipe.radius_start[0])
    hi = recipe.radius_start[1] + t * (recipe.radius_end[1] - recipe.radius_start[1])
    return (lo, hi), int(round(2 + t * (recipe.wholes_end - 2)))


def train_small_sam(
    recipe: Recipe = RECIPE, seed: int = 0, *, eval_scenes: int = 0, log: Any = None, steps: int | None = None
) -> SmallSamFit:
    """Train the small ``SamModel`` of ``recipe`` from ``seed`` on one torch thread (module docstring).

    ``eval_scenes`` > 0 evaluates held-out best-of-3 mIoU every ``recipe.eval_every`` steps (pilot runs; the
    evaluation draws from its own generator, so it does not change the weights); ``steps`` stops early.
    """
    seed = check_int("seed", seed, min=0)
    total = recipe.steps if steps is None else check_int("steps", steps, min=1)
    size = recipe.image_size
    t0 = time.process_time()
    with torch_threads(1):
        torch.manual_seed(seed)
        model = sam_init_(SamModel(small_sam_config(recipe)), recipe.pe_scale).train()
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
        rng = np.random.default_rng([seed, 2025])
        fit = SmallSamFit(model, recipe=asdict(recipe))
        run = 0.0
        for step in range(total):
            warm = min(1.0, (step + 1) / recipe.warmup)
            lr = recipe.lr * warm * 0.5 * (1 + math.cos(math.pi * step / recipe.steps))
            for g in opt.param_groups:
                g["lr"] = lr
            radius, wholes = _stage(recipe, step)
            img, pts, gt = _scene_batch(rng, recipe.images_per_batch, size, radius, wholes, recipe.prompts_per_image)
            px = torch.from_numpy(img.transpose(0, 3, 1, 2).copy())
            out = model(pixel_values=px, input_points=torch.from_numpy(pts), multimask_output=True)
            logits = out.pred_masks  # (B, P, 3, S, S): the decoder's 4x up-sampling reaches the image size
            if logits.shape[-1] != size:
                logits = tF.interpolate(logits.flatten(0, 2)[:, None], size=(size, size), mode="bilinear")
                logits = logits.reshape(*out.pred_masks.shape[:3], size, size)
            target = torch.from_numpy(gt)[:, :, None].expand_as(logits)
            per_mask = _losses(logits, target, recipe)
            with torch.no_grad():
                true_iou = iou(logits > 0, target > 0.5)
            loss = per_mask.min(-1).values.mean() + tF.mse_loss(out.iou_scores, true_iou)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
            opt.step()
            run += float(loss.detach())
            if (step + 1) % 100 == 0:
                fit.losses.append(run / 100)
                run = 0.0
            if eval_scenes and ((step + 1) % recipe.eval_every == 0 or step + 1 == total):
                model.eval()
                ev = evaluate_small_sam(model, n_scenes=eval_scenes)
                model.train()
                ev |= {"step": step + 1, "cpu_s": time.process_time() - t0, "loss": fit.losses[-1] if fit.losses else 0}
                fit.evals.append(ev)
                if log:
                    log(ev)
        fit.steps = total
        model.eval()
    fit.cpu_s = time.process_time() - t0
    return fit


@torch.no_grad()
def evaluate_small_sam(model: SamModel, n_scenes: int = 100, seed: int = 10_000, domain: str = "source") -> dict:
    """Held-out best-of-3 mIoU on the toy's scenes (:func:`usam.toy.make_scenes`, seed ``seed``), one centre point
    per GT instance, the selected mask's mIoU (highest ``iou_scores``) and how much the three masks differ (mean
    pairwise IoU between them; 1 = identical)."""
    from usam.toy import make_scenes

    size = int(getattr(model.config.vision_config, "image_size"))  # noqa: B009 (a SamVisionConfig)
    scenes = make_scenes(n_scenes, size=size, domain=domain, seed=seed)
    best, sel, pair = [], [], []
    px = scenes.pixel_values()
    with torch_threads(1):
        for i in range(len(scenes)):
            gts = torch.from_numpy(scenes.gt_masks[i])
            pts = np.stack([sample_prompts(m, 1, rng=0)[:1] for m in scenes.gt_masks[i]])[None]
            out = model(pixel_values=px[i : i + 1], input_points=torch.from_numpy(pts), multimask_output=True)
            masks = out.pred_masks[0] > 0  # (P, 3, S, S)
            ious = iou(masks, gts[:, None])
            best.append(ious.max(-1).values)
            sel.append(ious.gather(-1, out.iou_scores[0].argmax(-1, keepdim=True))[:, 0])
            pair.append(torch.stack([iou(masks[:, a], masks[:, b]) for a, b in ((0, 1), (0, 2), (1, 2))], -1).mean(-1))
    return {
        "best_of_3_miou": float(torch.cat(best).mean()),
        "selected_miou": float(torch.cat(sel).mean()),
        "mask_pairwise_iou": float(torch.cat(pair).mean()),
        "prompts": int(torch.cat(best).numel()),
    }


def sha256(path: str | Path) -> str:
    """The sha256 of a file (hex)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_small_sam(model: SamModel, path: str | Path) -> str:
    """Write the model's state dict (float32 safetensors, keys sorted) to ``path``; returns its sha256."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in sorted(model.state_dict().items())}
    save_file(state, str(path), metadata={"format": "pt"})
    return sha256(path)


def load_small_sam(path: str | Path | None = None, recipe: Recipe = RECIPE) -> SamModel:
    """The small ``SamModel`` (eval mode) with the weights at ``path`` (default: the shipped checkpoint)."""
    from safetensors.torch import load_file

    path = Path(CHECKPOINT if path is None else path)
    if not path.is_file():
        raise FileNotFoundError(f"path: {path} does not exist (train it with scripts/train_small_sam.py)")
    model = SamModel(small_sam_config(recipe))
    model.load_state_dict(load_file(str(path)))
    return model.eval()
