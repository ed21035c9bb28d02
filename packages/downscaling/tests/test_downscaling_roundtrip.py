"""What a user saves is what they pruned: ``prune``'s model round-trips through ``save_pretrained`` /
``from_pretrained`` bit for bit for every method, and inputs that used to fail silently or deep inside torch are
refused with the argument, the value and the expectation."""

from __future__ import annotations

import math

import pytest
import torch
from ds_testing import tiny_llama, tokens

from downscaling.config import PruneConfig
from downscaling.prune import sparsity_of

METHODS = ("magnitude", "wanda", "sparsegpt", "heads", "channels", "layers")


def _reload(model, path):
    from transformers import LlamaForCausalLM

    model.save_pretrained(path)
    return LlamaForCausalLM.from_pretrained(path).eval()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("finalize", [None, False])
def test_save_from_pretrained_round_trip_is_bitwise(method, finalize, tmp_path):
    from downscaling import prune

    m = tiny_llama(kv=2)
    x = tokens()
    kw = {} if finalize is None else {"finalize": finalize}  # None: what prune returns by default
    r = prune(m, PruneConfig(method, 0.5, calib=x, **kw))
    loaded = _reload(r.model, tmp_path)
    want, got = r.model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), method
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=x).logits, r.model(input_ids=x).logits)
    if method in ("magnitude", "wanda", "sparsegpt"):
        assert sparsity_of(loaded)["all"] == 0.5  # the pruned zeros, not a fresh initialisation


def test_masked_model_keeps_its_masks_on_load():
    from downscaling import prune

    m = tiny_llama()
    src = prune(m, PruneConfig("magnitude", 0.5, finalize=False)).model
    dst = prune(m, PruneConfig("magnitude", 0.3, finalize=False)).model
    assert set(src.state_dict()) == set(m.state_dict())  # plain weights, loadable by the unpruned class
    dst.load_state_dict(src.state_dict())
    lin = dst.model.layers[0].mlp.down_proj
    assert hasattr(lin, "weight_mask") and sparsity_of(dst)["all"] == 0.5


@pytest.mark.parametrize(
    "method, kw, n, unit",
    [("heads", {"kv": 2}, 2, "key/value head groups"), ("layers", {"layers": 2}, 2, "decoder layers"),
     ("channels", {"mlp": 4}, 4, "MLP channels")],
)  # fmt: skip
def test_structured_sparsity_that_removes_nothing_is_refused(method, kw, n, unit):
    from downscaling import prune

    with pytest.raises(ValueError, match=rf"sparsity=0.2 removes .* 0 of the {n} {unit}.*sparsity >= "):
        prune(tiny_llama(**kw), PruneConfig(method, 0.2, calib=tokens()))


def test_token_ids_beyond_the_vocabulary_are_named():
    from downscaling import PruneConfig, distill, profile, prune

    m = tiny_llama()
    bad = tokens()
    bad[1, 3] = 65
    with pytest.raises(ValueError, match=r"calib\[0\] holds the token id 65, outside .*\[0, 65\)"):
        prune(m, PruneConfig("wanda", 0.5, calib=bad))
    with pytest.raises(ValueError, match=r"batch holds the token id 65"):
        profile(m, bad, n_runs=1, energy="estimate")
    neg = tokens()
    neg[0, 0] = -1
    with pytest.raises(ValueError, match=r"batch holds the token id -1"):
        profile(m, neg, n_runs=1, energy="estimate")
    with pytest.raises(ValueError, match=r"data \(for the teacher\) holds the token id 65"):
        distill(m, tiny_llama(hidden=16), bad.reshape(-1), steps=1, seq_len=8, batch_size=2)


def test_profile_refuses_an_empty_batch():
    from downscaling import profile

    with pytest.raises(ValueError, match=r"batch must hold at least one token, got shape \(0, 16\)"):
        profile(tiny_llama(), torch.zeros(0, 16, dtype=torch.long), n_runs=1)


def test_torch_ao_on_a_bfloat16_model_names_the_dtype():
    from downscaling import quantize

    m = tiny_llama().to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"torch.ao.*float32 models only.*torch.bfloat16.*model.float\(\)"):
        quantize(m, "int8_dynamic", "torch.ao")


def test_structured_pruning_of_gpt2_is_refused_clearly():
    from transformers import GPT2Config, GPT2LMHeadModel

    from downscaling import prune

    g = GPT2LMHeadModel(GPT2Config(vocab_size=65, n_embd=32, n_layer=2, n_head=4, n_positions=32))
    for method in ("heads", "channels", "layers"):
        with pytest.raises(ValueError, match=r"Llama-style decoder .*got GPT2LMHeadModel"):
            prune(g, PruneConfig(method, 0.5))


def test_break_even_says_which_regime():
    from downscaling.laws import Law, break_even

    cross = break_even(1e9, 1e10, 1e8, 2e11)
    assert cross.regime == "crosses" and cross > 0
    start = break_even(1e9, 1e10, 1e8, 1e9)
    assert start == 0.0 and start.regime == "small_cheaper_from_start"
    never = Law.chinchilla().break_even(7e10, 1e15, 1e6)
    assert never == math.inf and never.regime == "never"
