"""Quantization through torch.ao and torchao: half-step rounding, logits cosine, size ratio, supported combos."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling.profiling import linear_weight_bytes, profile
from downscaling.quantize import quantize, supported_schemes


def _cos(a, b):
    return float(nn.functional.cosine_similarity(a.reshape(-1), b.reshape(-1), dim=0))


def test_torch_ao_dequantised_within_half_step_and_size():
    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_dynamic", "torch.ao")
    n = 0
    for name, mod in q.named_modules():
        if type(mod).__module__.startswith("torch.ao.nn.quantized") and type(mod).__name__ == "Linear":
            w = m.get_submodule(name).weight
            qw = mod.weight()
            err = (qw.dequantize() - w).abs().max()
            assert err <= qw.q_scale() / 2 + 1e-7, name
            n += 1
    assert n == 15  # 14 block matrices and the head
    assert 3.9 < rec["size_ratio"] <= 4.0
    assert rec["linear_bytes_before"] == linear_weight_bytes(m)
    x = tokens()
    with torch.no_grad():
        assert _cos(q(input_ids=x).logits, m(input_ids=x).logits) > 0.99


def test_torchao_int8_weight_half_step_per_row():
    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_weight", "torchao")
    w = m.model.layers[0].mlp.up_proj.weight
    qw = q.model.layers[0].mlp.up_proj.weight
    deq = qw.qdata.float() * qw.scale.float()
    assert torch.all((deq - w).abs() <= qw.scale.float() / 2 + 1e-7)
    assert rec["size_ratio"] > 3.7
    x = tokens()
    with torch.no_grad():
        assert _cos(q(input_ids=x).logits, m(input_ids=x).logits) > 0.99


def test_torchao_int8_dynamic_cosine():
    m = tiny_llama()
    q, _ = quantize(m, "int8_dynamic", "torchao")
    x = tokens()
    with torch.inference_mode():
        assert _cos(q(input_ids=x).logits, m(input_ids=x).logits) > 0.99


def test_input_untouched_and_profile_counts_float_flops():
    m = tiny_llama()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    q, _ = quantize(m)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    x = tokens(2, 8)
    pq, pf = profile(q, x, n_runs=1, train_flops=False), profile(m, x, n_runs=1, train_flops=False)
    assert pq.flops_per_token_fwd == pf.flops_per_token_fwd
    assert pq.weight_bytes < pf.weight_bytes


def test_unsupported_combinations_raise_listing_supported():
    m = tiny_llama()
    with pytest.raises(ValueError, match="supported here: .*int8_dynamic"):
        quantize(m, "int8_weight", "torch.ao")
    with pytest.raises(ValueError, match="supported here"):
        quantize(m, "int4_weight", "torchao")  # CUDA + bfloat16 only
    with pytest.raises(ValueError, match="scheme"):
        quantize(m, "fp8", "torchao")
    with pytest.raises(ValueError, match="backend"):
        quantize(m, "int8_dynamic", "bitsandbytes")
    with pytest.raises(ValueError, match="no nn.Linear.*Conv2d"):
        quantize(nn.Sequential(nn.Conv2d(1, 1, 3)))
    assert ("int8_dynamic", "torch.ao") in supported_schemes("cpu")
    assert ("int4_weight", "torchao") not in supported_schemes("cpu")


@pytest.mark.skipif(importlib.util.find_spec("optimum") is None, reason="optimum-quanto not installed ([quanto])")
def test_quanto_int8_weight():
    m = tiny_llama()
    q, rec = quantize(m, "int8_weight", "quanto")
    x = tokens()
    with torch.no_grad():
        assert _cos(q(input_ids=x).logits, m(input_ids=x).logits) > 0.99


@pytest.mark.skipif(importlib.util.find_spec("optimum") is not None, reason="optimum-quanto is installed")
def test_quanto_missing_raises_clearly():
    with pytest.raises(ValueError, match="backend='quanto' is not supported"):
        quantize(tiny_llama(), "int8_weight", "quanto")


def test_weight_bytes_of_quantized_model_adds_up():
    from downscaling.profiling import weight_bytes

    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_dynamic", "torch.ao")
    rest = 4 * sum(p.numel() for p in m.parameters() if p.ndim == 1) + 65 * 64 * 4  # norms + fp32 embedding
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())
    assert weight_bytes(q) == rec["linear_bytes_after"] + rest + buffers
