"""IoU, gap encoding, the prompt sampler and row extraction."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from scipy.ndimage import binary_erosion

from usam.targets import decode_gap, encode_gap, extract_rows, iou, load_rows, sample_prompts, save_rows
from usam.toy import ToySegmenter, make_scenes


def test_iou_edge_cases():
    a = torch.zeros(8, 8, dtype=torch.bool)
    a[2:6, 2:6] = True
    b = torch.zeros_like(a)
    b[0:2, 0:2] = True
    c = torch.zeros_like(a)
    c[2:6, 4:8] = True
    assert iou(a, a).item() == 1.0
    assert iou(a, b).item() == 0.0
    assert iou(torch.zeros_like(a), torch.zeros_like(a)).item() == 1.0  # empty ∪ empty: identical
    assert iou(a, c).item() == pytest.approx(8 / 24)
    assert iou(torch.stack([a, b]), a).tolist() == [1.0, 0.0]


def test_gap_offset_round_trip():
    delta = torch.linspace(-0.49, 0.49, 50)
    assert torch.allclose(decode_gap(encode_gap(delta)), delta, atol=1e-7)
    assert encode_gap(torch.tensor([-0.9, 0.9])).tolist() == [0.0, 1.0]  # clipped outside |Δ| < 0.5
    assert np.allclose(decode_gap(encode_gap(np.array([0.2]), 0.3), 0.3), 0.2)


def test_sampler_points_inside_eroded_mask_and_centre_rule():
    mask = np.zeros((40, 40), bool)
    mask[5:25, 8:30] = True
    mask[25:35, 8:14] = True
    pts = sample_prompts(mask, 8, rng=3)
    eroded = binary_erosion(mask, np.ones((5, 5)))
    assert pts.shape == (8, 2)
    assert all(eroded[int(y), int(x)] for x, y in pts)
    ys, xs = np.nonzero(eroded)
    d = (ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2
    assert d[np.argmin(d)] == pytest.approx((pts[0, 1] - ys.mean()) ** 2 + (pts[0, 0] - xs.mean()) ** 2)
    assert np.array_equal(sample_prompts(mask, 8, rng=3), pts)
    assert not np.array_equal(sample_prompts(mask, 8, rng=4)[1:], pts[1:])


def test_sampler_thin_mask_falls_back_to_the_mask():
    mask = np.zeros((20, 20), bool)
    mask[10, 3:9] = True  # erosion empties it; 6 pixels < 7 points: with replacement
    pts = sample_prompts(mask, 8, rng=0)
    assert all(mask[int(y), int(x)] for x, y in pts)


def test_bad_gt_masks():
    with pytest.raises(ValueError, match="binary"):
        sample_prompts(np.full((5, 5), 0.5))
    with pytest.raises(ValueError, match="foreground"):
        sample_prompts(np.zeros((5, 5)))
    seg = ToySegmenter()
    img = torch.rand(1, 3, 32, 32)
    with pytest.raises(ValueError, match="image's shape"):
        extract_rows({"m": seg}, img, [np.ones((1, 16, 16), bool)])
    with pytest.raises(ValueError, match="binary"):
        extract_rows({"m": seg}, img, [np.full((1, 32, 32), 2)])


def test_extract_rows_skips_empty_and_refuses_all_empty(caplog, tmp_path):
    scenes = make_scenes(2, size=32, prompts_per_scene=2)
    gts = [scenes.gt_masks[0], np.concatenate([scenes.gt_masks[1], np.zeros((1, 32, 32), bool)])]
    with caplog.at_level(logging.WARNING):
        rows = extract_rows({"large": ToySegmenter()}, scenes.pixel_values(), gts, dense_prompt=True)
    assert "skipped 1" in caplog.text
    assert len(rows["iou"]) == 4
    assert torch.equal(rows["iou"], rows["ious"].max(-1).values)
    assert torch.allclose(rows["task_gap"], rows["iou"] - rows["unsupervised_iou"])
    assert (rows["task_gap"] >= 0).all()
    back = load_rows(save_rows(rows, tmp_path / "rows.safetensors"))
    assert all(torch.equal(back[k], rows[k]) for k in rows)
    with pytest.raises(ValueError, match="every GT mask is empty"):
        extract_rows({"large": ToySegmenter()}, scenes.pixel_values(), [np.zeros((1, 32, 32))] * 2)


def test_iou_refuses_soft_and_non_binary_masks():
    gt = torch.zeros(8, 8, dtype=torch.bool)
    gt[:4] = True
    probs = torch.full((8, 8), 0.3)  # below one half everywhere: as a mask it is empty, never the full image
    with pytest.raises(TypeError, match=r"pred must be a binary mask .* got dtype torch.float32; threshold"):
        iou(probs, gt)
    with pytest.raises(TypeError, match="gt must be a binary mask"):
        iou(gt, gt.float())
    with pytest.raises(ValueError, match=r"pred must be a binary mask with values 0 and 1, got values in \[0, 2\]"):
        iou(gt.long() * 2, gt)
    assert iou(probs > 0.5, gt).item() == 0.0 and iou(gt.to(torch.uint8), gt).item() == 1.0
