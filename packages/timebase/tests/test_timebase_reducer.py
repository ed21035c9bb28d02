"""The plug-in complexity reducer for patch models (paper Sec. 4, Table 4)."""

from __future__ import annotations

import pytest
import torch

from timebase import BasisReducer, PatchTST


def test_basis_reducer_is_a_linear_map_over_patches() -> None:
    torch.manual_seed(0)
    red = BasisReducer(num_patches=31, basis_num=8)
    patches = torch.randn(2, 7, 24, 31)  # (B, C, patch_len, num_patches)
    out = red(patches)
    assert out.shape == (2, 7, 24, 8)
    ref = torch.einsum("bclp,rp->bclr", patches, red.linear.weight) + red.linear.bias
    assert float((out - ref).detach().abs().max()) < 1e-5
    assert red.macs(7 * 24) == 7 * 24 * 31 * 8
    with pytest.raises(ValueError, match="basis_num must be <= num_patches"):
        BasisReducer(4, 5)
    with pytest.raises(ValueError, match="num_patches=31"):
        red(torch.randn(2, 7, 24, 30))


def test_patchtst_with_reducer_sees_r_tokens_and_is_cheaper() -> None:
    torch.manual_seed(1)
    base = PatchTST(720, 96, 7)
    reduced = PatchTST(720, 96, 7, basis_num=8)
    assert base.num_patches == 31 and base.n_tokens == 31 and reduced.n_tokens == 8
    assert reduced.pos.shape == (8, 16) and reduced.head.in_features == 16 * 8
    x = torch.randn(3, 720, 7)
    base.eval()
    reduced.eval()
    assert base(x).shape == reduced(x).shape == (3, 96, 7)
    cut_macs = 1 - reduced.macs() / base.macs()
    cut_params = 1 - reduced.num_parameters() / base.num_parameters()
    assert 0.6 < cut_macs < 0.95 and cut_params > 0.3
    # RevIN: the forecast follows a shift of the input level exactly
    shift = base(x + 5.0) - base(x)
    assert float((shift - 5.0).detach().abs().max()) < 1e-3
