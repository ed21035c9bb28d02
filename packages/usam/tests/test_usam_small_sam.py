"""The small SamModel that segments (``usam.small_sam``): SAM's initialisation, its loss, bit-reproducible training,
the shipped checkpoint's held-out quality, and the reproduction on its decoder tokens."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from transformers import SamModel

from usam.small_sam import (
    CHECKPOINT,
    RECIPE,
    _losses,
    _stage,
    evaluate_small_sam,
    load_small_sam,
    sam_init_,
    sha256,
    small_sam_config,
    train_small_sam,
)

README = Path(__file__).parents[1] / "README.md"
shipped = pytest.mark.skipif(not CHECKPOINT.is_file(), reason="the checkpoint is not in this checkout")
TINY = dataclasses.replace(RECIPE, steps=3, images_per_batch=2, prompts_per_image=2, warmup=1)


def test_sam_init_gives_a_working_encoder_and_sam_positional_scale():
    torch.manual_seed(0)
    plain = SamModel(small_sam_config())
    torch.manual_seed(0)
    model = sam_init_(SamModel(small_sam_config()))
    w = model.vision_encoder.patch_embed.projection.weight
    fan_in = w[0].numel()
    # PyTorch's default (kaiming-uniform, a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), s.d. 1/sqrt(3 fan_in)
    assert w.std().item() == pytest.approx((3 * fan_in) ** -0.5, rel=0.2)
    assert plain.vision_encoder.patch_embed.projection.weight.abs().max() < 1e-6  # what transformers' init gives here
    pe = model.shared_image_embedding.positional_embedding
    assert pe.std().item() == pytest.approx(1.0, rel=0.35)  # SAM's scale 1.0, not hidden / 2
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        emb = model.get_image_embeddings(x)
        emb_plain = plain.get_image_embeddings(x)
    assert (emb[0] - emb[1]).abs().mean() > 1e-2  # two images, two embeddings
    assert (emb_plain[0] - emb_plain[1]).abs().mean() < 1e-6


def test_size_balanced_loss_punishes_the_empty_mask_on_small_objects():
    gt = torch.zeros(1, 64, 64)
    gt[0, 30:38, 30:38] = 1  # 1.6 % of the image
    empty = torch.full((1, 64, 64), -8.0)
    right = torch.where(gt > 0, 8.0, -8.0)
    no_balance = dataclasses.replace(RECIPE, balanced_weight=0.0)
    assert _losses(empty, gt, RECIPE) - _losses(empty, gt, no_balance) > 3.5  # 0.5 x BCE of the missed foreground
    assert _losses(right, gt, RECIPE).item() < 0.05


def test_curriculum_goes_from_large_to_small_objects():
    assert _stage(RECIPE, 0) == (RECIPE.radius_start, 2)
    end = int(RECIPE.curriculum * RECIPE.steps)
    assert _stage(RECIPE, end) == (RECIPE.radius_end, RECIPE.wholes_end)
    mid = _stage(RECIPE, end // 2)[0]
    assert RECIPE.radius_end[0] < mid[0] < RECIPE.radius_start[0]


def test_training_is_bit_reproducible_from_the_recipe_and_seed():
    a = train_small_sam(TINY, seed=3).model.state_dict()
    b = train_small_sam(TINY, seed=3).model.state_dict()
    c = train_small_sam(TINY, seed=4).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="seed"):
        train_small_sam(TINY, seed=-1)
    with pytest.raises(FileNotFoundError, match="path: .*nothing.safetensors does not exist"):
        load_small_sam(tmp_path / "nothing.safetensors")


@shipped
def test_shipped_checkpoint_matches_readme_and_segments_held_out_scenes():
    digest = sha256(CHECKPOINT)
    assert CHECKPOINT.stat().st_size < 2_000_000
    assert digest in README.read_text(encoding="utf-8")
    ev = evaluate_small_sam(load_small_sam(), n_scenes=60)  # held out: make_scenes seed 10,000, never trained on
    assert ev["best_of_3_miou"] >= 0.6, ev
    assert ev["mask_pairwise_iou"] < 0.9, ev  # the three masks differ (ambiguity)


@shipped
def test_reproduce_judges_on_the_small_sam_tokens_over_seeds(tmp_path):
    from usam.experiments import QUICK
    from usam.reproduce import reproduce

    setup = dataclasses.replace(QUICK, train_prompts=60, test_prompts=24, n_seeds=2)
    res = reproduce(False, tmp_path, setup=setup, seed=2)
    assert res.settings["seeds"] == [4, 5] and res.settings["checkpoint_sha256"] == sha256(CHECKPOINT)
    c1, c2 = res.claims[:2]
    assert c1.short == "C1 task gap vs SamScore" and c2.short == "C2 Pearson USAM vs SamScore"
    for c in (c1, c2):
        assert c.verdict in ("holds", "does not hold", "inconclusive") and c.details["seeds"]["n"] == 2
        assert re.search(r"± .* \[.*\], 2 seeds", c.measured)
    assert "small SamModel" in c1.text


@shipped
@pytest.mark.slow
def test_training_script_rebuilds_the_shipped_checkpoint():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train", Path(__file__).parents[1] / "scripts/train_small_sam.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0


@shipped
@pytest.mark.slow
def test_full_setup_runs_the_prompt_gap_and_ablation_on_the_small_sam(tmp_path):
    from usam.experiments import FULL
    from usam.reproduce import reproduce

    setup = dataclasses.replace(FULL, train_prompts=60, test_prompts=24, n_seeds=2)
    res = reproduce(True, tmp_path, setup=setup)
    shorts = [c.short for c in res.claims]
    assert "C4 prompt gap vs H_Std" in shorts and "token ablation (task relAUC)" in shorts
    c4 = res.claims[shorts.index("C4 prompt gap vs H_Std")]
    assert c4.details["seeds"]["n"] == 2 and c4.verdict in ("holds", "does not hold", "inconclusive")
