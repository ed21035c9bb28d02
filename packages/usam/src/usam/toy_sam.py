"""A tiny real ``SamModel`` trained on the toy's source scenes, so that USAM reads *learned* decoder tokens.

The toy segmenter (:mod:`usam.toy`) hands USAM stand-in tokens. Here the model is transformers' own ``SamModel``
(ViT image encoder, prompt encoder, two-way-transformer mask decoder, IoU head), shrunk to 64-px images and trained
from scratch on the *source* scenes (uniform task prior: part / object / whole), as SAM is trained on SA-1B:

- one random foreground point of a GT instance per prompt, three masks per prompt (``multimask_output=True``);
- SAM's loss (Kirillov et al. 2023, Sec. 3 and App. A): for each prompt only the best of the three masks is trained
  (minimum over the masks of BCE + Dice on the 4× up-sampled low-resolution logits), plus the MSE between each mask's
  ``iou_scores`` and its IoU with the GT — that IoU head is the model's SamScore;
- AdamW, constant learning rate.

Everything downstream (:func:`usam.targets.extract_rows`, :class:`usam.model.UncertainSAM`, the heads, the metrics)
is the code that runs on a real SAM checkpoint. Importable by users::

    from usam.toy import make_scenes
    from usam.toy_sam import train_toy_sam

    fit = train_toy_sam(make_scenes(250, domain="source", seed=0), steps=300)
    fit.model  # a trained SamModel (eval mode)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as tF
from transformers import SamConfig, SamModel

from icml25_shared.device import torch_threads
from icml25_shared.validate import check_float, check_int
from usam.targets import iou, sample_prompts
from usam.toy import ToyScenes

__all__ = ["ToySamFit", "toy_sam_config", "train_toy_sam"]


def toy_sam_config(hidden: int = 32, image_size: int = 64, patch_size: int = 4) -> SamConfig:
    """A ``SamConfig`` for ``image_size``-px images: a 2-layer ViT of width ``hidden`` on ``patch_size`` patches
    (a (S/p)² embedding grid), and SAM's prompt encoder and mask decoder at width ``hidden``."""
    hidden = check_int("hidden", hidden, min=8)
    image_size = check_int("image_size", image_size, min=16)
    patch_size = check_int("patch_size", patch_size, min=1)
    if hidden % 4 or image_size % patch_size:
        raise ValueError(f"hidden must be a multiple of 4 and image_size of patch_size, got {hidden}, {image_size}")
    grid = image_size // patch_size
    vision = dict(
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch_size,
        output_channels=hidden,
        mlp_dim=2 * hidden,
        window_size=grid // 2,
        global_attn_indexes=[1],
        num_pos_feats=hidden // 2,
    )
    prompt = dict(hidden_size=hidden, image_size=image_size, patch_size=patch_size, mask_input_channels=4)
    decoder = dict(
        hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2, mlp_dim=2 * hidden, iou_head_hidden_dim=64
    )
    return SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder)


@dataclass
class ToySamFit:
    """A trained toy ``SamModel`` and its training log (loss every 25 steps)."""

    model: SamModel
    losses: list[float] = field(default_factory=list)
    steps: int = 0


def _dice(logits: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    p = torch.sigmoid(logits).flatten(-2)
    g = gt.flatten(-2)
    return 1 - (2 * (p * g).sum(-1) + 1) / (p.sum(-1) + g.sum(-1) + 1)


def _batch(scenes: ToyScenes, rng: np.random.Generator, images: int, prompts: int):
    idx = rng.choice(len(scenes), size=images, replace=len(scenes) < images)
    pts, gts = [], []
    for i in idx:
        masks = [m for m in scenes.gt_masks[i] if m.any()]
        ks = rng.choice(len(masks), size=prompts, replace=len(masks) < prompts)
        pts.append([sample_prompts(masks[k], 2, rng=rng)[1:] for k in ks])  # a random (eroded) foreground point
        gts.append(np.stack([masks[k] for k in ks]))
    px = scenes.pixel_values()[torch.as_tensor(idx)]
    return px, torch.as_tensor(np.asarray(pts)), torch.as_tensor(np.stack(gts)).float()


def train_toy_sam(
    scenes: ToyScenes,
    *,
    steps: int = 300,
    hidden: int = 32,
    images_per_batch: int = 8,
    prompts_per_image: int = 4,
    lr: float = 2e-3,
    seed: int = 0,
) -> ToySamFit:
    """Train a :func:`toy_sam_config` ``SamModel`` from scratch on ``scenes`` (module docstring), one torch thread."""
    steps = check_int("steps", steps, min=1)
    images_per_batch = check_int("images_per_batch", images_per_batch, min=1)
    prompts_per_image = check_int("prompts_per_image", prompts_per_image, min=1)
    lr = check_float("lr", lr, min=0.0, min_open=True)
    size = scenes.images.shape[1]
    with torch_threads(1):
        torch.manual_seed(seed)
        model = SamModel(toy_sam_config(hidden, size)).train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        rng = np.random.default_rng([seed, 7])
        fit = ToySamFit(model)
        run = 0.0
        for step in range(steps):
            px, pts, gt = _batch(scenes, rng, images_per_batch, prompts_per_image)
            out = model(pixel_values=px, input_points=pts, multimask_output=True)
            logits = tF.interpolate(out.pred_masks.flatten(0, 2)[:, None], size=(size, size), mode="bilinear")
            logits = logits.reshape(*out.pred_masks.shape[:3], size, size)  # (B, P, 3, S, S)
            target = gt[:, :, None].expand_as(logits)
            per_mask = tF.binary_cross_entropy_with_logits(logits, target, reduction="none").mean((-2, -1))
            per_mask = per_mask + _dice(logits, target)
            with torch.no_grad():
                true_iou = iou(logits > 0, target > 0.5)
            loss = per_mask.min(-1).values.mean() + tF.mse_loss(out.iou_scores, true_iou)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run += float(loss.detach())
            if (step + 1) % 25 == 0:
                fit.losses.append(run / 25)
                run = 0.0
        fit.steps = steps
        model.eval()
    return fit
