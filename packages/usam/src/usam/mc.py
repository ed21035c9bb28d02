"""Monte-Carlo entropy baselines of the paper (Sec. 3.1 and 4.1): H_Std, H_A, H_XP, H_T, H_Θ, H_Y.

Each estimator is the entropy :func:`usam.entropy.mask_entropy` of a (weighted) mean of foreground maps:

- ``H_Std`` — the selected mask's own map; ``H_A`` — the SamScore-weighted mean of the three masks;
- ``H_XP`` — the mean over |XP| = 8 single-point prompts (the centre point and 7 random foreground points) of the
  map of mask ``best``; the image embedding is computed once and reused (one encoder, one batched decoder pass);
- ``H_T`` — the mean over |T| = 5 augmentations of the image (5 encoder passes, batched);
- ``H_Θ`` — the mean over models (the SAM2 sizes);
- ``H_Y`` — the SamScore-weighted mean over everything (models × augmentations × prompts × masks).

"best" is the mask with the highest GT IoU: these baselines peek at the ground truth for the mask index, as in the
paper's analysis. The ``*_maps`` functions run a SamModel, Sam2Model, :class:`~usam.model.UncertainSAM` or any
callable with its signature (``usam.toy.ToySegmenter``) and return logits and SamScores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from icml25_shared.validate import check_tensor
from usam.entropy import mask_entropy, mixture_entropy, probabilities

__all__ = [
    "augmentation_maps",
    "h_a",
    "h_mc",
    "h_std",
    "h_y",
    "model_maps",
    "prompt_maps",
]


def _pick(logits: torch.Tensor, index: torch.Tensor, name: str = "index") -> torch.Tensor:
    """logits (…, 3, h, w), index (…) → the indexed maps (…, h, w)."""
    check_tensor("logits", logits, dtype="floating")
    if logits.ndim < 3:
        raise ValueError(f"logits must have shape (…, K, h, w), got {tuple(logits.shape)}")
    check_tensor(name, index, shape=tuple(logits.shape[:-3]), dtype="integer")
    k = logits.shape[-3]
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= k):
        raise ValueError(
            f"{name} must lie in [0, {k - 1}] (one of the {k} masks), got [{int(index.min())}, {int(index.max())}]"
        )
    idx = index[..., None, None, None].expand(*index.shape, 1, *logits.shape[-2:])
    return logits.gather(-3, idx)[..., 0, :, :]


def h_std(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """H of mask ``index`` (the SamScore-selected one in use): logits (…, 3, h, w), index (…) → (…)."""
    return mask_entropy(probabilities(_pick(logits, index)))


def h_a(logits: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Task entropy: H(Σ_j w_j p_j), w_j = s_j / Σ s over the three masks (…, 3, h, w) → (…)."""
    check_tensor("scores", scores, finite=True)
    return mixture_entropy(probabilities(logits), scores.float().clamp_min(1e-6), dim=-3)


def h_mc(logits: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """H of the uniform mean over the MC axis 0 of the maps of mask ``best``: logits (N, …, 3, h, w), best (N, …)."""
    return mixture_entropy(probabilities(_pick(logits, best, "best")), None, dim=0)


def h_y(logits: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """H of the SamScore-weighted mean over the MC axis 0 and the three masks: (N, …, 3, h, w) → (…)."""
    p = probabilities(logits).movedim(0, -4)  # (…, N, 3, h, w)
    w = scores.float().clamp_min(1e-6).movedim(0, -2)  # (…, N, 3)
    p = p.reshape(*p.shape[:-4], -1, *p.shape[-2:])
    w = w.reshape(*w.shape[:-2], -1)
    return mixture_entropy(p, w, dim=-3)


def _inside(name: str, points: torch.Tensor, pixel_values: torch.Tensor) -> None:
    """Points (n, 2) as (x, y) must lie inside the image (in the model's input frame)."""
    h, w = pixel_values.shape[-2:]
    bad = (points[:, 0] < 0) | (points[:, 0] >= w) | (points[:, 1] < 0) | (points[:, 1] >= h)
    if bad.any():
        raise ValueError(f"{name} must lie inside the {h}x{w} image, got {points[bad][:3].tolist()}")


def _call(model: Any, points: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.ones(points.shape[:-1], dtype=torch.long, device=points.device)
    out = model(input_points=points, input_labels=labels, multimask_output=True, **kw)
    return out.pred_masks, out.iou_scores


@torch.no_grad()
def prompt_maps(model: Any, pixel_values: torch.Tensor, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The |XP| single-point prompts of one image: points (N, 2) → logits (N, 3, h, w), scores (N, 3).

    For a SamModel/Sam2Model the image embedding is computed once (``get_image_embeddings``) and the N prompts run as
    one batched decoder pass.
    """
    check_tensor("pixel_values", pixel_values, ndim=4, shape=(1, None, None, None))
    check_tensor("points", points, ndim=2, shape=(None, 2), finite=True)
    _inside("points", points, pixel_values)
    pts = points[None, :, None, :].to(pixel_values.device, torch.float32)
    sam = getattr(model, "model", model)
    if hasattr(sam, "get_image_embeddings") and hasattr(sam, "mask_decoder"):
        emb = sam.get_image_embeddings(pixel_values)
        masks, scores = _call(model, pts, image_embeddings=emb)
    else:
        masks, scores = _call(model, pts, pixel_values=pixel_values)
    return masks[0], scores[0]


@torch.no_grad()
def augmentation_maps(model: Any, augmented: torch.Tensor, point: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|T| augmented copies of one image (T, 3, S, S) (already preprocessed), one point (2,) → (T, 3, h, w), (T, 3)."""
    check_tensor("augmented", augmented, ndim=4)
    check_tensor("point", point, shape=(2,), finite=True)
    _inside("point", point[None], augmented)
    pts = point.to(augmented.device, torch.float32).expand(augmented.shape[0], 1, 1, 2)
    masks, scores = _call(model, pts, pixel_values=augmented)
    return masks[:, 0], scores[:, 0]


@torch.no_grad()
def model_maps(
    models: Sequence[Any], pixel_values: torch.Tensor, point: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ensemble Θ on one image and point: → (M, 3, h, w), (M, 3) (maps resized to the first model's size)."""
    if isinstance(models, (str, bytes)) or not isinstance(models, Sequence) or len(models) == 0:
        raise ValueError(f"models must be a non-empty sequence of SAM models, got {models!r:.80}")
    check_tensor("pixel_values", pixel_values, ndim=4, shape=(1, None, None, None))
    check_tensor("point", point, shape=(2,), finite=True)
    _inside("point", point[None], pixel_values)
    outs, scores = [], []
    for m in models:
        masks, s = _call(m, point.to(pixel_values.device, torch.float32).reshape(1, 1, 1, 2), pixel_values=pixel_values)
        outs.append(masks[0, 0].float())
        scores.append(s[0, 0].float())
    size = outs[0].shape[-2:]
    outs = [
        o if o.shape[-2:] == size else torch.nn.functional.interpolate(o[None], size=size, mode="bilinear")[0]
        for o in outs
    ]
    return torch.stack(outs), torch.stack(scores)
