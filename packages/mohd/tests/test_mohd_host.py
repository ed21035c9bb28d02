"""What a transformers user does with a causal LM, done on MoHD and on ``LlamaForCausalLM`` with the same calls:
resizing the vocabulary, tuple outputs, save/load, bad input shapes; plus the batch invariance of the gather path
(a token's logits do not depend on which other tokens share its batch) and accounting read from the modules."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
from mohd_testing import SWITCHES, VOCAB, tiny_llama_config, tiny_mohd, tiny_mohd_config
from transformers import AutoModelForCausalLM, LlamaForCausalLM, LlamaModel

from mohd import (
    MoHDConfig,
    MoHDFeedForward,
    MoHDForCausalLM,
    MoHDModel,
    activated_flops,
    count_active_parameters,
    count_touched_parameters,
)
from mohd.layer import slot_matmul


def _ids(b: int = 2, t: int = 7, seed: int = 1, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def _dense_pair() -> tuple[LlamaForCausalLM, MoHDForCausalLM]:
    """Llama and the MoHD dense limit (N_s = N, no fusion) with the same weights, float64."""
    torch.manual_seed(0)
    lcfg = tiny_llama_config()
    llama = LlamaForCausalLM(lcfg).double().eval()
    cfg = MoHDConfig.from_llama(lcfg, num_subdims=4, num_shared=4, num_routed=0, fusion="none", scaling="none")
    model = MoHDForCausalLM(cfg).double().eval()
    model.load_state_dict(llama.state_dict(), strict=True)
    return llama, model


def _misaligned(model: torch.nn.Module, offset: int) -> torch.nn.Module:
    """A copy whose parameters live ``offset`` elements into a larger buffer (another memory alignment, as a
    tensor loaded from a file may have)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for mod in out.modules():
            for name, p in list(mod._parameters.items()):
                if p is None:
                    continue
                view = torch.empty(p.numel() + offset, dtype=p.dtype)[offset:].view(p.shape)
                mod._parameters[name] = torch.nn.Parameter(view.copy_(p), requires_grad=p.requires_grad)
    return out


@pytest.mark.parametrize("kind", ["llama", "mohd", "mohd_base"])
def test_resize_token_embeddings_then_new_ids_are_accepted(kind):
    llama, dense = _dense_pair()
    model = {"llama": llama, "mohd": tiny_mohd(seed=0), "mohd_base": MoHDModel(dense.config)}[kind]
    model.resize_token_embeddings(VOCAB + 3, mean_resizing=False)
    assert model.config.vocab_size == VOCAB + 3
    ids = torch.tensor([[1, VOCAB + 1, VOCAB + 2]])
    out = model(ids)
    if kind == "mohd_base":
        assert out.last_hidden_state.shape[:2] == (1, 3)
        return
    assert out.logits.shape == (1, 3, VOCAB + 3)
    with pytest.raises((ValueError, IndexError)):
        model(torch.tensor([[VOCAB + 3]]))


def test_return_dict_false_gives_llamas_tuple():
    llama, model = _dense_pair()
    ids = _ids()
    for kwargs in ({}, {"labels": ids}, {"use_cache": False}):
        ref, out = llama(ids, return_dict=False, **kwargs), model(ids, return_dict=False, **kwargs)
        assert type(out) is tuple and type(ref) is tuple and len(out) == len(ref)
        for a, b in zip(out, ref, strict=True):
            assert type(a) is type(b)
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    # the base model too, and a routed model: the tuple of the fields that are set, in the output's order
    assert type(model.model(ids, return_dict=False)) is tuple
    routed = tiny_mohd(seed=1)
    out, tup = routed(ids, labels=ids), routed(ids, labels=ids, return_dict=False)
    assert type(tup) is tuple and len(tup) == len(out.to_tuple())
    assert torch.equal(tup[0], out.loss) and torch.equal(tup[1], out.aux_loss) and torch.equal(tup[2], out.logits)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (torch.zeros(2, 0, dtype=torch.long), r"input_ids must hold at least one token.*\(2, 0\)"),
        (torch.tensor([1, 2, 3]), r"input_ids must have 2 dimensions.*\(3,\)"),
        (torch.zeros(1, 2, 3, dtype=torch.long), r"input_ids must have 2 dimensions"),
    ],
)
def test_bad_input_shapes_raise_clear_errors(ids, match):
    llama, model = _dense_pair()
    with pytest.raises(Exception):  # noqa: B017 -- Llama fails deep inside its layers
        llama(ids)
    with pytest.raises(ValueError, match=match):
        model(ids)
    with pytest.raises(ValueError, match=match):
        tiny_mohd(seed=0)(ids)
    with pytest.raises(ValueError, match="inputs_embeds must hold at least one position"):
        model(inputs_embeds=torch.zeros(2, 0, 24, dtype=torch.float64))


