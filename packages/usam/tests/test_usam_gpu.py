"""CUDA: the wrapper keeps SAM's outputs bitwise and its heads on the device, in float32 and bfloat16."""

from __future__ import annotations

import pytest
import torch
from usam_testing import inputs, tiny_sam, tiny_sam2

from usam.config import USAMConfig
from usam.model import UncertainSAM

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make", [tiny_sam, tiny_sam2])
def test_cuda_transparency_and_device(make, dtype):
    m = make().to("cuda", dtype)
    x = {k: (v.to("cuda", dtype) if v.is_floating_point() else v.cuda()) for k, v in inputs().items()}
    with torch.inference_mode():
        ref = m(**x)
        out = UncertainSAM(m, USAMConfig(hidden=16))(**x, return_tokens=True)
    assert torch.equal(out.pred_masks, ref.pred_masks) and torch.equal(out.iou_scores, ref.iou_scores)
    u = out.uncertainty["iou"]
    assert u.device.type == "cuda" and u.dtype == torch.float32 and torch.isfinite(u).all()
    assert out.tokens.device.type == "cuda"
