"""Row extraction split over two gloo processes equals the single-process rows."""

from __future__ import annotations

import numpy as np
import torch
from usam_testing import IMAGE, tiny_sam

from icml25_shared.distributed import launch
from usam.targets import extract_rows


def _data():
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.normal(size=(16, 3, IMAGE, IMAGE)).astype(np.float32))
    masks = []
    for i in range(16):
        m = np.zeros((1 + i % 2, IMAGE, IMAGE), bool)
        for k in range(len(m)):
            y, x = rng.integers(8, 48, 2)
            m[k, y : y + 12, x : x + 10] = True
        masks.append(m)
    return images, masks


def _rank(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    images, masks = _data()
    return extract_rows({"large": tiny_sam(0), "tiny": tiny_sam(1)}, images, masks, token_model="large")


def test_two_processes_equal_one():
    images, masks = _data()
    single = extract_rows({"large": tiny_sam(0), "tiny": tiny_sam(1)}, images, masks, token_model="large")
    out = launch(_rank, 2)
    assert len(single["iou"]) == 24
    for rows in out:
        assert set(rows) == set(single)
        for k in single:
            assert torch.allclose(rows[k].float(), single[k].float(), atol=1e-6), k
