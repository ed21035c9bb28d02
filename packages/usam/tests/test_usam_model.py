"""UncertainSAM on tiny random-init SamModel / Sam2Model: transparency, token pins, layouts, save/load, bad input."""

from __future__ import annotations

import pytest
import torch
from usam_testing import D, inputs, tiny_sam, tiny_sam2

from usam import mc
from usam.config import USAMConfig
from usam.heads import USAMHead
from usam.model import UncertainSAM, token_layout


@pytest.fixture(scope="module")
def sam():
    return tiny_sam()


@pytest.fixture(scope="module")
def sam2():
    return tiny_sam2()


@pytest.fixture(params=["sam", "sam2"])
def model(request, sam, sam2):
    return sam if request.param == "sam" else sam2


def _captured_upscaled(model, x):
    """The decoder's upscaled embedding, captured independently of the wrapper (second GELU call)."""
    seen = []
    h = model.mask_decoder.upscale_conv2.register_forward_hook(lambda m, a, o: seen.append(o))
    with torch.no_grad():
        model(**x)
    h.remove()
    return seen[-1]


def test_outputs_are_bitwise_unchanged(model):
    x = inputs()
    with torch.no_grad():
        ref = model(**x)
        out = UncertainSAM(model, USAMConfig(hidden=16))(**x)
    assert torch.equal(out.pred_masks, ref.pred_masks) and torch.equal(out.iou_scores, ref.iou_scores)
    assert out.uncertainty["iou"].shape == (2, 3, 3)
    assert set(out.uncertainty) == {"iou", "task_gap", "model_gap", "prompt_gap"}


def test_iou_token_pin(model):
    x = inputs(seed=1)
    with torch.no_grad():
        out = UncertainSAM(model, USAMConfig(hidden=16))(**x, return_tokens=True)
        scores = model.mask_decoder.iou_prediction_head(out.tokens[..., 0, :D])  # (B, P, 4): before the slice
    assert torch.equal(scores[..., 1:], out.iou_scores)
    assert torch.equal(out.tokens[..., 0, :D], out.tokens[..., 2, :D])  # one IoU token for the three masks


def test_mask_token_pin_and_alignment(sam):
    """Hypernetwork MLP of mask token k+1 times the upscaled embedding reproduces returned mask k (aligned)."""
    x = inputs(seed=2)
    dec = sam.mask_decoder
    up = dec.activation(_captured_upscaled(sam, x))  # (B*P, c, h, w)
    b, p = x["input_points"].shape[:2]
    up = up.reshape(b, p, up.shape[1], -1)
    with torch.no_grad():
        aligned = UncertainSAM(sam, USAMConfig(hidden=16))(**x, return_tokens=True)
        official = UncertainSAM(sam, USAMConfig(hidden=16, token_alignment="official"))(**x, return_tokens=True)
        for k in range(3):
            hyper = dec.output_hypernetworks_mlps[k + 1](aligned.tokens[:, :, k, D:])
            mask = (hyper[:, :, None] @ up).reshape(aligned.pred_masks[:, :, k].shape)
            assert torch.allclose(mask, aligned.pred_masks[:, :, k], atol=1e-5)
    assert torch.equal(official.tokens[:, :, 1, D:], aligned.tokens[:, :, 0, D:])  # the off-by-one
    assert not torch.equal(official.tokens[..., D:], aligned.tokens[..., D:])


def test_sam2_layout_and_mask_token_pin(sam2):
    assert token_layout(sam2) == (1, 2)
    assert token_layout(tiny_sam()) == (0, 1)
    x = inputs(seed=3)
    seen = []
    h = sam2.mask_decoder.transformer.register_forward_hook(lambda m, a, o: seen.append(o[0]))
    with torch.no_grad():
        out = UncertainSAM(sam2, USAMConfig(hidden=16))(**x, return_tokens=True)
    h.remove()
    q = seen[-1]
    assert torch.equal(out.tokens[..., 0, :D], q[:, :, 1])  # IoU token at index 1 (index 0: object score)
    assert torch.equal(out.tokens[:, :, 0, D:], q[:, :, 3])  # mask 0 of the multimask output: mask token 1


@pytest.mark.parametrize("stable", [True, False])
def test_sam2_single_mask_follows_the_dynamic_choice(stable):
    # threshold 0 → token 0 is always stable; threshold 1.01 → never: SAM2 returns its best multimask output
    m = tiny_sam2(dynamic_multimask_stability_thresh=0.0 if stable else 1.01)
    x = inputs(seed=4)
    with torch.no_grad():
        out = UncertainSAM(m, USAMConfig(hidden=16))(**x, multimask_output=False, return_tokens=True)
        multi = UncertainSAM(m, USAMConfig(hidden=16))(**x, return_tokens=True)
    assert out.pred_masks.shape[2] == 1 and out.uncertainty["iou"].shape == (2, 3, 1)
    if stable:
        assert not any(torch.equal(out.tokens[..., 0, :], multi.tokens[..., k, :]) for k in range(3))
    else:
        best = multi.iou_scores.argmax(-1)
        want = multi.tokens.gather(2, best[..., None, None].expand(-1, -1, 1, 2 * D))
        assert torch.equal(out.tokens, want)


