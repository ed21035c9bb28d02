"""FLOPs, parameter counts, bytes, energy and carbon accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling import carbon
from downscaling import profiling as profile_mod
from downscaling.flops import analytic_llama, count_flops, count_train_flops, llama_param_count, param_counts
from downscaling.profiling import profile, weight_bytes


@pytest.mark.parametrize(
    "kw", [{}, {"kv": 2}, {"tied": False}, {"layers": 3, "hidden": 48, "heads": 6, "kv": 3, "mlp": 80}]
)
def test_param_count_exact(kw):
    m = tiny_llama(**kw)
    want = llama_param_count(m.config)
    assert want["total"] == sum(p.numel() for p in m.parameters())
    assert param_counts(m)["total"] == want["total"]
    assert param_counts(m)["nonembed"] == want["nonembed"]


@pytest.mark.parametrize("kw", [{}, {"kv": 2}, {"tied": False}, {"layers": 3, "hidden": 48, "heads": 6, "kv": 1}])
@pytest.mark.parametrize("t", [8, 17])
def test_flop_counter_equals_analytic_llama(kw, t):
    m = tiny_llama(**kw)
    x = tokens(3, t)
    assert count_flops(m, x) == 3 * analytic_llama(m.config, t).forward


def test_flop_counter_eager_attention_equals_analytic():
    m = tiny_llama(kv=2)
    m.config._attn_implementation = "eager"
    assert count_flops(m, tokens(2, 12)) == 2 * analytic_llama(m.config, 12).forward


def test_pure_mlp_flops_exact():
    mlp = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x = torch.randn(7, 10)
    with torch.no_grad(), torch.utils.flop_counter.FlopCounterMode(display=False) as fc:
        mlp(x)
    assert fc.get_total_flops() == 2 * 7 * (10 * 20 + 20 * 5)
    # forward + backward of a matmul stack: the first layer's input gradient is not needed -> 2 + 2 + 1 matmuls
    with torch.utils.flop_counter.FlopCounterMode(display=False) as fc:
        mlp(x).sum().backward()
    assert fc.get_total_flops() == 2 * 7 * 200 * 2 + 2 * 7 * 100 * 3


def test_train_flops_about_three_forward():
    m = tiny_llama()
    x = tokens(2, 16)
    ratio = count_train_flops(m, x) / count_flops(m, x)
    assert 2.9 < ratio < 3.2
    assert all(p.grad is None for p in m.parameters())


def test_weight_bytes_fp32_and_tied_once():
    m = tiny_llama(tied=True)
    n = sum(p.numel() for p in m.parameters())
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())
    assert weight_bytes(m) == 4 * n + buffers
    assert weight_bytes(m.half()) == 2 * n + sum(b.numel() * b.element_size() for b in m.buffers())


def test_profile_fields_and_estimate_marked(monkeypatch):
    monkeypatch.setattr(profile_mod, "read_energy_counter", lambda: None)
    m = tiny_llama()
    x = tokens(2, 16)
    p = profile(m, x, n_runs=2, energy="auto", region="fr", pue=1.5)
    assert p.measured is False and p.energy_source.startswith("estimate")
    assert p.joules_per_token > 0  # never a silent zero
    assert p.flops_per_token_fwd == analytic_llama(m.config, 16).forward / 16
    assert p.tokens_per_s == pytest.approx(32 / (p.latency_ms / 1e3))
    kwh = carbon.joules_to_kwh(p.joules_per_token)
    assert p.co2e_g == pytest.approx(1e3 * kwh * 1.5 * carbon.CARBON_INTENSITY["fr"], rel=1e-12)
    with pytest.raises(RuntimeError, match="no energy counter"):
        profile(m, x, n_runs=1, energy="measure")


def test_profile_uses_counter_when_readable(monkeypatch):
    clock = iter([100.0, 103.0])
    monkeypatch.setattr(profile_mod, "read_energy_counter", lambda: next(clock))
    monkeypatch.setattr(profile_mod, "_codecarbon_joules", lambda fn: (None, "codecarbon stubbed"))
    monkeypatch.setattr(profile_mod, "_zeus_joules", lambda fn, dev: (None, "zeus stubbed"))
    p = profile(tiny_llama(), tokens(2, 8), n_runs=3, energy="measure")
    assert p.measured and p.energy_source == "rapl"
    assert p.joules_per_token == pytest.approx(3.0 / (16 * 3))


def test_profile_frozen_counter_is_not_zero(monkeypatch):
    monkeypatch.setattr(profile_mod, "read_energy_counter", lambda: 5.0)
    monkeypatch.setattr(profile_mod, "_codecarbon_joules", lambda fn: (None, "codecarbon stubbed"))
    monkeypatch.setattr(profile_mod, "_zeus_joules", lambda fn, dev: (None, "zeus stubbed"))
    p = profile(tiny_llama(), tokens(2, 8), n_runs=2)
    assert not p.measured and p.joules_per_token > 0


def test_profile_bad_input():
    m = tiny_llama()
    with pytest.raises(ValueError, match="energy"):
        profile(m, tokens(), energy="guess")
    with pytest.raises(ValueError, match="pue"):
        profile(m, tokens(), pue=0.9)
    with pytest.raises(ValueError, match="region"):
        profile(m, tokens(), region="atlantis")
    with pytest.raises(ValueError, match="integer token ids"):
        profile(m, torch.rand(2, 8))
    with pytest.raises(ValueError, match="n_runs"):
        profile(m, tokens(), n_runs=0)
    p = profile(m, tokens().int(), n_runs=np.int64(1), train_flops=False)  # int32 ids and numpy ints accepted
    assert p.flops_per_token_train is None


def test_carbon_conversions():
    assert carbon.joules_to_kwh(3.6e6) == 1.0
    assert carbon.kwh_to_joules(2.5) == 9e6
    assert carbon.co2e(2.0, 1.2, 0.4) == 2.0 * 1.2 * 0.4
    assert carbon.co2e(1.0, region="SE") == carbon.CARBON_INTENSITY["se"]
    assert carbon.co2e(np.float32(0.5), np.float64(1.0), 0.1) == pytest.approx(0.05)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: carbon.joules_to_kwh(-1.0), "joules"),
        (lambda: carbon.joules_to_kwh(math.nan), "joules"),
        (lambda: carbon.co2e(1.0, 0.99, 0.3), "pue"),
        (lambda: carbon.co2e(1.0, 1.0, -0.1), "ci"),
        (lambda: carbon.co2e(-1.0, 1.0, 0.1), "kwh"),
        (lambda: carbon.co2e(1.0, region="mars"), "region"),
    ],
)
def test_carbon_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_profile_and_prune_under_inference_mode():
    from downscaling import PruneConfig, prune

    m = tiny_llama()
    with torch.inference_mode():
        x = tokens(2, 8)
        p = profile(m, x, n_runs=1)
        r = prune(m, PruneConfig(method="wanda", sparsity=0.5, calib=x, finalize=False))
        baked = prune(m, PruneConfig(method="wanda", sparsity=0.5, calib=x))
    assert p.flops_per_token_train > p.flops_per_token_fwd
    from downscaling.prune import prunable_linears

    model = r.model.train()  # masks made under inference_mode still train afterwards
    model(input_ids=tokens(2, 8)).logits.sum().backward()
    assert all(lin.weight_orig.grad is not None for lin in prunable_linears(model).values())
    baked.model.train()(input_ids=tokens(2, 8)).logits.sum().backward()  # and so do the baked-in weights
    assert all(lin.weight.grad is not None for lin in prunable_linears(baked.model).values())
