"""Partitions, the digits split and the model zoo's parameter counts."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from fsl_sage import (
    dirichlet_partition,
    iid_partition,
    load_digits_split,
    nbytes,
    resnet18_split,
    split_module,
)
from fsl_sage.metrics import gradient_agreement
from fsl_sage.models import check_split_shapes


def _tv_to_global(parts, y):
    glob = np.bincount(y, minlength=10) / len(y)
    return max(0.5 * np.abs(np.bincount(y[p], minlength=10) / len(p) - glob).sum() for p in parts)


def test_dirichlet_partition_disjoint_equal_and_uniform_as_alpha_grows():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 3000)
    tvs = []
    for alpha in (0.1, 1.0, 100.0, 1e4):
        parts = dirichlet_partition(y, 5, alpha, seed=1)
        allidx = np.concatenate(parts)
        assert len(np.unique(allidx)) == len(allidx)  # each index at most once
        assert {len(p) for p in parts} == {600}
        tvs.append(_tv_to_global(parts, y))
    assert tvs[0] > 0.4 and tvs[-1] < 0.08
    assert tvs == sorted(tvs, reverse=True)


def test_partition_bad_input():
    y = np.arange(10) % 3
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_partition(y, 2, 0.0)
    with pytest.raises(ValueError, match="more than the number of samples"):
        dirichlet_partition(y, 11, 1.0)
    with pytest.raises(ValueError, match="n_clients"):
        iid_partition(10, 0)
    parts = iid_partition(10, 3, seed=0)
    assert [len(p) for p in parts] == [3, 3, 3] and len(np.unique(np.concatenate(parts))) == 9


def test_digits_split_sizes():
    xtr, ytr, xte, yte = load_digits_split(0)
    assert xtr.shape == (1437, 1, 8, 8) and xte.shape == (360, 1, 8, 8)
    assert xtr.dtype == torch.float32 and float(xtr.min()) >= 0 and float(xtr.max()) <= 1
    assert torch.bincount(yte).tolist() == [36] * 10 or abs(torch.bincount(yte).float().std()) < 2


def test_resnet18_split_counts_of_the_paper():
    c, s, a = resnet18_split(10)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert (count(c), count(s), count(a)) == (683_072, 10_498_570, 2_102_282)
    assert (nbytes(c), nbytes(s), nbytes(a)) == (2_740_048, 42_025_080, 8_419_408)
    shape, n_classes = check_split_shapes(c, s, a, torch.randn(2, 3, 32, 32))
    assert tuple(shape) == (128, 4, 4) and n_classes == 10


def test_split_module_by_name():
    c, s, _ = resnet18_split(10)
    full = nn.Sequential(OrderedDict([*c.named_children(), *s.named_children()]))
    split = split_module(full, cut="layer2")
    assert sum(p.numel() for p in split.client.parameters()) == 683_072
    x = torch.randn(2, 3, 32, 32)
    full.eval()
    split.eval()
    torch.testing.assert_close(split(x), full(x))
    with pytest.raises(ValueError, match="layer9"):
        split_module(full, cut="layer9")


def test_gradient_agreement():
    g = torch.randn(5, 4)
    assert gradient_agreement(g, g) == pytest.approx((0.0, 1.0))
    nmse, cos = gradient_agreement(-g, g)
    assert nmse == pytest.approx(4.0) and cos == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="same shape"):
        gradient_agreement(g, g[:2])
