"""Quantization through torch.ao and torchao: half-step rounding, logits cosine, size ratio, supported combos."""

from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling.profiling import linear_weight_bytes, profile
from downscaling.quantize import quantize, supported_schemes


def _cos(a, b):
    return float(nn.functional.cosine_similarity(a.reshape(-1), b.reshape(-1), dim=0))


def _logits_cos(q, m, grad_mode=torch.no_grad):
    """Cosine between the quantized and the float model's logits on the same tokens."""
    x = tokens()
    with grad_mode():
        return _cos(q(input_ids=x).logits, m(input_ids=x).logits)


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
    assert _logits_cos(q, m) > 0.99


def test_torchao_int8_weight_half_step_per_row():
    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_weight", "torchao")
    w = m.model.layers[0].mlp.up_proj.weight
    qw = q.model.layers[0].mlp.up_proj.weight
    deq = qw.qdata.float() * qw.scale.float()
    assert torch.all((deq - w).abs() <= qw.scale.float() / 2 + 1e-7)
    assert rec["size_ratio"] > 3.7
    assert _logits_cos(q, m) > 0.99


def test_torchao_int8_dynamic_cosine():
    m = tiny_llama()
    q, _ = quantize(m, "int8_dynamic", "torchao")
    assert _logits_cos(q, m, torch.inference_mode) > 0.99


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
    assert _logits_cos(q, m) > 0.99


_needs_quanto = pytest.mark.skipif(importlib.util.find_spec("optimum") is None, reason="optimum-quanto not installed")


@_needs_quanto
def test_quanto_int8_weight_half_step_per_row_and_bytes():
    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_weight", "quanto")
    for name, mod in m.named_modules():
        if isinstance(mod, nn.Linear):
            qw = q.get_submodule(name).weight
            scale = qw._scale.float()  # one scale per output row (axis 0)
            assert torch.all((qw.dequantize() - mod.weight).abs() <= scale / 2 + 1e-7), name
    # stored size: int8 data + one fp32 scale per row, for every Linear (the 14 block matrices and the head), plus
    # the two fp32 scalars (input_scale, output_scale) every quanto QLinear keeps as buffers
    want = sum(mod.out_features * (mod.in_features + 4) + 8 for mod in m.modules() if isinstance(mod, nn.Linear))
    assert rec["linear_bytes_after"] == want
    assert rec["size_ratio"] == pytest.approx(rec["linear_bytes_before"] / want)


@_needs_quanto
def test_quanto_int4_weight_bytes():
    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int4_weight", "quanto")
    # two 4-bit values per byte (quanto packs pairs of rows: 65 head rows take 33), an fp32 scale and an fp32
    # shift per row, and QLinear's two fp32 scalar buffers
    want = sum(
        (mod.out_features + 1) // 2 * mod.in_features + 8 * mod.out_features + 8
        for mod in m.modules()
        if isinstance(mod, nn.Linear)
    )
    assert rec["linear_bytes_after"] == want and rec["size_ratio"] > 6


@_needs_quanto
@pytest.mark.slow  # quanto's int4 forward JIT-compiles its C++ unpack extension on first use (minutes, once per env)
def test_quanto_int4_weight_cosine():
    m = tiny_llama(hidden=64, mlp=128)
    q, _ = quantize(m, "int4_weight", "quanto")
    assert _logits_cos(q, m) > 0.98


def test_torchao_int4_on_cpu_is_refused_naming_the_alternative():
    """torchao's int4 weight-only kernels need CUDA and bfloat16 (tinygemm / tile-packed) or the mslk package; on
    a CPU the pair is refused up front, pointing at quanto's int4."""
    with pytest.raises(ValueError, match="int4_weight.*torchao.*bfloat16.*CUDA.*quanto"):
        quantize(tiny_llama(), "int4_weight", "torchao")


def test_quanto_missing_raises_clearly(monkeypatch):
    quantize_mod = importlib.import_module("downscaling.quantize")  # the module (the package exports the function)
    monkeypatch.setattr(quantize_mod, "_has_quanto", lambda: False)  # as if optimum-quanto were not installed
    with pytest.raises(ValueError, match="backend='quanto' is not supported"):
        quantize(tiny_llama(), "int8_weight", "quanto")


def test_weight_bytes_of_quantized_model_adds_up():
    from downscaling.profiling import weight_bytes

    m = tiny_llama(hidden=64, mlp=128)
    q, rec = quantize(m, "int8_dynamic", "torch.ao")
    rest = 4 * sum(p.numel() for p in m.parameters() if p.ndim == 1) + 65 * 64 * 4  # norms + fp32 embedding
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())
    assert weight_bytes(q) == rec["linear_bytes_after"] + rest + buffers


