"""Entropy estimators against closed forms and Jensen's inequality."""

from __future__ import annotations

import math

import pytest
import torch

from usam import mc
from usam.entropy import EPS, bald, binary_entropy, mask_entropy, mixture_entropy, pixel_entropy, probabilities


def _h(p: float) -> float:
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def test_half_is_one_bit():
    p = torch.full((2, 8, 8), 0.5)
    assert torch.allclose(mask_entropy(p), torch.ones(2))
    assert torch.allclose(binary_entropy(p), torch.ones(2, 8, 8))


def test_saturated_pixels_give_h_eps():
    p = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    assert binary_entropy(p)[0, 0].item() == pytest.approx(_h(EPS), rel=2e-3)  # float32 clipping
    assert mask_entropy(p).item() == pytest.approx(_h(EPS), rel=2e-2)  # 1 - 1e-6 rounds in float32


def test_background_only_map_is_finite():
    assert torch.isfinite(mask_entropy(torch.zeros(4, 16, 16))).all()


def test_weighted_entropy_matches_hand_computation():
    p = torch.tensor([[0.9, 0.2], [0.5, 0.0]])
    pc = p.clamp(EPS, 1 - EPS)
    hs = [_h(float(v)) for v in pc.flatten()]
    want = sum(float(a) * b for a, b in zip(pc.flatten(), hs)) / float(pc.sum())
    assert mask_entropy(p).item() == pytest.approx(want, rel=1e-5)


def test_entropy_of_mean_at_least_mean_entropy():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(6, 5, 16, 16, generator=g)  # 6 MC samples
    assert (pixel_entropy(p.mean(0)) >= pixel_entropy(p).mean(0) - 1e-6).all()


def test_bald_non_negative_and_zero_for_identical_samples():
    g = torch.Generator().manual_seed(1)
    p = torch.rand(4, 3, 8, 8, generator=g)
    assert (bald(p) >= -1e-6).all()
    same = p[:1].expand(4, -1, -1, -1)
    assert torch.allclose(bald(same), torch.zeros(3), atol=1e-6)
    w = torch.rand(4, generator=g)
    assert (bald(p, w) >= -1e-6).all()


def test_mixture_weights_match_explicit_mean():
    g = torch.Generator().manual_seed(2)
    p = torch.rand(2, 3, 8, 8, generator=g)
    w = torch.rand(2, 3, generator=g)
    manual = (w / w.sum(-1, keepdim=True))[..., None, None] * p
    assert torch.allclose(mixture_entropy(p, w, dim=1), mask_entropy(manual.sum(1)), atol=1e-6)


def test_h_a_uses_normalised_samscores_and_h_std_picks_the_mask():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 3, 8, 8, generator=g)
    scores = torch.rand(5, 3, generator=g)
    p = torch.sigmoid(logits)
    want = mask_entropy(((scores / scores.sum(-1, keepdim=True))[..., None, None] * p).sum(1))
    assert torch.allclose(mc.h_a(logits, scores), want, atol=1e-6)
    idx = torch.tensor([0, 2, 1, 1, 0])
    assert torch.allclose(mc.h_std(logits, idx), mask_entropy(p[torch.arange(5), idx]))


def test_h_y_is_weighted_over_samples_and_masks():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 3, 8, 8, generator=g)
    scores = torch.rand(4, 3, generator=g)
    w = scores / scores.sum()
    want = mask_entropy((w[..., None, None] * torch.sigmoid(logits)).sum((0, 1)))
    assert mc.h_y(logits, scores).item() == pytest.approx(want.item(), rel=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="logits"):
        mc.h_std(torch.tensor([[[[float("nan")]]] * 3]), torch.tensor([0]))
    with pytest.raises(ValueError, match="weights"):
        mixture_entropy(torch.rand(2, 3, 4, 4), torch.rand(3), dim=1)
    with pytest.raises(ValueError, match="p must have at least 2"):
        mask_entropy(torch.rand(3))


def test_entropies_refuse_logits_and_non_finite_maps():
    logits = torch.randn(2, 8, 8) * 4
    for fn in (mask_entropy, pixel_entropy, binary_entropy):
        with pytest.raises(ValueError, match=r"p must be probabilities in \[0, 1\].*probabilities"):
            fn(logits)
        with pytest.raises(ValueError, match="p must be finite"):
            fn(torch.full((2, 8, 8), float("nan")))
    with pytest.raises(ValueError, match="probs must be probabilities"):
        mixture_entropy(logits[None].expand(3, -1, -1, -1))
    p = torch.sigmoid(logits)
    assert torch.equal(mask_entropy(p), mask_entropy(probabilities(logits)))  # probabilities still pass