@pytest.mark.parametrize("name", ["default", "K2_topk", "ffn", "output_site", "learned"])
def test_count_active_parameters_follows_the_modules_not_an_edited_config(name):
    model = tiny_mohd(seed=1, **SWITCHES[name])
    before = count_active_parameters(model)
    cfg = model.config
    cfg.num_routed, cfg.num_shared, cfg.vocab_size = cfg.num_routed + 1, 1, VOCAB + 50
    cfg.fusion, cfg.intermediate_size = "none", 2 * cfg.intermediate_size
    after = count_active_parameters(model)
    touched = count_touched_parameters(model)
    assert after == before
    assert after.total == sum(p.numel() for p in model.parameters())
    assert (after.projection_active, after.active) == (touched["projection"], touched["active"])


def test_slot_matmul_row_does_not_depend_on_the_other_rows():
    """Each slot's product is bitwise the same alone, among few or many other slots, in any order and position,
    and with the weights at another memory alignment."""
    g = torch.Generator().manual_seed(0)
    for d_in, d_out, groups in ((6, 32, 5), (16, 96, 3), (48, 24, 2)):
        x = torch.randn(90, d_in, generator=g)
        group = torch.randint(0, groups, (90,), generator=g)
        base = torch.randn(d_out, groups, d_in, generator=g)
        weight = base.permute(1, 2, 0)  # a strided view, as the model passes
        full = slot_matmul(x, weight, group)
        subsets = (torch.arange(1), torch.arange(3), torch.arange(9), torch.arange(40), torch.randperm(90, generator=g))
        for rows in subsets:
            torch.testing.assert_close(slot_matmul(x[rows], weight, group[rows]), full[rows], rtol=0, atol=0)
        moved = torch.empty(base.numel() + 3)[3:].view(base.shape).copy_(base).permute(1, 2, 0)
        torch.testing.assert_close(slot_matmul(x, moved, group), full, rtol=0, atol=0)
        ref = torch.stack([x[i].double() @ weight[int(k)].double() for i, k in enumerate(group)]).float()
        torch.testing.assert_close(full, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(slot_matmul(x, weight, group, tiled=False), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tiled", [True, False])
def test_slot_matmul_gradients_with_an_empty_group(tiled):
    """Finite differences through both inputs, the weight a permuted slice as the model passes, group 1 unused."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    base = torch.randn(5, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)  # 4 groups after the slice
    group = torch.tensor([2, 0, 3, 0, 2, 3, 3])

    def fn(x, base):
        return slot_matmul(x, base[:, 1:].permute(1, 2, 0), group, tiled=tiled)

    assert torch.autograd.gradcheck(fn, (x, base))


@pytest.mark.parametrize("name", ["default", "K2_topk", "ffn", "no_shared"])
def test_future_tokens_do_not_perturb_past_logits_in_float32(name):
    """Causality to the last bit on the gather path: changing the second half of every sequence (which reroutes
    those tokens) leaves the first half's float32 logits bitwise equal."""
    model = tiny_mohd(seed=3, dtype=torch.float32, **SWITCHES[name])
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.randint(0, VOCAB, (4, 48), generator=g)
        changed = ids.clone()
        changed[:, 24:] = torch.randint(0, VOCAB, (4, 24), generator=g)
        with torch.no_grad():
            a, b = model(ids).logits, model(changed).logits
        torch.testing.assert_close(a[:, :24], b[:, :24], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["llama", "mohd"])
def test_save_load_and_realigned_weights_are_bitwise_in_float32(kind, tmp_path):
    """``save_pretrained`` -> ``from_pretrained`` (tensors at the alignment the loader gives) and weights moved to
    other alignments by hand: float32 logits bitwise equal on the default gather path, as for Llama."""
    if kind == "llama":
        torch.manual_seed(0)
        model = LlamaForCausalLM(tiny_llama_config()).eval()
    else:
        model = tiny_mohd(seed=7, dtype=torch.float32, **SWITCHES["K2_topk"])
        assert model.config.resolved_impl == "gather"
    ids = _ids(3, 40)
    with torch.no_grad():
        ref = model(ids).logits
        model.save_pretrained(tmp_path)
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager")
        assert torch.equal(loaded.eval()(ids).logits, ref)
        for offset in (1, 3, 5):
            assert torch.equal(_misaligned(model, offset)(ids).logits, ref), offset


def test_mismatched_widths_masks_and_labels_raise_clear_errors():
    """Each of these used to crash deep in torch (embedding width, FFN width, labels length) or, for a 2-D
    attention mask of the wrong length, run with the causal mask silently padded or cut (Llama does the same)."""
    model = tiny_mohd(seed=0)  # H = 48
    ids = _ids(2, 7)
    ref = model(ids).logits
    with pytest.raises(ValueError, match=r"inputs_embeds must have hidden_size=48 features.*\(2, 7, 24\)"):
        model(inputs_embeds=torch.zeros(2, 7, 24, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"attention_mask must have shape.*\(2, 7\), got \(2, 5\)"):
        model(ids, attention_mask=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask must have shape.*\(2, 7\), got \(1, 7\)"):
        model(ids, attention_mask=torch.ones(1, 7, dtype=torch.long))
    torch.testing.assert_close(model(ids, attention_mask=torch.ones(2, 7, dtype=torch.long)).logits, ref)
    with pytest.raises(ValueError, match=r"labels must have the shape.*\(2, 7\), got \(2, 3\)"):
        model(ids, labels=ids[:, :3])
    with pytest.raises(TypeError, match="labels must have an integer dtype"):
        model(ids, labels=ids.double())
    # cached decoding passes a mask over cached + new positions: accepted
    out = model(ids, use_cache=True)
    step = model(ids[:, :1], cache=out.cache, attention_mask=torch.ones(2, 8, dtype=torch.long))
    assert step.logits.shape == (2, 1, VOCAB)
    ffn = MoHDFeedForward(tiny_mohd_config(placement="ffn"))
    with pytest.raises(ValueError, match=r"hidden_states must have shape \(\.\.\., hidden_size=48\), got \(3, 24\)"):
        ffn(torch.randn(3, 24))


def test_accounting_and_from_llama_arguments_are_validated():
    model = tiny_mohd(seed=0)
    with pytest.raises(TypeError, match="context must be a non-negative int, got 2.5"):
        activated_flops(model, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context"):
        activated_flops(model, -1)
    assert activated_flops(model, np.int64(4)) == activated_flops(model, 4)
    with pytest.raises(ValueError, match=rf"token must be an int in \[0, {VOCAB - 1}\], got {VOCAB}"):
        count_touched_parameters(model, VOCAB)
    with pytest.raises(TypeError, match="llama_config must be a transformers LlamaConfig, got dict"):
        MoHDConfig.from_llama({"hidden_size": 24})  # type: ignore[arg-type]


def test_positional_forward_arguments_follow_llama():
    """``logits_to_keep`` is Llama's eighth positional argument; MoHD used to take ``output_hidden_states`` there, so
    ``model(ids, None, None, None, None, None, False, 1)`` returned every position's logits and hidden states."""

    def positional(cls) -> list[str]:
        params = inspect.signature(cls.forward).parameters.values()
        return [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]

    assert positional(MoHDForCausalLM) == positional(LlamaForCausalLM)
    assert positional(MoHDModel) == positional(LlamaModel)
    llama, model = _dense_pair()
    ids = _ids(2, 7)
    a, b = llama(ids, None, None, None, None, None, False, 1), model(ids, None, None, None, None, None, False, 1)
    assert a.logits.shape == b.logits.shape == (2, 1, VOCAB) and b.hidden_states is None
    torch.testing.assert_close(b.logits, a.logits)


@pytest.mark.parametrize("routed", [1, 2])
def test_padded_tokens_are_left_out_of_the_aux_loss(routed):
    """As in HF Mixtral's load-balancing loss: a right-padded batch with its attention mask has the aux loss (and so
    the loss) of the unpadded sequence; the padding's routing used to be counted."""
    model = tiny_mohd(seed=0, num_routed=routed, num_shared=3)
    ids = _ids(1, 6)
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    ref = model(ids).aux_loss
    assert ref is not None
    torch.testing.assert_close(model(padded, attention_mask=mask).aux_loss, ref, rtol=1e-12, atol=0)
    assert not torch.allclose(model(padded).aux_loss, ref)  # without the mask the padding counts
    assert torch.equal(model(ids, attention_mask=torch.ones(1, 6, dtype=torch.long)).aux_loss, ref)
    labels = torch.where(mask.bool(), padded, -100)
    torch.testing.assert_close(
        model(padded, attention_mask=mask, labels=labels).loss, model(ids, labels=ids).loss, rtol=1e-12, atol=0
    )


def test_output_hidden_states_match_llama():
    """Llama's last ``hidden_states`` entry is the final normed state (``last_hidden_state``); MoHD returned the last
    layer's output before the norm."""
    llama, model = _dense_pair()
    ids = _ids(2, 7)
    a, b = llama(ids, output_hidden_states=True), model(ids, output_hidden_states=True)
    assert len(a.hidden_states) == len(b.hidden_states) == 3
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        torch.testing.assert_close(y, x)
    sparse = tiny_mohd(seed=0)
    base = sparse.model(ids, output_hidden_states=True)
    assert torch.equal(base.hidden_states[-1], base.last_hidden_state)


@pytest.mark.parametrize("kind", ["llama", "mohd"])
def test_touched_count_counts_a_tied_head_once(kind):
    """With tie_word_embeddings the LM head is the embedding's tensor: count_active_parameters counts it once, and
    count_touched_parameters used to count it twice (the embedding and the head module both ran)."""
    lcfg = tiny_llama_config(tie_word_embeddings=True)
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(lcfg)
    else:
        model = MoHDForCausalLM(MoHDConfig.from_llama(lcfg, expansion=2, num_subdims=8, num_shared=3, num_routed=1))
    assert model.lm_head.weight is model.get_input_embeddings().weight
    pc, touched = count_active_parameters(model), count_touched_parameters(model)
    assert touched["projection"] == pc.projection_active
    assert touched["active"] == pc.active
    if kind == "llama":
        assert pc.active == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("top_k", [1, 2])
def test_touched_count_measures_mixtral_experts(top_k):
    """count_touched_parameters missed Mixtral's stacked experts (they are not q/k/v/o/gate/up/down Linears): it
    reported the attention projections alone (32,768 of 81,920 active entries at top-1 of 4)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=24,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=top_k,
    )
    torch.manual_seed(0)
    model = MixtralForCausalLM(cfg)
    pc, touched = count_active_parameters(model), count_touched_parameters(model)
    assert touched["projection"] == pc.projection_active < pc.projection_total
    assert touched["active"] == pc.active
