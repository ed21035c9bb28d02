"""Bad input to the public helpers: a clear error naming the argument and the expectation (or the documented
answer for numpy input), never a broadcast that silently computes something else or an error from inside torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from usam import mc
from usam.augment import augment
from usam.config import USAMConfig
from usam.entropy import mask_entropy
from usam.heads import USAMHead, USAMHeads
from usam.targets import decode_gap, encode_gap, iou
from usam.train import regression_metrics


def test_regression_metrics_refuses_shapes_that_would_broadcast():
    g = torch.Generator().manual_seed(0)
    pred, target = torch.rand(6, generator=g), torch.rand(6, generator=g)
    m = regression_metrics(pred, target)
    assert m["mse"] == pytest.approx(float(((pred - target) ** 2).mean()))
    # (N, 1) against (N,) used to be averaged over all N × N pairs
    with pytest.raises(ValueError, match=r"target must have shape \(6, 1\)"):
        regression_metrics(pred[:, None], target)
    with pytest.raises(ValueError, match="pred must not be empty"):
        regression_metrics(pred[:0], target[:0])  # used to return NaN for every metric
    with pytest.raises(TypeError, match="pred must be a torch.Tensor"):
        regression_metrics(pred.numpy(), target.numpy())
    with pytest.raises(ValueError, match="target must be finite"):
        regression_metrics(pred, target * float("nan"))


def test_decode_gap_takes_what_encode_gap_takes():
    for delta in ([-0.2, 0.3], np.array([-0.2, 0.3]), 0.3):
        np.testing.assert_allclose(decode_gap(encode_gap(delta)), delta, atol=1e-12)
    assert isinstance(decode_gap(torch.tensor([0.7])), torch.Tensor)
    np.testing.assert_allclose(decode_gap([0.7, 0.2]), [0.2, -0.3])  # a list used to raise a TypeError from '-'


def test_iou_names_shapes_that_do_not_broadcast():
    a = torch.ones(3, 4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"pred and gt must broadcast .* \(3, 4, 4\) and \(5, 5\)"):
        iou(a, torch.ones(5, 5, dtype=torch.bool))
    assert iou(a, torch.ones(4, 4, dtype=torch.bool)).tolist() == [1.0, 1.0, 1.0]


def test_mask_index_must_pick_one_of_the_masks_per_sample():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 8, 8, generator=g)
    p = torch.sigmoid(logits)
    idx = torch.tensor([2, 0])
    assert torch.allclose(mc.h_std(logits, idx), mask_entropy(p[torch.arange(2), idx]))
    # one index for two samples used to return one entropy (the first sample's), silently
    with pytest.raises(ValueError, match=r"index must have shape \(2,\)"):
        mc.h_std(logits, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"index must lie in \[0, 2\]"):
        mc.h_std(logits, torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="index must have an integer dtype"):
        mc.h_std(logits, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"best must have shape \(2,\)"):
        mc.h_mc(logits, torch.tensor([0, 1, 2]))


def test_model_maps_checks_its_models_and_point():
    with pytest.raises(ValueError, match="models must be a non-empty sequence"):
        mc.model_maps([], torch.zeros(1, 3, 16, 16), torch.tensor([3.0, 3.0]))
    with pytest.raises(ValueError, match="point must lie inside the 16x16 image"):
        mc.model_maps([lambda **kw: None], torch.zeros(1, 3, 16, 16), torch.tensor([30.0, 3.0]))


def test_augment_refuses_a_bare_string():
    image = np.zeros((8, 8, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"got the string 'blur' \(use \('blur',\)\)"):
        augment(image, "blur")  # used to iterate its letters and complain about 'b'
    assert len(augment(image, ("blur",))) == 1


def test_config_extra_must_be_a_dict_and_from_dict_names_bad_keys():
    with pytest.raises(ValueError, match="extra must be a dict"):
        USAMConfig(extra=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown keys \['hiden'\]"):
        USAMConfig.from_dict({"heads": ["iou"], "hiden": 8})
    with pytest.raises(ValueError, match="heads must be a tuple of target names, got 'iou'"):
        USAMConfig.from_dict({"heads": "iou"})  # used to split it into 'i', 'o', 'u'
    cfg = USAMConfig(heads=("iou",), hidden=8, extra={"checkpoint": "x"})
    assert USAMConfig.from_dict(cfg.to_dict()) == cfg


def test_heads_index_and_dtype():
    torch.manual_seed(0)
    heads = USAMHeads(("iou", "task_gap"), 6, 4)
    assert heads.index(np.int64(1)) == 1 == heads.index("task_gap")
    with pytest.raises(ValueError, match=r"head index must be in \[0, 2\)"):
        heads.index(np.int64(2))
    x = torch.randn(3, 6, dtype=torch.float64)
    with pytest.raises(TypeError, match="tokens must have the heads' dtype torch.float32, got torch.float64"):
        heads(x)
    with pytest.raises(TypeError, match="tokens must have the head's dtype torch.float32, got torch.float64"):
        heads.head("iou")(x)
    # cast to the tokens' dtype, both forms agree with the float32 heads
    torch.testing.assert_close(heads.double()(x).float(), heads.float()(x.float()))
    assert isinstance(heads.head(0), USAMHead)


def test_training_data_names_a_missing_column():
    from usam.train import training_data

    rows = {"tokens": torch.randn(4, 3, 8), "best": torch.tensor([0, 1, 2, 0]), "iou": torch.rand(4)}
    x, y = training_data(rows, "iou", USAMConfig())
    assert x.shape == (4, 8) and torch.equal(x[1], rows["tokens"][1, 1])
    with pytest.raises(ValueError, match="no column best in the rows"):
        training_data({k: v for k, v in rows.items() if k != "best"}, "iou", USAMConfig())  # was a KeyError


def test_extract_rows_names_a_negative_seed():
    from usam.targets import extract_rows

    def never(**kw):  # the checks come before any model call
        raise AssertionError("called")

    images, masks = torch.zeros(1, 3, 8, 8), [np.ones((1, 8, 8), dtype=bool)]
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -1"):
        extract_rows({"m": never}, images, masks, seed=-1)  # was numpy's "expected non-negative integer"
    with pytest.raises(TypeError, match="entropies"):
        extract_rows({"m": never}, images, masks, entropies="yes")
