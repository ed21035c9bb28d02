"""The toy setting: nested hypotheses, task priors, determinism, and the reproduction end to end (small)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from usam.experiments import QUICK
from usam.metrics import relative_auc
from usam.targets import iou
from usam.toy import PRIORS, ToySegmenter, make_scenes


def _constructed_scene():
    """A whole of two touching reddish objects, the first with a part, on a far (cyan) background; colour distances
    as in make_scenes: part–object 0.18, part–sibling 0.27, whole–background > 0.6."""
    img = np.full((64, 64, 3), [0.2, 0.8, 0.8], np.float32)
    yy, xx = np.mgrid[:64, :64]
    obj1 = (np.abs(yy - 32) <= 10) & (np.abs(xx - 20) <= 10)
    obj2 = (np.abs(yy - 32) <= 8) & (xx > 30) & (xx <= 46)
    part = ((yy - 32) ** 2 + (xx - 20) ** 2) <= 25
    img[obj1] = [0.8, 0.2, 0.2]
    img[obj2] = [0.62, 0.3, 0.2]
    img[part] = [0.8, 0.2, 0.38]
    return img, part, obj1, obj1 | obj2


def test_hypotheses_are_nested_part_object_whole():
    img, part, obj, whole = _constructed_scene()
    px = torch.from_numpy(img.transpose(2, 0, 1))[None]
    out = ToySegmenter()(px, torch.tensor([[[[20.0, 32.0]]]]), return_tokens=True)
    masks = out.pred_masks[0, 0] > 0
    assert (masks[0] <= masks[1]).all() and (masks[1] <= masks[2]).all()
    gts = torch.from_numpy(np.stack([part, obj, whole]))
    assert (iou(masks, gts) > 0.8).all(), iou(masks, gts)
    assert out.tokens.shape == (1, 1, 3, 48)


def test_target_prior_frequencies():
    scenes = make_scenes(150, domain="target", seed=0)
    levels = np.concatenate(scenes.levels)
    n = len(levels)
    for lv, p in enumerate(PRIORS["target"]):
        se = np.sqrt(p * (1 - p) / n)
        assert abs((levels == lv).mean() - p) < 3 * se
    assert scenes.images.shape == (150, 64, 64, 3) and scenes.images.min() >= 0 and scenes.images.max() <= 1


def test_scenes_are_seeded_and_levels_match_hierarchy():
    a = make_scenes(3, seed=5)
    b = make_scenes(3, seed=5)
    assert np.array_equal(a.images, b.images) and all(np.array_equal(x, y) for x, y in zip(a.gt_masks, b.gt_masks))
    assert not np.array_equal(a.images, make_scenes(3, seed=6).images)
    for gts, levels, wholes in zip(a.gt_masks, a.levels, a.hierarchy):
        for gt, lv in zip(gts, levels):
            objects = [o for w in wholes for o in w["objects"]]
            pool = (
                [o["part"] for o in objects if o["part"] is not None],
                [o["mask"] for o in objects],
                [w["mask"] for w in wholes],
            )[lv]
            assert any(np.array_equal(gt, m) for m in pool)


def test_tiny_model_is_coarser():
    scenes = make_scenes(4, seed=1)
    px = scenes.pixel_values()
    pts = torch.tensor([[[[30.0, 30.0]]]]).expand(4, 1, 1, 2)
    large, tiny = ToySegmenter()(px, pts), ToySegmenter(downsample=2)(px, pts)
    assert tiny.pred_masks.shape == large.pred_masks.shape
    assert torch.equal(tiny.pred_masks[..., ::2, :], tiny.pred_masks[..., 1::2, :])  # 2x nearest up-sampling


@pytest.mark.slow
def test_reproduce_small_on_the_toy_fixture(tmp_path):
    from usam.reproduce import reproduce

    setup = replace(
        QUICK, model="toy", source_prompts=80, train_prompts=120, test_prompts=40, n_seeds=2, tiny=True, mc=True
    )
    res = reproduce(False, tmp_path, setup=setup, seed=1)
    assert [c.short for c in res.claims][:2] == ["C1 task gap vs SamScore", "C2 Pearson USAM vs SamScore"]
    assert res.settings["seeds"] == [2, 3]
    assert all(c.details["seeds"]["n"] == 2 for c in res.claims[:2])
    assert (tmp_path / "correction_curves.png").exists()


def test_undefined_relative_auc_is_nan_not_a_crash():
    """A refinement that never changes the IoU (coinciding masks: no task gap) gives NaN; bad input still raises."""
    from usam.experiments import _relative_auc_or_nan

    base = np.linspace(0.2, 0.8, 10)
    assert np.isnan(_relative_auc_or_nan(base, base.copy(), np.arange(10.0)))
    refined = base + 0.1 * (np.arange(10) % 2)
    assert _relative_auc_or_nan(base, refined, np.arange(10.0)) == relative_auc(base, refined, np.arange(10.0))
    with pytest.raises(ValueError, match="length"):
        _relative_auc_or_nan(base, base[:5], np.arange(10.0))
