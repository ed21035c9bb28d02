"""The tiny real SamModel of ``usam.toy_sam``: shapes, SAM's training objective, and USAM on its tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import SamModel

from usam import UncertainSAM, USAMConfig
from usam.toy import make_scenes
from usam.toy_sam import _batch, toy_sam_config, train_toy_sam


def test_config_gives_full_resolution_masks():
    sam = SamModel(toy_sam_config(16)).eval()
    px = torch.rand(2, 3, 64, 64)
    pts = torch.tensor([[[[10.0, 20.0]], [[40.0, 30.0]]]] * 2)
    with torch.no_grad():
        out = sam(pixel_values=px, input_points=pts)
    assert out.pred_masks.shape == (2, 2, 3, 64, 64)  # 4-px patches: a 16 x 16 grid, up-sampled 4x by the decoder
    assert out.iou_scores.shape == (2, 2, 3)


def test_bad_sizes_rejected():
    with pytest.raises(ValueError, match="hidden"):
        toy_sam_config(30)
    with pytest.raises(ValueError, match="steps"):
        train_toy_sam(make_scenes(2, seed=0), steps=0)


def _objective(model: SamModel, batch) -> float:
    """SAM's best-of-3 BCE on a fixed batch (the mask part of the training loss)."""
    px, pts, gt = batch
    with torch.no_grad():
        logits = model(pixel_values=px, input_points=pts).pred_masks  # (B, P, 3, 64, 64)
        target = gt[:, :, None].expand_as(logits)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")
    return float(bce.mean((-2, -1)).min(-1).values.mean())


@pytest.mark.slow
def test_training_lowers_the_objective_and_usam_reads_its_tokens():
    scenes = make_scenes(12, domain="source", seed=0)
    batch = _batch(scenes, np.random.default_rng(1), 6, 2)
    untrained = SamModel(toy_sam_config(16)).eval()
    torch.manual_seed(0)
    fit = train_toy_sam(scenes, steps=80, hidden=16, images_per_batch=4, prompts_per_image=2, seed=0)
    assert fit.steps == 80 and len(fit.losses) == 3
    assert not fit.model.training
    assert _objective(fit.model, batch) < 0.8 * _objective(untrained, batch)
    usam = UncertainSAM(fit.model, USAMConfig(heads=("iou", "task_gap"), hidden=8))
    px, pts, _ = batch
    with torch.no_grad():
        out = usam(pixel_values=px, input_points=pts, return_tokens=True)
        ref = fit.model(pixel_values=px, input_points=pts)
    assert torch.equal(out.iou_scores, ref.iou_scores)
    assert out.tokens.shape == (6, 2, 3, 32)  # concat(IoU token, mask token), d = 16
