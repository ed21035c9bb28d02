"""Pruning: exact sparsity, Wanda against brute force, SparseGPT against the others, structured removal equal to
masking, GQA groups kept, save / load / generate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling.config import PruneConfig, Recover
from downscaling.prune import (
    finalize,
    magnitude_mask,
    prunable_linears,
    prune,
    sparsegpt_prune,
    sparsity_of,
    wanda_mask,
)


def test_wanda_mask_equals_brute_force():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 16, generator=g)
    x = torch.randn(50, 16, generator=g) * torch.linspace(0.1, 3.0, 16)
    norm = (x**2).sum(0).sqrt()
    keep = wanda_mask(w, norm, 0.5)
    for i in range(8):  # brute force: the 8 smallest |W_ij| ||X_j|| of each row go
        scores = [(abs(w[i, j].item()) * norm[j].item(), j) for j in range(16)]
        dropped = {j for _, j in sorted(scores)[:8]}
        assert {j for j in range(16) if not keep[i, j]} == dropped
    # and it differs from magnitude here (the input norms matter)
    assert not torch.equal(keep, magnitude_mask(w, 0.5))


def test_wanda_calib_norms_match_hooked_inputs():
    m = tiny_llama()
    calib = tokens(4, 16)
    r = prune(m, PruneConfig(method="wanda", sparsity=0.5, calib=calib, finalize=False))
    lin_name = "model.layers.0.mlp.down_proj"
    captured = []
    h = m.get_submodule(lin_name).register_forward_pre_hook(lambda mod, a: captured.append(a[0]))
    with torch.no_grad():
        m(input_ids=calib)
    h.remove()
    x = captured[0].reshape(-1, captured[0].shape[-1]).double()
    want = wanda_mask(m.get_submodule(lin_name).weight, (x**2).sum(0).sqrt(), 0.5)
    assert torch.equal(r.model.get_submodule(lin_name).weight_mask.bool(), want)


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
@pytest.mark.parametrize("s", [0.25, 0.5])
def test_achieved_sparsity_per_layer(method, s):
    m = tiny_llama()
    r = prune(m, PruneConfig(method=method, sparsity=s, calib=tokens(2, 16)))
    sp = sparsity_of(r.model)
    for name, v in sp.items():
        assert v == s, name
    assert r.record["achieved_sparsity"] == s


@pytest.mark.parametrize("method", ["magnitude", "wanda"])
def test_global_scope_exact_total_and_uneven(method):
    m = tiny_llama()
    r = prune(m, PruneConfig(method=method, sparsity=0.5, scope="global", calib=tokens(2, 16)))
    sp = sparsity_of(r.model)
    zeros = sum(int((lin.weight == 0).sum()) for lin in prunable_linears(r.model).values())
    total = sum(lin.weight.numel() for lin in prunable_linears(r.model).values())
    assert zeros == total // 2 and sp["all"] == 0.5
    assert len({round(v, 6) for k, v in sp.items() if k != "all"}) > 1  # one threshold, uneven layers


def test_global_magnitude_is_one_threshold():
    m = tiny_llama()
    r = prune(m, PruneConfig(method="magnitude", sparsity=0.3, scope="global", finalize=False))
    kept, dropped = [], []
    for n, lin in prunable_linears(r.model).items():
        w = m.get_submodule(n).weight.abs()
        kept.append(w[lin.weight_mask.bool()])
        dropped.append(w[~lin.weight_mask.bool()])
    assert torch.cat(dropped).max() <= torch.cat(kept).min()


def test_sparsity_zero_is_bit_identical():
    m = tiny_llama()
    x = tokens()
    for method in ("magnitude", "wanda", "sparsegpt", "heads", "channels", "layers"):
        r = prune(m, PruneConfig(method=method, sparsity=0.0, calib=x))
        with torch.no_grad():
            assert torch.equal(r.model(input_ids=x).logits, m(input_ids=x).logits), method


def test_input_model_untouched():
    m = tiny_llama()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    prune(m, PruneConfig(method="sparsegpt", sparsity=0.5, calib=tokens()))
    prune(m, PruneConfig(method="heads", sparsity=0.5))
    after = m.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_masks_survive_adamw_steps():
    m = tiny_llama()
    r = prune(m, PruneConfig(method="wanda", sparsity=0.5, calib=tokens(), finalize=False))
    model = r.model.train()
    masks = {n: lin.weight_mask.clone() for n, lin in prunable_linears(model).items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = tokens(4, 16, seed=3)
    for _ in range(5):
        logits = model(input_ids=x[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, 65), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    for n, lin in prunable_linears(model).items():
        assert torch.all(lin.weight[masks[n] == 0] == 0)
        assert not torch.equal(lin.weight_orig, m.get_submodule(n).weight)  # it did train
    finalize(model)
    assert sparsity_of(model)["all"] == 0.5 and "weight_orig" not in dict(model.named_parameters())


def test_recover_keeps_masks_and_lowers_loss():
    m = tiny_llama()
    calib = tokens(8, 17, seed=5)
    r = prune(m, PruneConfig(method="magnitude", sparsity=0.5, calib=calib, recover=Recover(steps=15, lr=1e-2)))
    assert sparsity_of(r.model)["all"] == 0.5 and r.record["finalized"]
    assert "weight_orig" not in dict(r.model.named_parameters())  # trained under the masks, then baked in
    losses = r.record["recover_loss"]
    assert losses[-1] < losses[0]
    r2 = prune(m, PruneConfig(method="magnitude", sparsity=0.5, calib=calib, recover=Recover(3, 1e-3, distill_from=m)))
    assert sparsity_of(r2.model)["all"] == 0.5


def _recon_error(w, w_hat, x):
    return float(((x @ (w - w_hat).T) ** 2).sum())


def test_sparsegpt_beats_magnitude_and_wanda_on_correlated_inputs():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 32, dtype=torch.float64, generator=g)
    mix = torch.randn(32, 32, dtype=torch.float64, generator=g)
    x = torch.randn(400, 32, dtype=torch.float64, generator=g) @ mix  # correlated features
    h = x.T @ x
    w_sgpt, keep = sparsegpt_prune(w, h, 0.5, damp=1e-4, block=8)
    assert int((~keep).sum()) == w.numel() // 2 and torch.all(w_sgpt[~keep] == 0)
    e_sgpt = _recon_error(w, w_sgpt, x)
    e_mag = _recon_error(w, w * magnitude_mask(w, 0.5), x)
    e_wanda = _recon_error(w, w * wanda_mask(w, (x**2).sum(0).sqrt(), 0.5), x)
    assert e_sgpt < 0.7 * min(e_mag, e_wanda)


def test_sparsegpt_one_column_is_obs_closed_form():
    # pruning only the last column (block of 1, mask forced there) gives no update: nothing to its right;
    # pruning the first column of a 2-column layer gives the OBS update w2 += w1 * H12 / H22
    w = torch.tensor([[1.0, 0.0], [0.1, 5.0]], dtype=torch.float64)
    h = torch.tensor([[2.0, 1.0], [1.0, 4.0]], dtype=torch.float64)
    w_hat, keep = sparsegpt_prune(w[:1], h, 0.5, damp=1e-12, block=2)
    assert keep.tolist() == [[True, False]]  # w=0 has the lowest saliency
    w_hat, keep = sparsegpt_prune(torch.tensor([[0.1, 5.0]], dtype=torch.float64), h, 0.5, damp=1e-12, block=2)
    assert keep.tolist() == [[False, True]]
    assert w_hat[0, 1].item() == pytest.approx(5.0 + 0.1 * 1.0 / 4.0, rel=1e-9)


def _mask_heads(model, removed):
    masked = __import__("copy").deepcopy(model)
    cfg = model.config
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd, group = cfg.hidden_size // h, h // kv
    for i, groups in removed.items():
        o = masked.model.layers[i].self_attn.o_proj
        with torch.no_grad():
            for g in groups:
                o.weight[:, g * group * hd : (g + 1) * group * hd] = 0
    return masked


@pytest.mark.parametrize("heads, kv", [(4, 4), (4, 2), (8, 2)])
def test_removed_heads_equal_masked_heads_gqa(heads, kv):
    m = tiny_llama(hidden=32, heads=heads, kv=kv)
    x = tokens()
    r = prune(m, PruneConfig(method="heads", sparsity=0.5, calib=x))
    assert r.model.config.num_key_value_heads == kv // 2
    assert r.model.config.num_attention_heads == heads // 2  # groups kept whole: heads / kv unchanged
    att = r.model.model.layers[0].self_attn
    hd = 32 // heads
    assert att.q_proj.out_features == heads // 2 * hd and att.k_proj.out_features == kv // 2 * hd
    masked = _mask_heads(m, r.record["removed_kv_groups"])
    with torch.no_grad():
        a, b = r.model(input_ids=x).logits, masked(input_ids=x).logits
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # and the query heads kept are exactly those of the kept groups
    g0 = r.record["removed_kv_groups"][0]
    group = heads // kv
    kept_rows = [g * group * hd + j for g in range(kv) if g not in g0 for j in range(group * hd)]
    torch.testing.assert_close(att.q_proj.weight, m.model.layers[0].self_attn.q_proj.weight[kept_rows])


def test_removed_channels_equal_zeroed_channels():
    m = tiny_llama()
    x = tokens()
    r = prune(m, PruneConfig(method="channels", sparsity=0.25))
    assert r.model.config.intermediate_size == 48
    masked = __import__("copy").deepcopy(m)
    for lp, lm in zip(r.model.model.layers, masked.model.layers):
        kept = [
            j for j in range(64)
            if any(torch.equal(lm.mlp.gate_proj.weight[j], row) for row in lp.mlp.gate_proj.weight)
        ]  # fmt: skip
        drop = sorted(set(range(64)) - set(kept))
        assert len(drop) == 16
        with torch.no_grad():
            lm.mlp.down_proj.weight[:, drop] = 0
    with torch.no_grad():
        torch.testing.assert_close(r.model(input_ids=x).logits, masked(input_ids=x).logits, atol=1e-6, rtol=0)


def test_layers_removed_by_block_influence():
    m = tiny_llama(layers=4)
    x = tokens()
    r = prune(m, PruneConfig(method="layers", sparsity=0.5, calib=x))
    assert r.model.config.num_hidden_layers == 2 and len(r.model.model.layers) == 2
    scores = r.record["block_scores"]
    assert sorted(r.record["removed_layers"]) == sorted(np.argsort(scores, kind="stable")[:2].tolist())
    assert [layer.self_attn.layer_idx for layer in r.model.model.layers] == [0, 1]


@pytest.mark.parametrize("method", ["heads", "channels", "layers"])
def test_structured_saves_loads_generates(method, tmp_path):
    from transformers import LlamaForCausalLM

    m = tiny_llama(layers=2, kv=2)
    x = tokens()
    r = prune(m, PruneConfig(method=method, sparsity=0.5, calib=x))
    r.model.save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=x).logits, r.model(input_ids=x).logits, atol=0, rtol=0)
    out = loaded.generate(x[:1, :4], max_new_tokens=6, do_sample=False)
    ref = r.model.generate(x[:1, :4], max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 10) and torch.equal(out, ref)
    assert r.record["params_after"] < r.record["params_before"]


def test_unstructured_finalize_saves(tmp_path):
    from transformers import LlamaForCausalLM

    m = tiny_llama()
    r = prune(m, PruneConfig(method="magnitude", sparsity=0.5))
    finalize(r.model).save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path)
    assert sparsity_of(loaded)["all"] == 0.5


def test_gpt2_conv1d_converted():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    g = GPT2LMHeadModel(GPT2Config(vocab_size=65, n_embd=32, n_layer=2, n_head=4, n_positions=32)).eval()
    x = tokens(2, 8)
    with torch.no_grad():
        ref = g(input_ids=x).logits
    r = prune(g, PruneConfig(method="magnitude", sparsity=0.0))
    assert r.record["converted_conv1d"] == 8
    with torch.no_grad():
        torch.testing.assert_close(r.model(input_ids=x).logits, ref, atol=1e-5, rtol=1e-5)
    r = prune(g, PruneConfig(method="wanda", sparsity=0.5, calib=x))
    assert sparsity_of(r.model)["all"] == 0.5
    with pytest.raises(ValueError, match="Conv1D"):
        prunable_linears(g)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"sparsity": 1.0}, "sparsity"),
        ({"sparsity": -0.1}, "sparsity"),
        ({"sparsity": float("nan")}, "sparsity"),
        ({"method": "random"}, "method"),
        ({"method": "wanda"}, "calib"),
        ({"method": "sparsegpt"}, "calib"),
        ({"scope": "row"}, "scope"),
    ],
)
def test_prune_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        PruneConfig(**kw)


def test_prune_bad_models_and_calib():
    with pytest.raises(ValueError, match="no nn.Linear.*Conv2d"):
        prune(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()), PruneConfig())
    m = tiny_llama()
    with pytest.raises(ValueError, match="calib"):
        prune(m, PruneConfig(method="wanda", calib=torch.rand(2, 8)))
    with pytest.raises(ValueError, match="global"):
        prune(m, PruneConfig(method="heads", scope="global"))
    with pytest.raises(ValueError, match="recover needs calib"):
        prune(m, PruneConfig(method="magnitude", recover=Recover(steps=1)))
    assert PruneConfig(sparsity=np.float32(0.5)).sparsity == 0.5


def test_numpy_calib_and_int32_accepted():
    m = tiny_llama()
    r = prune(m, PruneConfig(method="wanda", sparsity=0.5, calib=[tokens().int()]))
    assert sparsity_of(r.model)["all"] == 0.5


def test_sparsity_grid_exact():
    m = tiny_llama()
    for s, method in itertools.product((0.1, 0.75), ("magnitude",)):
        r = prune(m, PruneConfig(method=method, sparsity=s))
        for lin in prunable_linears(r.model).values():
            assert int((lin.weight == 0).sum()) == round(s * lin.weight.numel())


def test_weight_bytes_of_masked_model_is_the_finalized_size():
    from downscaling.profiling import weight_bytes

    m = tiny_llama()
    r = prune(m, PruneConfig(method="magnitude", sparsity=0.5))
    assert weight_bytes(r.model) == weight_bytes(m) == weight_bytes(finalize(r.model))
