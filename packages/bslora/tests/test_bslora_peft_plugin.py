"""``bslora.peft_plugin``: peft's ``get_peft_model`` builds a BSLoRA model equal to ``get_bslora_model``."""

from __future__ import annotations

import pytest
import torch
from bslora_testing import bs_config, randomize, tiny_llama

from bslora import BSLoRAConfig, get_bslora_model

peft = pytest.importorskip("peft")
plugin = pytest.importorskip("bslora.peft_plugin")

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

IDS = torch.randint(0, 64, (3, 7), generator=torch.Generator().manual_seed(0))


def _peft_cfg(mode: str) -> plugin.BSLoRAPeftConfig:
    return plugin.BSLoRAPeftConfig(**vars(bs_config(mode)))


def test_config_is_a_peft_config_with_the_same_validation():
    cfg = plugin.BSLoRAPeftConfig(r_local=2, r_intra=4, r_inter=16)
    assert isinstance(cfg, peft.PeftConfig) and isinstance(cfg, BSLoRAConfig)
    assert cfg.peft_type == "BSLORA" and cfg.task_type == "CAUSAL_LM"
    assert cfg.to_bslora_config() == BSLoRAConfig(r_local=2, r_intra=4, r_inter=16)
    with pytest.raises(ValueError, match="share_mode"):
        plugin.BSLoRAPeftConfig(share_mode="tile")


def test_get_peft_model_equals_get_bslora_model(mode):
    with plugin.registered():
        assert plugin.is_registered()
        pm = peft.get_peft_model(tiny_llama(), _peft_cfg(mode))
        assert isinstance(pm.base_model, plugin.BSLoRAPeftTuner)
        randomize(pm)
        ours = get_bslora_model(tiny_llama(), bs_config(mode)).eval()
        ours.load_adapter_state_dict(pm.base_model.adapter_state_dict())
        pm.eval()
        ref = ours(input_ids=IDS).logits
        assert torch.equal(pm(input_ids=IDS).logits, ref)
        # trainable count: each shared tensor once, as in BSLoRAModel
        assert pm.get_nb_trainable_parameters()[0] == ours.get_nb_trainable_parameters()[0]
        # mixed batch through peft's adapter_names hook, with a "__base__" row
        base_logits = tiny_llama()(IDS).logits
        mixed = pm(input_ids=IDS, adapter_names=["default", "__base__", "default"]).logits
        torch.testing.assert_close(mixed[[0, 2]], ref[[0, 2]], rtol=0, atol=1e-5)
        torch.testing.assert_close(mixed[1], base_logits[1], rtol=0, atol=1e-5)
        # training step reaches the shared tensors; merge_and_unload gives the plain model
        pm.train()
        pm(input_ids=IDS, labels=IDS).loss.backward()
        assert pm.base_model.bslora_shared["default"]["inter"].B.grad is not None
        pm.eval()
        merged = pm.merge_and_unload()
        assert type(merged).__name__ == "LlamaForCausalLM"
        torch.testing.assert_close(merged(IDS).logits, ref, rtol=0, atol=1e-5)
    assert not plugin.is_registered()


def test_peft_save_pretrained_from_pretrained_add_set_and_load_adapter(tmp_path):
    """peft's own adapter management on a BSLoRA PeftModel: save_pretrained (adapter tensors only, each shared
    tensor once), PeftModel.from_pretrained, add_adapter, set_adapter (inference_mode freezes) and load_adapter."""
    with plugin.registered():
        pm = peft.get_peft_model(tiny_llama(), _peft_cfg("slice"))
        randomize(pm)
        pm.eval()
        ref = pm(input_ids=IDS).logits
        pm.save_pretrained(str(tmp_path))
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / "adapter_model.safetensors"))
        ours = pm.base_model.adapter_state_dict()
        assert len(saved) == len(ours) and sum(v.numel() for v in saved.values()) == sum(
            v.numel() for v in ours.values()
        )
        assert not any(".default." in k for k in saved)  # peft's layout: the adapter name is not stored
        again = peft.PeftModel.from_pretrained(tiny_llama(), str(tmp_path)).eval()
        assert torch.equal(again(input_ids=IDS).logits, ref)
        pm.add_adapter("other", _peft_cfg("kron"))
        assert pm.active_adapter == "default" and "other" in pm.base_model.peft_config
        pm.set_adapter("other")
        assert pm.base_model.active_adapter == "other"
        assert pm.base_model.bslora_shared["other"]["inter"].B.requires_grad
        pm.set_adapter("other", inference_mode=True)
        assert not pm.base_model.bslora_shared["other"]["inter"].B.requires_grad
        pm.load_adapter(str(tmp_path), "loaded")
        pm.set_adapter("loaded")
        assert torch.equal(pm(input_ids=IDS).logits, ref)
        with pytest.raises(ValueError, match="already exists"):
            pm.add_adapter("other", _peft_cfg("slice"))


def test_trainer_through_peft_saves_resumes_and_loads(tmp_path):
    """``transformers.Trainer`` on the peft-wrapped model: checkpoints are peft adapter folders; resuming from one
    gives the uninterrupted run's adapters; ``PeftModel.from_pretrained`` serves the final one."""
    pytest.importorskip("accelerate")
    from bslora_testing import tied_llama, train

    def fresh():
        base = tied_llama()
        torch.manual_seed(100)
        return peft.get_peft_model(base, _peft_cfg("slice"))

    with plugin.registered():
        whole = train(fresh(), tmp_path / "run", 2, save_steps=1)
        assert (tmp_path / "run" / "checkpoint-1" / "adapter_model.safetensors").is_file()
        resumed = train(fresh(), tmp_path / "again", 2, save_steps=1, resume=str(tmp_path / "run" / "checkpoint-1"))
        ref, got = whole.base_model.adapter_state_dict(), resumed.base_model.adapter_state_dict()
        for k in ref:
            torch.testing.assert_close(got[k], ref[k], rtol=0, atol=1e-6, msg=k)
        loaded = peft.PeftModel.from_pretrained(tied_llama(), str(tmp_path / "run" / "checkpoint-2")).eval()
        whole.eval()
        torch.testing.assert_close(loaded(input_ids=IDS).logits, whole(input_ids=IDS).logits, rtol=0, atol=1e-6)


def test_register_is_idempotent_and_refuses_a_foreign_entry():
    from peft.mapping import PEFT_TYPE_TO_TUNER_MAPPING

    with plugin.registered():
        plugin.register()
        assert PEFT_TYPE_TO_TUNER_MAPPING["BSLORA"] is plugin.BSLoRAPeftTuner
    PEFT_TYPE_TO_TUNER_MAPPING["BSLORA"] = object
    try:
        with pytest.raises(KeyError, match="BSLORA"):
            plugin.register()
    finally:
        del PEFT_TYPE_TO_TUNER_MAPPING["BSLORA"]
