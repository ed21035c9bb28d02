"""``prune`` with the structured methods against torch-pruning's slicing called directly on a deep copy with groups
chosen by an independent per-block scoring: the same weights bit for bit, the same config, the same outputs, and a
record that matches counts taken from the models themselves."""

from __future__ import annotations

import copy

import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling.config import PruneConfig
from downscaling.prune import prune


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _reference_groups(model, n_remove: int, calib: torch.Tensor | None) -> dict[int, list[int]]:
    """Per block, on its own: ‖W_o[:, j]‖² (times Σ x_j² of o_proj's inputs with calibration data) summed over each
    kv group's query-head channels, the ``n_remove`` lowest (stable) sorted."""
    cfg = model.config
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    sq = {}
    if calib is not None:
        handles = [
            blk.self_attn.o_proj.register_forward_pre_hook(
                lambda _m, a, i=i: sq.__setitem__(i, (a[0].reshape(-1, a[0].shape[-1]).double() ** 2).sum(0))
            )
            for i, blk in enumerate(model.model.layers)
        ]
        with torch.no_grad():
            model(input_ids=calib)
        for hd_ in handles:
            hd_.remove()
    out = {}
    for i, blk in enumerate(model.model.layers):
        energy = blk.self_attn.o_proj.weight.detach().double().pow(2).sum(0)
        if calib is not None:
            energy = energy * sq[i]
        score = energy.reshape(kv, (h // kv) * hd).sum(1)
        out[i] = sorted(torch.argsort(score, stable=True)[:n_remove].tolist())
    return out


def _peer(model, removed: dict[int, list[int]]):
    """torch-pruning's slicing on a deep copy, as a user would call it, and the config updated by hand."""
    import torch_pruning as tp

    q = copy.deepcopy(model)
    cfg = q.config
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    group = h // kv
    for i, layer in enumerate(q.model.layers):
        att = layer.self_attn
        q_rows = [g * group * hd + r for g in removed[i] for r in range(group * hd)]
        kv_rows = [g * hd + r for g in removed[i] for r in range(hd)]
        if q_rows:
            tp.prune_linear_out_channels(att.q_proj, q_rows)
            tp.prune_linear_out_channels(att.k_proj, kv_rows)
            tp.prune_linear_out_channels(att.v_proj, kv_rows)
            tp.prune_linear_in_channels(att.o_proj, q_rows)
    n = len(removed[0])
    cfg.head_dim, cfg.num_key_value_heads, cfg.num_attention_heads = hd, kv - n, (kv - n) * group
    return q


def _assert_same_as_peer(model, sparsity: float, calib: torch.Tensor | None = None) -> None:
    before = {k: v.clone() for k, v in model.state_dict().items()}
    n_before = _n_params(model)
    kv = model.config.num_key_value_heads
    n_remove = int(sparsity * kv)
    r = prune(model, PruneConfig("heads", sparsity, calib=calib))
    want = _reference_groups(model, n_remove, calib)
    assert r.record["removed_kv_groups"] == want
    peer = _peer(model, want)
    ours_sd, peer_sd = r.model.state_dict(), peer.state_dict()
    assert list(ours_sd) == list(peer_sd)
    for k in ours_sd:
        assert ours_sd[k].shape == peer_sd[k].shape and ours_sd[k].dtype == peer_sd[k].dtype, k
        assert torch.equal(ours_sd[k], peer_sd[k]), k
    for a in ("num_attention_heads", "num_key_value_heads", "head_dim"):
        assert getattr(r.model.config, a) == getattr(peer.config, a), a
    x = tokens(2, 12)
    with torch.no_grad():
        assert torch.equal(r.model(input_ids=x).logits, peer(input_ids=x).logits)
    h = model.config.num_attention_heads
    assert r.record["heads_before"] == h
    assert r.record["heads_after"] == r.model.config.num_attention_heads == h - n_remove * (h // kv)
    assert r.record["params_before"] == n_before
    assert r.record["params_after"] == _n_params(r.model) == _n_params(peer)
    assert r.record["converted_conv1d"] == 0 and r.record["finalized"] is True
    for k, v in model.state_dict().items():  # the input is untouched
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("heads, kv", [(4, 4), (4, 2), (8, 2), (8, 8)])
@pytest.mark.parametrize("calibrated", [False, True])
def test_heads_equal_direct_slicing(heads, kv, calibrated):
    m = tiny_llama(hidden=32, heads=heads, kv=kv, tied=heads != 8)
    _assert_same_as_peer(m, 0.5, tokens() if calibrated else None)


def test_heads_equal_direct_slicing_edge_cases():
    # heads already pruned: the pruned model again (its config now has 2 kv groups)
    first = prune(tiny_llama(hidden=32, heads=8, kv=4), PruneConfig("heads", 0.5)).model
    assert first.config.num_key_value_heads == 2
    _assert_same_as_peer(first, 0.5)
    # no head removed (sparsity 0): an unchanged copy
    m = tiny_llama(kv=2)
    r = prune(m, PruneConfig("heads", 0.0))
    assert r.record["removed_kv_groups"] == {0: [], 1: []}
    assert r.record["params_after"] == r.record["params_before"] == _n_params(m)
    _assert_same_as_peer(m, 0.0)
    # all groups but one removed, with q/k/v biases (sliced with their rows) and untied embeddings
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    cfg = LlamaConfig(
        vocab_size=65, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, attention_bias=True, tie_word_embeddings=False,
    )  # fmt: skip
    _assert_same_as_peer(LlamaForCausalLM(cfg).eval(), 0.75, tokens())


def test_params_after_counted_when_a_sliced_weight_is_shared():
    # a sliced weight also held elsewhere: the count after pruning comes from the model, not from the slices
    m = tiny_llama(layers=2, kv=2)
    m.extra = nn.Linear(32, 16, bias=False)  # not used by forward
    m.extra.weight = m.model.layers[0].self_attn.k_proj.weight
    r = prune(m, PruneConfig("heads", 0.5))
    assert r.record["params_before"] == _n_params(m)
    assert r.record["params_after"] == _n_params(r.model)
    assert r.model.extra.weight.shape == (16, 32)  # the copy's extra layer keeps the unsliced weight


@pytest.mark.parametrize("method, s", [("channels", 0.25), ("layers", 0.5)])
def test_structured_param_counts(method, s):
    m = tiny_llama(layers=4, kv=2)
    r = prune(m, PruneConfig(method, s, calib=tokens()))
    assert r.record["params_before"] == _n_params(m)
    assert r.record["params_after"] == _n_params(r.model) < _n_params(m)


def test_one_walk_equals_the_separate_calls():
    from transformers import GPT2Config, GPT2LMHeadModel

    from downscaling.prune import _scan, conv1d_to_linear, prunable_linears

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=65, n_embd=32, n_layer=2, n_head=4, n_positions=32))
    lin = nn.Linear(4, 4)
    shared = nn.Sequential(nn.ReLU(), lin, nn.Sequential(lin, nn.Linear(4, 2)))  # one Linear under two parents
    for model in (tiny_llama(), tiny_llama(tied=False), gpt2, shared):
        a, b = copy.deepcopy(model), copy.deepcopy(model)
        scan = _scan(a)
        converted = conv1d_to_linear(b)
        assert scan.converted == converted
        assert list(scan.linears) == list(prunable_linears(b))
        assert scan.n_params == _n_params(b) and scan.device == next(b.parameters()).device
        assert [type(m).__name__ for m in a.modules()] == [type(m).__name__ for m in b.modules()]
    with pytest.raises(ValueError, match="no nn.Linear"):
        _scan(nn.Sequential(nn.Conv2d(1, 2, 3)))
