"""Parameter accounting against numel() (total), against the entries a one-token forward touches (active, counted
by hooks), and the exact ratios of the paper's two claims."""

from __future__ import annotations

import pytest
from mohd_testing import SWITCHES, tiny_llama_config, tiny_mohd
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from mohd import MoHDConfig, MoHDForCausalLM, count_active_parameters
from mohd.accounting import activated_flops, count_touched_parameters


@pytest.mark.parametrize("name", list(SWITCHES))
def test_total_equals_numel(name):
    model = tiny_mohd(**SWITCHES[name])
    assert count_active_parameters(model).total == sum(p.numel() for p in model.parameters())


def test_total_equals_numel_for_llama_mixtral_and_tied():
    llama = LlamaForCausalLM(tiny_llama_config())
    pc = count_active_parameters(llama)
    assert pc.total == pc.active == sum(p.numel() for p in llama.parameters())
    mix = MixtralForCausalLM(
        MixtralConfig(
            vocab_size=37,
            hidden_size=24,
            intermediate_size=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=10,
            num_local_experts=4,
            num_experts_per_tok=2,
        )
    )
    pc = count_active_parameters(mix)
    assert pc.total == sum(p.numel() for p in mix.parameters())
    assert pc.projection_total - pc.projection_active == 2 * 2 * 3 * 24 * 16
    tied = MoHDForCausalLM(MoHDConfig.from_llama(tiny_llama_config(tie_word_embeddings=True), 2, 8, 3, 1))
    assert count_active_parameters(tied).total == sum(p.numel() for p in tied.parameters())


@pytest.mark.parametrize(
    ("name", "impl"),
    [(n, "gather") for n in SWITCHES] + [(n, "masked") for n in ("default", "output_site", "ffn", "learned")],
)
def test_active_equals_entries_touched_by_one_token(name, impl):
    model = tiny_mohd(seed=1, impl=impl, **SWITCHES[name])
    pc, touched = count_active_parameters(model), count_touched_parameters(model)
    assert (touched["projection"], touched["active"]) == (pc.projection_active, pc.active)


def test_active_equals_touched_for_llama():
    llama = LlamaForCausalLM(tiny_llama_config()).double()
    assert count_active_parameters(llama).active == count_touched_parameters(llama)["active"]


def test_exact_ratios_of_the_two_claims():
    v64 = LlamaConfig(vocab_size=65, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    pv = count_active_parameters(v64)
    m64 = count_active_parameters(MoHDConfig.from_llama(v64, 1, 8, 3, 1))
    m128 = count_active_parameters(MoHDConfig.from_llama(v64, 2, 8, 3, 1))
    assert (pv.projection_active, m64.projection_active, m128.projection_total) == (81_920, 40_960, 163_840)
    assert m64.projection_active * 2 == pv.projection_active
    assert m128.projection_active == pv.projection_active and m128.projection_total == 2 * pv.projection_total
    m192 = count_active_parameters(MoHDConfig.from_llama(v64, 3, 12, 3, 1))  # the paper's 3x, delta = 1/3
    assert m192.projection_active == pv.projection_active and m192.projection_total == 3 * pv.projection_total


def test_activated_flops_ratio():
    v = tiny_llama_config(hidden=48)
    m = MoHDConfig.from_llama(v, 1, 8, 3, 1, fusion="none")
    fv, fm = activated_flops(v), activated_flops(m)
    pv, pm = count_active_parameters(v), count_active_parameters(m)
    assert fv["matmul"] - fm["matmul"] == 2 * (pv.projection_active - pm.projection_active - pm.router)
    assert activated_flops(v, context=10)["attention"] == 4 * 40 * 10 * 2
