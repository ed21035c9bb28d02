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


def _counted_macs(model: torch.nn.Module, **inputs: torch.Tensor) -> int:
    """Multiply-accumulates of one forward, counted by torch's FlopCounterMode (2 FLOPs per MAC); grad mode on so
    nn.TransformerEncoderLayer takes its counted (not the fused inference) path."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(**inputs)
    return counter.get_total_flops() // 2


def test_patchtst_macs_are_the_counted_macs() -> None:
    for r in (None, 8):
        model = PatchTST(720, 96, 7, patch_len=24, stride=24, basis_num=r)
        assert model.macs() == _counted_macs(model, x=torch.randn(1, 720, 7))


def test_reducer_in_transformers_patchtst() -> None:
    transformers = pytest.importorskip("transformers")
    from timebase import add_basis_reducer

    cfg = transformers.PatchTSTConfig(num_input_channels=3, context_length=96, patch_length=8, patch_stride=8,
                                      prediction_length=24, d_model=16, num_hidden_layers=1, num_attention_heads=2,
                                      ffn_dim=32)  # fmt: skip
    torch.manual_seed(0)
    base = transformers.PatchTSTForPrediction(cfg)
    reduced = add_basis_reducer(transformers.PatchTSTForPrediction(cfg), basis_num=4)
    x, target = torch.randn(2, 96, 3), torch.randn(2, 24, 3)
    out_base = base(past_values=x, output_hidden_states=True)
    out = reduced(past_values=x, future_values=target, output_hidden_states=True)
    assert out.prediction_outputs.shape == out_base.prediction_outputs.shape == (2, 24, 3)
    assert out_base.hidden_states[-1].shape[2] == 12 and out.hidden_states[-1].shape[2] == 4  # 12 patches -> 4 tokens
    # the reducer is the BasisReducer map over the patch axis of the original patchifier's output
    patchify = reduced.model.patchifier
    patches = patchify.patchifier(x.transpose(0, 0).permute(0, 1, 2))  # (B, C, 12, 8)
    ref = torch.einsum("bcnl,rn->bcrl", patches, patchify.reducer.linear.weight) + patchify.reducer.linear.bias[:, None]
    assert torch.allclose(patchify(x), ref, atol=1e-6)
    out.loss.backward()
    assert float(patchify.reducer.linear.weight.grad.abs().sum()) > 0
    assert _counted_macs(reduced, past_values=x) < 0.5 * _counted_macs(base, past_values=x)
    with pytest.raises(ValueError, match="basis_num must be <= num_patches=12"):
        add_basis_reducer(transformers.PatchTSTForPrediction(cfg), basis_num=13)
    with pytest.raises(ValueError, match="already has a basis reducer"):
        add_basis_reducer(reduced, basis_num=2)
