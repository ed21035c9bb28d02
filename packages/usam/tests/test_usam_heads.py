"""USAM heads: learning, fused vs loop, save/load, the released state-dict format, training data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from usam.config import USAMConfig
from usam.heads import USAMHead, USAMHeads
from usam.model import load_official_heads
from usam.train import fit_head, training_data


def test_head_fits_a_known_function():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 8, generator=g)
    y = torch.sigmoid(x[:, 0] - 0.5 * x[:, 1] * x[:, 2])
    cfg = USAMConfig(
        hidden=64, optimizer="adamw", lr=1e-2, epochs=50, batch_size=64, val_fraction=0.2, full_train=False
    )
    fit = fit_head(x, y, cfg)
    assert fit.val["r2"] > 0.9
    xt = torch.randn(300, 8, generator=g)
    yt = torch.sigmoid(xt[:, 0] - 0.5 * xt[:, 1] * xt[:, 2])
    with torch.no_grad():
        pred = fit.head(xt)
    assert 1 - ((pred - yt) ** 2).mean() / yt.var() > 0.9


def test_fused_heads_equal_the_loop():
    torch.manual_seed(0)
    heads = {n: USAMHead(32, 48) for n in ("iou", "task_gap", "model_gap")}
    fused = USAMHeads.from_heads(heads)
    x = torch.randn(2, 3, 3, 32)
    loop = torch.stack([h(x) for h in heads.values()], -1)
    assert torch.allclose(fused(x), loop, atol=1e-6)
    back = fused.heads()
    assert all(torch.equal(back[n].layers[0].weight, heads[n].layers[0].weight) for n in heads)
    assert fused(x.bfloat16().float()).shape == (2, 3, 3, 3)


def test_official_format_state_dict_loads(tmp_path):
    torch.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1), nn.Sigmoid())
    state = {f"layers.{i}.{p}": getattr(mlp[2 * i], p).detach().clone() for i in range(3) for p in ("weight", "bias")}
    for name in ("task_gap", "iou_unsupervised"):
        (tmp_path / name).mkdir()
        torch.save(state, tmp_path / name / "model.pth")
    heads = load_official_heads(tmp_path, expected_in=512)
    assert set(heads) == {"task_gap", "unsupervised_iou"}
    x = torch.randn(7, 512)
    assert torch.allclose(heads["task_gap"](x), mlp(x)[:, 0], atol=1e-6)


def test_official_heads_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.pth"):
        load_official_heads(tmp_path)
    (tmp_path / "task_gap").mkdir()
    torch.save({"layers.0.weight": torch.zeros(512, 1024)}, tmp_path / "task_gap" / "model.pth")
    with pytest.raises(ValueError, match=r"task_gap.model\.pth.*missing"):
        load_official_heads(tmp_path)
    with pytest.raises(FileNotFoundError, match="prompt_gap"):
        load_official_heads(tmp_path, ["prompt_gap"])
    head = USAMHead(1024, 512)
    torch.save(head.state_dict(), tmp_path / "task_gap" / "model.pth")
    with pytest.raises(ValueError, match="expected 512, got 1024"):
        load_official_heads(tmp_path, expected_in=512)


def test_training_data_best_and_all_tokens():
    g = torch.Generator().manual_seed(0)
    rows = {
        "tokens": torch.randn(5, 3, 8, generator=g),
        "best": torch.tensor([0, 2, 1, 1, 0]),
        "iou": torch.rand(5, generator=g),
        "task_gap": torch.tensor([0.1, -0.2, 0.7, 0.0, 0.3]),
    }
    x, y = training_data(rows, "iou", USAMConfig())
    assert torch.equal(x[1], rows["tokens"][1, 2]) and torch.equal(y, rows["iou"])
    x, y = training_data(rows, "task_gap", USAMConfig(train_tokens="all", token_input="mask"))
    assert x.shape == (15, 4) and torch.equal(x[5], rows["tokens"][1, 2, 4:])
    assert torch.allclose(y[::3], torch.tensor([0.6, 0.3, 1.0, 0.5, 0.8]))  # offset 0.5, clipped
    x, _ = training_data(rows, "iou", USAMConfig(token_input="iou"))
    assert torch.equal(x[2], rows["tokens"][2, 1, :4])


def test_fit_head_bad_input():
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        fit_head(torch.randn(4, 3), torch.tensor([0.1, 0.2, -0.3, 0.4]))
    with pytest.raises(ValueError, match="x must be finite"):
        fit_head(torch.tensor([[np.nan, 1.0]]), torch.tensor([0.5]))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        fit_head(np.zeros((4, 3)), torch.zeros(4))
