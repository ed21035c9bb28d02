"""transformers.Trainer checkpoints (adapters only, resumable, loadable) and mixed-adapter generation."""

from __future__ import annotations

import pytest
import torch
from bslora_testing import bs_config, randomize, tied_llama, tiny_llama, train

from bslora import BSLoRAModel, get_bslora_model
from bslora.model import STATE_CONFIG_PREFIX, TRAINER_WEIGHTS_NAME

IDS = torch.randint(0, 64, (8, 7), generator=torch.Generator().manual_seed(0))


def _bslora(seed: int = 0) -> BSLoRAModel:
    base = tied_llama()
    torch.manual_seed(100 + seed)
    return get_bslora_model(base, bs_config("slice"))


def _adapters(m: BSLoRAModel) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.adapter_state_dict().items()}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_trainer_checkpoints_adapters_only_resume_equals_uninterrupted_and_load(tmp_path):
    """The default save path of ``transformers.Trainer`` on a tied-embedding Llama: checkpoints hold the adapters
    only (no base tensor, no shared-memory crash), resuming from one gives the uninterrupted run's adapters, and
    ``BSLoRAModel.from_pretrained`` serves a checkpoint."""
    pytest.importorskip("accelerate")
    from safetensors.torch import load_file

    whole = train(_bslora(), tmp_path / "run", 4, save_steps=2)  # uninterrupted; writes checkpoint-2 and -4
    ckpt = tmp_path / "run" / "checkpoint-2"
    sd = load_file(str(ckpt / TRAINER_WEIGHTS_NAME))
    m = _bslora()
    assert set(sd) == set(m.state_dict())
    assert not any("embed_tokens" in k or "lm_head" in k or k.endswith("base_layer.weight") for k in sd)
    assert f"{STATE_CONFIG_PREFIX}default" in sd
    n_adapter = sum(v.numel() for k, v in sd.items() if not k.startswith(STATE_CONFIG_PREFIX))
    assert n_adapter == m.get_nb_trainable_parameters()[0]

    resumed = train(_bslora(), tmp_path / "again", 4, save_steps=2, resume=str(ckpt))
    ref = _adapters(whole)
    got = _adapters(resumed)
    assert ref.keys() == got.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=0, atol=1e-6, msg=k)
    assert any(ref[k].abs().sum() > 0 for k in ref if k.endswith(".B"))  # training moved the B factors

    loaded = BSLoRAModel.from_pretrained(tied_llama(), tmp_path / "run" / "checkpoint-4").eval()
    whole.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=IDS).logits, whole(input_ids=IDS).logits, rtol=0, atol=1e-6)
    assert not any(p.requires_grad for p in loaded.parameters())


def test_state_dict_round_trip_and_config_checks(tmp_path):
    m = get_bslora_model(tiny_llama(), bs_config("kron"))
    m.add_adapter("b", bs_config("gate"))
    randomize(m)
    sd = m.state_dict()
    assert {f"{STATE_CONFIG_PREFIX}default", f"{STATE_CONFIG_PREFIX}b"} <= set(sd)
    fresh = get_bslora_model(tiny_llama(), bs_config("kron"))
    fresh.add_adapter("b", bs_config("gate"))
    assert fresh.load_state_dict(sd) is not None  # strict: the base keys are not required
    with torch.no_grad():
        torch.testing.assert_close(fresh(input_ids=IDS).logits, m(input_ids=IDS).logits, rtol=0, atol=0)
    other = get_bslora_model(tiny_llama(), bs_config("slice"))
    with pytest.raises(RuntimeError, match="differs from the model's"):
        other.load_state_dict({k: v for k, v in sd.items() if "'b'" not in k}, strict=False)
    with pytest.raises(RuntimeError, match="does not have"):
        fresh2 = get_bslora_model(tiny_llama(), bs_config("kron"))
        fresh2.load_state_dict(sd, strict=False)
    # a full dict (base included) still loads
    full = {f"base_model.{k}": v for k, v in m.base_model.state_dict().items()}
    full.update({k: v for k, v in sd.items() if k.startswith(("bslora_", STATE_CONFIG_PREFIX))})
    fresh.load_state_dict(full)
    with pytest.raises(FileNotFoundError, match="Trainer checkpoint"):
        BSLoRAModel.from_pretrained(tiny_llama(), tmp_path)


def test_generate_with_adapter_names_equals_each_row_alone():
    m = get_bslora_model(tiny_llama(), bs_config("slice"), "a")
    m.add_adapter("b", bs_config("kron", r_local=3))
    randomize(m, seed=2, scale=0.6)
    m.eval()
    prompts = IDS[:3, :4]
    rows = ["b", "__base__", "a"]
    kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    mixed = m.generate(prompts, adapter_names=rows, **kw)
    for i, name in enumerate(rows):
        if name == "__base__":
            with m.disable_adapter():
                alone = m.generate(prompts[i : i + 1], **kw)
        else:
            m.set_adapter(name)
            alone = m.generate(prompts[i : i + 1], **kw)
        assert torch.equal(mixed[i : i + 1], alone), name
    assert not torch.equal(mixed[0], mixed[2])  # the adapters differ in what they generate
    beams = m.generate(prompts, adapter_names=rows, num_beams=2, **kw)
    assert beams.shape[0] == 3
    with pytest.raises(ValueError, match="batch size"):
        m.generate(prompts, adapter_names=["a"], **kw)


def test_unmerged_adapter_flops_are_7_3_of_lora8_at_the_readme_shapes():
    """The README's serving note: unmerged, SS(2,4,16) runs 7/3 = 2.33x LoRA-8's adapter FLOPs (matmul FLOPs
    counted by torch.utils.flop_counter; base subtracted) at hidden 64 / intermediate 128; merged, zero."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    from bslora import BSLoRAConfig

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4)  # fmt: skip
    ids = torch.randint(0, 128, (2, 8))

    def flops(m) -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            m(input_ids=ids)
        return fc.get_total_flops()

    base = flops(LlamaForCausalLM(cfg).eval())
    ss = get_bslora_model(LlamaForCausalLM(cfg), BSLoRAConfig(2, 4, 16)).eval()
    l8 = get_bslora_model(LlamaForCausalLM(cfg), BSLoRAConfig(8, 0, 0)).eval()
    ratio = (flops(ss) - base) / (flops(l8) - base)
    assert abs(ratio - 7 / 3) < 1e-12
    ss.merge_adapter()
    assert flops(ss) == base
