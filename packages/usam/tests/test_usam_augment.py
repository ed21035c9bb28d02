"""Augmentations of H_T against Pillow and scipy directly, and the H_T map runner."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from usam import mc
from usam.augment import AUGMENTATIONS, augment, gaussian_blur, gaussian_noise, jpeg
from usam.toy import ToySegmenter


@pytest.fixture
def image():
    rng = np.random.default_rng(0)
    return (rng.random((32, 32, 3)) * 255).astype(np.uint8)


def test_jpeg_equals_pillow_round_trip(image):
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=30)
    want = np.asarray(Image.open(buf).convert("RGB"))
    assert np.array_equal(jpeg(image, 30), want)
    assert np.abs(jpeg(image, 10).astype(int) - image).mean() > np.abs(jpeg(image, 30).astype(int) - image).mean()


def test_noise_variance_and_blur_preserve_constants(image):
    flat = np.full((64, 64, 3), 128, np.uint8)
    noisy = gaussian_noise(flat, variance=400.0, seed=1).astype(float)
    assert noisy.std() == pytest.approx(20.0, rel=0.05)
    assert np.array_equal(gaussian_blur(flat), flat)
    assert gaussian_blur(image).std() < image.std()
    f = image.astype(np.float32) / 255
    assert gaussian_blur(f).dtype == np.float32


def test_augment_all_five_and_bad_input(image):
    out = augment(image)
    assert len(out) == len(AUGMENTATIONS) == 5 and np.array_equal(out[0], image)
    with pytest.raises(ValueError, match="names"):
        augment(image, ("rotate",))
    with pytest.raises(ValueError, match="kernel must be odd"):
        gaussian_blur(image, 4)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        jpeg(image[..., :2])


def test_augmentation_maps_batch_equals_one_by_one():
    rng = np.random.default_rng(1)
    img = rng.random((32, 32, 3)).astype(np.float32)
    aug = torch.from_numpy(np.stack([f(img) for f in AUGMENTATIONS.values()]).transpose(0, 3, 1, 2))
    seg = ToySegmenter()
    logits, scores = mc.augmentation_maps(seg, aug, torch.tensor([10.0, 20.0]))
    assert logits.shape == (5, 3, 32, 32) and scores.shape == (5, 3)
    one = seg(aug[2:3], torch.tensor([[[[10.0, 20.0]]]]))
    assert torch.equal(logits[2], one.pred_masks[0, 0])
    with pytest.raises(ValueError, match="point must lie inside"):
        mc.augmentation_maps(seg, aug, torch.tensor([40.0, 2.0]))
