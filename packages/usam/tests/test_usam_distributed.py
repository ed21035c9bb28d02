"""Row extraction split over two gloo processes (accelerate's ``split_between_processes`` and plain
``torch.distributed``) equals the single-process rows, each process extracting half of the images."""

from __future__ import annotations

import numpy as np
import pytest
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


def _rank_split(rank: int, world_size: int, split: str) -> tuple[dict[str, torch.Tensor], int, int]:
    from accelerate import PartialState

    images, masks = _data()
    tiny = tiny_sam(1)
    seen: list[int] = []
    hook = tiny.vision_encoder.register_forward_hook(lambda m, a, o: seen.append(1))
    rows = extract_rows({"large": tiny_sam(0), "tiny": tiny}, images, masks, token_model="large", split=split)
    hook.remove()
    procs = PartialState().num_processes if split == "accelerate" else world_size
    return rows, len(seen), procs


@pytest.mark.parametrize("split", ["accelerate", "torch"])
def test_split_between_two_processes(split):
    if split == "accelerate":
        pytest.importorskip("accelerate", reason="the distributed extra (accelerate) is not installed")
    images, masks = _data()
    single = extract_rows({"large": tiny_sam(0), "tiny": tiny_sam(1)}, images, masks, token_model="large")
    out = launch(_rank_split, 2, (split,))
    assert len(single["iou"]) == 24
    for rows, images_seen, procs in out:
        assert procs == 2
        assert images_seen == 8  # each process runs the Tiny model on its half of the 16 images only
        assert set(rows) == set(single)
        for k in single:
            assert torch.allclose(rows[k].float(), single[k].float(), atol=1e-6), k


def test_accelerate_state_inherited_from_the_parent_is_rebuilt():
    """A forked worker inherits the parent's accelerate state (a one-process world); the split still halves."""
    accelerate = pytest.importorskip("accelerate", reason="the distributed extra (accelerate) is not installed")
    threads = torch.get_num_threads()
    before = dict(accelerate.PartialState._shared_state)
    try:
        accelerate.PartialState._shared_state.clear()
        assert accelerate.PartialState(cpu=True).num_processes == 1  # the parent's state, inherited by fork
        torch.set_num_threads(threads)
        images, masks = _data()
        single = extract_rows({"large": tiny_sam(0), "tiny": tiny_sam(1)}, images, masks, token_model="large")
        out = launch(_rank_split, 2, ("accelerate",))
    finally:
        accelerate.PartialState._shared_state.clear()
        accelerate.PartialState._shared_state.update(before)
        torch.set_num_threads(threads)
    for rows, images_seen, procs in out:
        assert (procs, images_seen) == (2, 8)
        for k in single:
            assert torch.allclose(rows[k].float(), single[k].float(), atol=1e-6), k


def test_split_choice_checked():
    images, masks = _data()
    with pytest.raises(ValueError, match="split"):
        extract_rows({"m": tiny_sam(0)}, images[:1], masks[:1], split="mpi")