@pytest.mark.parametrize("bias", [False, True])
def test_torch_ao_bytes_recorded_without_unpacking(monkeypatch, bias):
    """``quantize`` records the int8 Linear bytes from the layout, not by unpacking every packed weight; the figure
    equals the unpacking count of ``linear_weight_bytes``."""
    from torch.ao.nn.quantized.dynamic import Linear as DynLinear

    m = tiny_llama(hidden=64, mlp=128)
    if bias:
        m.model.layers[0].mlp.up_proj = nn.Linear(64, 128, bias=True)
    calls = []
    unpack = DynLinear._weight_bias
    monkeypatch.setattr(DynLinear, "_weight_bias", lambda self: calls.append(1) or unpack(self))
    q, rec = quantize(m, "int8_dynamic", "torch.ao")
    assert calls == []
    assert rec["linear_bytes_after"] == linear_weight_bytes(q)
    assert len(calls) == 15  # the count above unpacks each of the 15 Linear layers once


def _odd_models():
    """Models whose walk has edge cases: biases, a Linear shared by two parents, a Linear subclass, a pruned Linear
    (torch.nn.utils.prune masks), a non-float first parameter, and the tiny Llama."""
    from torch.nn.utils import prune as torch_prune

    class SubLinear(nn.Linear):
        pass

    torch.manual_seed(3)
    shared = nn.Linear(8, 8)
    pruned = nn.Linear(8, 6, bias=True)
    with torch.no_grad():  # the masked weight a leaf, as deepcopy needs
        torch_prune.l1_unstructured(pruned, "weight", amount=0.5)
        torch_prune.l1_unstructured(pruned, "bias", amount=0.5)
    counter = nn.Module()
    counter.register_parameter("steps", nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False))
    return {
        "llama": tiny_llama(hidden=64, mlp=128),
        "mixed": nn.Sequential(
            counter,
            nn.Sequential(nn.Linear(4, 8, bias=True), nn.ReLU(), shared),
            nn.Sequential(shared, nn.GELU(), SubLinear(8, 8, bias=False)),
            nn.LayerNorm(8),
            pruned,
        ),
    }


@pytest.mark.parametrize("name", ["llama", "mixed"])
def test_torch_ao_quantize_equals_quantize_dynamic_called_directly(name):
    """``quantize`` (one walk for checks and bytes, bias read from that walk) gives the model ``quantize_dynamic``
    gives on the same input -- the same layer types, int8 weights, scales, zero points and biases, bitwise equal
    outputs -- and the record equals the reference counts (``linear_weight_bytes`` of the input and of the result,
    the latter unpacking every int8 weight)."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    m = _odd_models()[name].train()
    q, rec = quantize(m, "int8_dynamic", "torch.ao")
    assert all(x.training for x in m.modules())  # the input keeps its mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
    mods, ref_mods = dict(q.named_modules(remove_duplicate=False)), dict(ref.named_modules(remove_duplicate=False))
    assert list(mods) == list(ref_mods)
    assert [type(v) for v in mods.values()] == [type(v) for v in ref_mods.values()]
    # the modes quantize_dynamic leaves (eval before its swap; the int8 layers it creates are in training mode)
    assert [v.training for v in mods.values()] == [v.training for v in ref_mods.values()]
    assert not q.training
    n_int8 = 0
    for key, mod in mods.items():
        if type(mod).__module__.startswith("torch.ao.nn.quantized") and type(mod).__name__ == "Linear":
            (w, b), (rw, rb) = mod._weight_bias(), ref_mods[key]._weight_bias()
            assert torch.equal(w.int_repr(), rw.int_repr()) and w.q_scale() == rw.q_scale(), key
            assert w.q_zero_point() == rw.q_zero_point() and (b is None) == (rb is None), key
            assert b is None or torch.equal(b, rb), key
            n_int8 += 1
    # the Llama's 15 Linear; mixed: three nn.Linear, the shared one swapped in each parent (two layers, the second
    # name absent from quantize's walk of the input), the subclass left float
    assert n_int8 == (15 if name == "llama" else 4)
    assert dict(q.state_dict()).keys() == dict(ref.state_dict()).keys()
    with torch.no_grad():
        if name == "llama":
            x = tokens()
            assert torch.equal(q(input_ids=x).logits, ref(input_ids=x).logits)
        else:
            x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
            assert torch.equal(q[1:4](x), ref[1:4](x))  # not the pruned layer: its mask hook outlives the swap
    assert rec["linear_bytes_before"] == linear_weight_bytes(m)
    assert rec["linear_bytes_after"] == linear_weight_bytes(q)


def test_scan_matches_the_separate_calls():
    """The one walk ``quantize`` makes over its input gives what the separate calls give."""
    from downscaling.quantize import _scan

    models = _odd_models() | {"empty": nn.Sequential(nn.ReLU()), "half": tiny_llama().half()}
    for name, m in models.items():
        s = _scan(m)
        params = list(m.parameters())
        assert s.has_linear == any(isinstance(x, nn.Linear) for x in m.modules()), name
        assert s.device == (params[0].device if params else torch.device("cpu")), name
        assert s.dtype == next((p.dtype for p in params if p.is_floating_point()), torch.float32), name
        assert s.linear_bytes == linear_weight_bytes(m), name
        assert s.biases.keys() == {k for k, x in m.named_modules() if isinstance(x, nn.Linear)}, name