def test_single_mask_sam_uses_token_zero(sam):
    x = inputs(seed=5)
    with torch.no_grad():
        out = UncertainSAM(sam, USAMConfig(hidden=16))(**x, multimask_output=False, return_tokens=True)
        hyper = sam.mask_decoder.output_hypernetworks_mlps[0](out.tokens[:, :, 0, D:])
    up = sam.mask_decoder.activation(_captured_upscaled(sam, {**x, "multimask_output": False}))
    mask = (hyper[:, :, None] @ up.reshape(2, 3, up.shape[1], -1)).reshape(out.pred_masks[:, :, 0].shape)
    assert torch.allclose(mask, out.pred_masks[:, :, 0], atol=1e-5)


def test_heads_scores_and_gap_offset(sam):
    torch.manual_seed(0)
    usam = UncertainSAM(sam, USAMConfig(heads=("iou", "task_gap"), hidden=16))
    head = USAMHead(2 * D, 16)
    usam.set_head("task_gap", head)
    x = inputs(seed=6)
    with torch.no_grad(), torch.inference_mode():
        out = usam(**x, return_tokens=True)
        want = head(out.tokens) - 0.5
    assert torch.allclose(out.uncertainty["task_gap"], want, atol=1e-6)


def test_difference_gaps_and_token_inputs(sam):
    cfg = USAMConfig(heads=("iou", "unsupervised_iou", "task_gap"), hidden=16, gap_estimate="difference")
    usam = UncertainSAM(sam, cfg)
    assert usam.heads.names == ("iou", "unsupervised_iou")
    with torch.no_grad():
        out = usam(**inputs())
    u = out.uncertainty
    assert torch.allclose(u["task_gap"], u["iou"] - u["unsupervised_iou"])
    for tok, width in (("iou", D), ("mask", D), ("both", 2 * D)):
        assert UncertainSAM(sam, USAMConfig(hidden=8, token_input=tok)).heads.in_features == width


def test_save_and_load_round_trip(sam, tmp_path):
    torch.manual_seed(3)
    usam = UncertainSAM(sam, USAMConfig(heads=("iou", "model_gap"), hidden=16, token_alignment="official"))
    usam.save_pretrained(tmp_path)
    back = UncertainSAM.from_pretrained(sam, tmp_path)
    assert back.config == usam.config
    x = inputs(seed=7)
    with torch.no_grad():
        a, b = usam(**x), back(**x)
    assert all(torch.equal(a.uncertainty[k], b.uncertainty[k]) for k in a.uncertainty)


def test_load_official_heads_sets_official_tokens(sam, tmp_path):
    torch.manual_seed(4)
    head = USAMHead(2 * D, 24)
    (tmp_path / "task_gap").mkdir()
    torch.save(head.state_dict(), tmp_path / "task_gap" / "model.pth")
    usam = UncertainSAM(sam, USAMConfig(hidden=16)).load_official_heads(tmp_path)
    assert usam.config.token_alignment == "official" and usam.config.heads == ("task_gap",)
    x = inputs(seed=8)
    with torch.no_grad():
        out = usam(**x, return_tokens=True)
    assert torch.allclose(out.uncertainty["task_gap"], head(out.tokens) - 0.5, atol=1e-6)


def test_bf16_model(sam):
    m = tiny_sam().to(torch.bfloat16)
    x = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in inputs().items()}
    with torch.no_grad():
        ref = m(**x)
        out = UncertainSAM(m, USAMConfig(hidden=16))(**x)
    assert torch.equal(out.pred_masks, ref.pred_masks)
    assert out.uncertainty["iou"].dtype == torch.float32 and torch.isfinite(out.uncertainty["iou"]).all()


def test_prompt_maps_reuse_the_image_embedding(sam):
    x = inputs(b=1, p=1, seed=9)
    pts = torch.tensor([[10.0, 12.0], [40.0, 33.0], [5.0, 60.0]])
    logits, scores = mc.prompt_maps(sam, x["pixel_values"], pts)
    with torch.no_grad():
        ref = sam(pixel_values=x["pixel_values"], input_points=pts[None, :, None])
    assert torch.allclose(logits, ref.pred_masks[0], atol=1e-5) and torch.allclose(scores, ref.iou_scores[0], atol=1e-6)
    with pytest.raises(ValueError, match="points must lie inside the 64x64"):
        mc.prompt_maps(sam, x["pixel_values"], torch.tensor([[70.0, 3.0]]))


def test_bad_input(sam):
    with pytest.raises(TypeError, match="model must be a transformers SamModel"):
        UncertainSAM(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="heads must be one of"):
        USAMConfig(heads=("iou", "confidence"))
    with pytest.raises(ValueError, match="heads is missing"):
        USAMConfig(heads=("task_gap",), gap_estimate="difference")
    with pytest.raises(ValueError, match="token_alignment"):
        USAMConfig(token_alignment="shifted")
    usam = UncertainSAM(sam, USAMConfig(hidden=16))
    with pytest.raises(ValueError, match="head must be one of"):
        usam.set_head("confidence", USAMHead(2 * D, 16))
    from usam.heads import USAMHeads

    with pytest.raises(ValueError, match=f"expected {2 * D}, got {D}"):
        UncertainSAM(sam, USAMConfig(hidden=16), USAMHeads(USAMConfig().heads, D, 16))
    x = inputs()
    with pytest.raises(TypeError, match="pixel_values must have the model's dtype torch.float32, got torch.float64"):
        usam(**{**x, "pixel_values": x["pixel_values"].double()})
    with torch.no_grad():  # int32 labels are accepted as SamModel accepts them
        out = usam(**{**x, "input_labels": x["input_labels"].int()})
    assert out.uncertainty["iou"].shape == (2, 3, 3)
    with pytest.raises(ValueError, match="tokens must be finite"):
        usam.scores(torch.full((1, 1, 3, 2 * D), float("nan")))


def test_extract_rows_on_a_raw_sam_model_leaves_no_hooks():
    from usam.targets import extract_rows

    m = tiny_sam()
    gt = torch.zeros(1, 64, 64, dtype=torch.bool)
    gt[0, 20:40, 10:30] = True
    rows = extract_rows({"large": m}, inputs(b=1)["pixel_values"], [gt])
    assert rows["tokens"].shape == (1, 3, 2 * D) and torch.equal(rows["iou"], rows["ious"].max(-1).values)
    assert not m.mask_decoder.transformer._forward_hooks and not m.mask_decoder.activation._forward_hooks


def test_sam_processor_outputs_pass_through(sam):
    import numpy as np
    from transformers import SamImageProcessor, SamProcessor

    proc = SamProcessor(SamImageProcessor(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64}))
    img = (np.random.default_rng(0).random((48, 40, 3)) * 255).astype(np.uint8)
    points = [[[[10, 20]], [[30, 5]]], [[[1, 2]], [[3, 4]]]]
    x = proc(images=[img, img], input_points=points, return_tensors="pt")  # extra keys, float64 points
    with torch.no_grad():
        ref = sam(**x)
        out = UncertainSAM(sam, USAMConfig(hidden=8))(**x)
    assert torch.equal(out.pred_masks, ref.pred_masks) and out.uncertainty["iou"].shape == (2, 2, 3)


def test_output_follows_model_output_and_return_dict_false(sam):
    from transformers.utils import ModelOutput

    usam = UncertainSAM(sam, USAMConfig(hidden=8))
    x = inputs()
    with torch.no_grad():
        ref = sam(**x)
        out = usam(**x, return_tokens=True)
        tup = usam(**x, return_dict=False)
        ref_tup = sam(**x, return_dict=False)
    assert isinstance(out, ModelOutput)
    assert out[0] is out.pred_masks and out["iou_scores"] is out.iou_scores
    assert list(out.keys()) == ["pred_masks", "iou_scores", "uncertainty", "tokens", "sam_output"]
    assert isinstance(tup, tuple) and len(tup) == 4  # tokens not asked for: left out, as ModelOutput leaves None
    assert torch.equal(tup[0], ref.pred_masks) and torch.equal(tup[1], ref.iou_scores)
    assert torch.equal(tup[2]["iou"], out.uncertainty["iou"])
    assert isinstance(tup[3], tuple) and len(tup[3]) == len(ref_tup)
    assert all(torch.equal(a, b) for a, b in zip(tup[3], ref_tup) if isinstance(a, torch.Tensor))
    assert len(out.to_tuple()) == 5


def test_wrapper_has_device_and_dtype_like_pretrained_model(sam):
    usam = UncertainSAM(sam, USAMConfig(hidden=8))
    assert usam.device == sam.device == torch.device("cpu") and usam.dtype == sam.dtype == torch.float32


def test_non_finite_inputs_are_named():
    usam = UncertainSAM(tiny_sam(), USAMConfig(hidden=8))
    x = inputs()
    x["pixel_values"][0, 0, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="pixel_values must be finite"):
        usam(**x)
    x = inputs()
    x["input_points"][1, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="input_points must be finite"):
        usam(**x)
    broken = tiny_sam()
    with torch.no_grad():
        broken.mask_decoder.iou_token.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="decoder tokens are not finite .* weights finite"):
        UncertainSAM(broken, USAMConfig(hidden=8))(**inputs())
