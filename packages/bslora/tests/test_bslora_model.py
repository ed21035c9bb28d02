"""Injection, merge, export, tying, counts, save/load, mixed batches and gradients of BSLoRAModel."""

from __future__ import annotations

import copy

import pytest
import torch
from bslora_testing import (
    ToyDecoder,
    assert_mixed_equals_rows_alone,
    bs_config,
    randomize,
    tiny_llama,
    tiny_llama_config,
)

from bslora import (
    BSLoRAConfig,
    BSLoRALinear,
    BSLoRAModel,
    count_bslora_parameters,
    count_lora_parameters,
    export_to_lora,
    get_bslora_model,
)
from icml25_shared.training import count_parameters

PEFT_WARNING = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

IDS = torch.randint(0, 64, (3, 7), generator=torch.Generator().manual_seed(0))


def test_zero_init_is_bitwise_base(mode):
    base = tiny_llama()
    ref = base(IDS).logits
    m = get_bslora_model(base, bs_config(mode, lora_dropout=0.1)).eval()
    assert torch.equal(m(input_ids=IDS).logits, ref)
    # B = 0 but A and the samplers are random: the zero comes from B alone
    pair = m.bslora_shared["default"]["inter"]
    assert torch.count_nonzero(pair.A) > 0 and torch.count_nonzero(pair.B) == 0


def test_merge_equals_unmerged_and_unmerge_restores(mode):
    base = tiny_llama()
    w0 = {n: p.detach().clone() for n, p in base.named_parameters()}
    m = get_bslora_model(base, bs_config(mode)).eval()
    randomize(m)
    with torch.no_grad():
        unmerged = m(input_ids=IDS).logits
        m.merge_adapter()
        merged = m(input_ids=IDS).logits
        torch.testing.assert_close(merged, unmerged, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(unmerged, m.base_model.__class__(m.config)(IDS).logits)
        m.unmerge_adapter()
    for n, layer in m.bslora_layers():
        torch.testing.assert_close(layer.base_layer.weight, w0[n + ".weight"], rtol=0, atol=1e-6)


def test_merge_and_unload_returns_plain_model():
    m = get_bslora_model(tiny_llama(), bs_config("slice")).eval()
    randomize(m)
    with torch.no_grad():
        ref = m(input_ids=IDS).logits
        plain = m.merge_and_unload()
        assert not any(isinstance(x, BSLoRALinear) for x in plain.modules())
        torch.testing.assert_close(plain(IDS).logits, ref, rtol=1e-5, atol=1e-5)


def test_rank_of_update(mode):
    cfg = BSLoRAConfig(r_local=2, r_intra=3, r_inter=4, share_mode=mode, kron_share_size=8, gate_share_size=16)
    m = get_bslora_model(tiny_llama(dtype=torch.float64), cfg)
    randomize(m)
    for _, layer in m.bslora_layers():
        rank = torch.linalg.matrix_rank(layer.get_delta_weight("default")).item()
        if mode == "gate":
            assert rank <= 2 + 2
        else:
            assert rank == min(2 + 3 + 4, layer.in_features, layer.out_features)
        A, B = layer.effective_factors("default")
        assert A.shape[0] == (4 if mode == "gate" else 9)
        torch.testing.assert_close(B @ A, layer.get_delta_weight("default"))


@PEFT_WARNING
def test_export_reproduces_bslora_and_loads_into_peft(mode):
    peft = pytest.importorskip("peft")
    base = tiny_llama()
    plain = copy.deepcopy(base)
    m = get_bslora_model(base, bs_config(mode)).eval()
    randomize(m)
    lcfg, sd = export_to_lora(m)
    assert lcfg["r"] == (4 if mode == "gate" else 9)
    with torch.no_grad():
        ref = m(input_ids=IDS).logits
        # base + exported plain LoRA by hand
        manual = copy.deepcopy(plain)
        for n, mod in manual.named_modules():
            k = f"base_model.model.{n}.lora_A.weight"
            if k in sd:
                mod.weight += sd[k.replace("lora_A", "lora_B")] @ sd[k]
        torch.testing.assert_close(manual(IDS).logits, ref, rtol=1e-5, atol=1e-5)
        pm = peft.get_peft_model(plain, peft.LoraConfig(**{k: v for k, v in lcfg.items() if k != "peft_type"}))
        res = peft.set_peft_model_state_dict(pm, sd)
        assert not [k for k in res.missing_keys if "lora_" in k]
        torch.testing.assert_close(pm.eval()(input_ids=IDS).logits, ref, rtol=1e-5, atol=1e-5)


@PEFT_WARNING
def test_no_sharing_equals_peft_lora():
    peft = pytest.importorskip("peft")
    base = tiny_llama()
    plain = copy.deepcopy(base)
    r = 4
    m = get_bslora_model(base, BSLoRAConfig(r_local=r, r_intra=0, r_inter=0, lora_dropout=0.0)).eval()
    randomize(m)
    targets = ["q_proj", "k_proj", "v_proj", "up_proj", "down_proj"]
    pm = peft.get_peft_model(plain, peft.LoraConfig(r=r, lora_alpha=2 * r, target_modules=targets)).eval()
    with torch.no_grad():
        for n, layer in m.bslora_layers():
            pl = pm.base_model.model.get_submodule(n)
            pl.lora_A["default"].weight.copy_(layer.lora_A["default"].weight)
            pl.lora_B["default"].weight.copy_(layer.lora_B["default"].weight)
        torch.testing.assert_close(pm(input_ids=IDS).logits, m(input_ids=IDS).logits, rtol=1e-6, atol=1e-6)
    assert m.get_nb_trainable_parameters()[0] == pm.get_nb_trainable_parameters()[0]


def test_tying_one_tensor_grad_is_sum_and_base_frozen():
    torch.manual_seed(0)
    m = get_bslora_model(tiny_llama(), bs_config("slice"))
    randomize(m)
    layers = [layer for _, layer in m.bslora_layers()]
    inter = m.bslora_shared["default"]["inter"]
    assert {layer._shared["default"][1].A.data_ptr() for layer in layers} == {inter.A.data_ptr()}
    intra0 = m.bslora_shared["default"]["intra"]["0"]
    layer0 = [layer for layer in layers if layer.layer_idx == 0]
    assert {layer._shared["default"][0].B.data_ptr() for layer in layer0} == {intra0.B.data_ptr()}
    base_before = {n: p.detach().clone() for n, p in m.base_model.named_parameters() if "lora_" not in n}

    m.train()
    loss = m(input_ids=IDS, labels=IDS).loss
    loss.backward()
    g_shared = inter.B.grad.clone()

    # hand-untied copy: every module gets its own clone of the inter pair
    m.zero_grad()
    clones = []
    for layer in layers:
        c = copy.deepcopy(inter)
        clones.append(c)
        layer._shared["default"] = (layer._shared["default"][0], c)
    m(input_ids=IDS, labels=IDS).loss.backward()
    summed = sum(c.B.grad for c in clones)
    torch.testing.assert_close(g_shared, summed, rtol=1e-5, atol=1e-7)
    for layer in layers:
        layer._shared["default"] = (layer._shared["default"][0], inter)

    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    m.zero_grad()
    m(input_ids=IDS, labels=IDS).loss.backward()
    opt.step()
    assert all(layer._shared["default"][1].B is inter.B for layer in layers)
    for n, p in m.base_model.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]), n
            assert not p.requires_grad


def test_shared_projection_reuse_matches_without_reuse(monkeypatch):
    from bslora.layer import SharedPair

    m = get_bslora_model(tiny_llama(), bs_config("slice")).eval()
    randomize(m)
    calls = {"n": 0}
    orig = SharedPair.project_slices

    def counting(pairs, x, start, reuse):
        before = pairs[0]._cache
        out = orig(pairs, x, start, reuse)
        calls["n"] += int(pairs[0]._cache is None or pairs[0]._cache is not before)  # computed, not reused
        assert len(pairs) == 2  # intra and inter projected by one matmul
        return out

    monkeypatch.setattr(SharedPair, "project_slices", staticmethod(counting))
    with torch.no_grad():
        y = m(input_ids=IDS).logits
    # per layer: q, k, v share one projection (3 -> 1); up and down have other inputs: 3 per layer
    assert calls["n"] == 3 * 2
    ref = torch.zeros_like(y)
    with torch.no_grad():
        for layer in (lay for _, lay in m.bslora_layers()):
            layer.merge("default")
        ref = m.base_model(IDS).logits
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def test_counts_llama3_8b_meta():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        num_hidden_layers=32, vocab_size=1000,
    )  # fmt: skip
    assert count_bslora_parameters(cfg, BSLoRAConfig(2, 4, 16, "slice"))["total"] == 7_667_712
    assert count_bslora_parameters(cfg, BSLoRAConfig(2, 4, 16, "gate"))["total"] == 8_028_160
    assert count_bslora_parameters(cfg, BSLoRAConfig(16, 32, 32, "kron"))["total"] == 28_866_048
    assert count_bslora_parameters(cfg, BSLoRAConfig(2, 1, 2, "slice"))["total"] == 4_513_792
    assert count_bslora_parameters(cfg, BSLoRAConfig(0, 4, 8, "gate"))["total"] == 4_472_832
    assert count_bslora_parameters(cfg, BSLoRAConfig(8, 16, 16, "kron"))["total"] == 14_439_936
    assert count_lora_parameters(cfg, 8) == 14_155_776


@pytest.mark.parametrize("ranks", [(2, 3, 4), (0, 3, 4), (2, 0, 4), (2, 3, 0)])
def test_counts_equal_unique_trainable_numel(mode, ranks):
    cfg = bs_config(mode, r_local=ranks[0], r_intra=ranks[1], r_inter=ranks[2])
    expected = count_bslora_parameters(tiny_llama_config(), cfg)
    m = get_bslora_model(tiny_llama(), cfg)
    assert count_parameters(m, trainable_only=True) == expected["total"]
    assert m.get_nb_trainable_parameters()[0] == expected["total"]


def test_save_load_roundtrip(tmp_path, mode):
    from safetensors import safe_open

    m = get_bslora_model(tiny_llama(), bs_config(mode))
    randomize(m)
    m.eval()
    with torch.no_grad():
        ref = m(input_ids=IDS).logits
    m.save_pretrained(tmp_path)
    P = count_bslora_parameters(tiny_llama_config(), bs_config(mode))["total"]
    with safe_open(str(tmp_path / "adapter_model.safetensors"), "pt") as f:
        stored = sum(f.get_tensor(k).numel() for k in f.keys())  # noqa: SIM118
    assert stored == P
    size = (tmp_path / "adapter_model.safetensors").stat().st_size
    assert 4 * P <= size <= 4 * P + 16_384
    m2 = BSLoRAModel.from_pretrained(tiny_llama(), tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(m2(input_ids=IDS).logits, ref)
    inter = m2.bslora_shared["default"]["inter"]
    assert all(layer._shared["default"][1] is inter for _, layer in m2.bslora_layers())
    # a second adapter loaded next to the first
    m2.load_adapter(tmp_path, "again")
    m2.set_adapter("again")
    with torch.no_grad():
        assert torch.equal(m2(input_ids=IDS).logits, ref)


def test_load_shape_mismatch_names_tensor(tmp_path):
    m = get_bslora_model(tiny_llama(), bs_config("slice"))
    m.save_pretrained(tmp_path)
    sd = m.adapter_state_dict()
    key = "bslora_shared.inter.A"
    sd[key] = torch.zeros(5, 5)
    with pytest.raises(ValueError, match=r"bslora_shared\.inter\.A.*\(5, 5\).*\(4, 32\)"):
        m.load_adapter_state_dict(sd)
    sd.pop(key)
    with pytest.raises(ValueError, match="missing keys"):
        m.load_adapter_state_dict(sd)


def test_mixed_batch_equals_each_row_alone(mode):
    m = get_bslora_model(tiny_llama(), bs_config(mode), "a")
    m.add_adapter("b", bs_config("slice", r_local=3, r_intra=2, r_inter=5))
    m.add_adapter("c", bs_config(mode, r_local=1, r_intra=0, r_inter=2))
    randomize(m, seed=3)
    m.eval()
    ids = torch.randint(0, 64, (5, 6), generator=torch.Generator().manual_seed(5))
    rows = ["a", "__base__", "c", "b", "a"]
    assert_mixed_equals_rows_alone(m, ids, rows)


def test_mixed_batch_factor_cache_follows_weight_updates():
    m = get_bslora_model(tiny_llama(), bs_config("slice"), "a")
    m.add_adapter("b", bs_config("slice"))
    randomize(m, seed=3)
    m.eval()
    rows = ["a", "b", "__base__"]
    ids = IDS[:3]
    with torch.no_grad():
        first = m(input_ids=ids, adapter_names=rows).logits
        assert torch.equal(m(input_ids=ids, adapter_names=rows).logits, first)  # deterministic repeat
        m.bslora_shared["b"]["inter"].B.add_(0.5)  # in-place update of one shared tensor of adapter "b"
        after = m(input_ids=ids, adapter_names=rows).logits
        m.set_adapter("b")
        torch.testing.assert_close(after[1:2], m(input_ids=ids[1:2]).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after[1], first[1]) and torch.equal(after[0], first[0])


def test_gradcheck_float64(mode):
    torch.manual_seed(0)
    m = get_bslora_model(ToyDecoder(d=8, layers=2).double(), bs_config(mode, kron_share_size=4))
    randomize(m, scale=0.5)
    m.eval()
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    names = [
        "bslora_shared.default.inter.A",
        "bslora_shared.default.intra.1.B",
        "base_model.layers.0.q_proj.lora_A.default.weight",
    ]
    if mode != "slice":
        vec = "a" if mode == "kron" else "u_in"
        names.append(f"base_model.layers.1.down_proj.inter_adapt.default.{vec}")
    params = dict(m.named_parameters())
    inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)

    def fn(*ts):
        return torch.func.functional_call(m, dict(zip(names, ts)), args=(x,))

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@PEFT_WARNING
def test_conv1d_gpt2_matches_peft_lora():
    peft = pytest.importorskip("peft")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    plain = copy.deepcopy(base)
    plain2 = copy.deepcopy(base)
    cfg = BSLoRAConfig(r_local=2, r_intra=0, r_inter=0, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True,
                       lora_dropout=0.0)  # fmt: skip
    m = get_bslora_model(base, cfg).eval()
    randomize(m)
    pm = peft.get_peft_model(plain, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn", "c_fc"],
                                                    fan_in_fan_out=True)).eval()  # fmt: skip
    with torch.no_grad():
        for n, layer in m.bslora_layers():
            pl = pm.base_model.model.get_submodule(n)
            pl.lora_A["default"].weight.copy_(layer.lora_A["default"].weight)
            pl.lora_B["default"].weight.copy_(layer.lora_B["default"].weight)
        torch.testing.assert_close(pm(input_ids=IDS).logits, m(input_ids=IDS).logits, rtol=1e-6, atol=1e-6)
    # GPT-2 (h.N.) with sharing: merge agrees with the unmerged forward
    cfg2 = BSLoRAConfig(2, 3, 4, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True, lora_dropout=0.0)
    m2 = get_bslora_model(plain2, cfg2).eval()
    randomize(m2)
    assert {layer.layer_idx for _, layer in m2.bslora_layers()} == {0, 1}
    with torch.no_grad():
        ref = m2(input_ids=IDS).logits
        m2.merge_adapter()
        torch.testing.assert_close(m2(input_ids=IDS).logits, ref, rtol=1e-5, atol=1e-5)


def test_hf_trainer_step(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    m = get_bslora_model(tiny_llama(), bs_config("slice"))
    data = [{"input_ids": IDS[i], "labels": IDS[i]} for i in range(3)]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=3, max_steps=2, learning_rate=1e-2,
        report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    before = m.bslora_shared["default"]["inter"].B.detach().clone()
    base_w = m.base_model.model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()
    Trainer(model=m, args=args, train_dataset=data).train()
    assert not torch.equal(m.bslora_shared["default"]["inter"].B, before)
    assert torch.equal(m.base_model.model.layers[0].self_attn.q_proj.base_layer.weight, base_w)


def test_adapter_management():
    m = get_bslora_model(tiny_llama(), bs_config("slice"))
    m.add_adapter("other", bs_config("kron"))
    randomize(m)
    m.set_adapter("other")
    assert m.bslora_shared["other"]["inter"].A.requires_grad
    assert not m.bslora_shared["default"]["inter"].A.requires_grad
    m.delete_adapter("other")
    assert "other" not in m.bslora_shared and m.active_adapter == "default"
    assert all("other" not in layer.configs for _, layer in m.bslora_layers())
    with pytest.raises(ValueError, match="unknown adapter"):
        m.set_adapter("other")


def test_mixed_batch_through_the_shared_grouped_kernel_equals_the_bmm_path(mode):
    """``set_kernel_impl("torch")`` routes mixed batches through ``icml25_shared.kernels.grouped_lora`` (the path CUDA
    takes, here its torch reference), with base rows as group -1: same logits as the default CPU bmm path, and the
    same gradients into every adapter's factors."""
    m = get_bslora_model(tiny_llama(), bs_config(mode), "a")
    m.add_adapter("b", bs_config("slice", r_local=3, r_intra=2, r_inter=5))
    randomize(m, seed=4)
    m.eval()
    ids = torch.randint(0, 64, (4, 5), generator=torch.Generator().manual_seed(6))
    rows = ["b", "__base__", "a", "b"]
    outs = {}
    for impl in ("auto", "torch"):
        m.set_kernel_impl(impl)
        m.zero_grad()
        logits = m(input_ids=ids, adapter_names=rows).logits
        logits.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        outs[impl] = (logits.detach(), grads)
    torch.testing.assert_close(outs["torch"][0], outs["auto"][0], rtol=1e-5, atol=1e-6)
    assert outs["torch"][1].keys() == outs["auto"][1].keys() and len(outs["auto"][1]) > 0
    for name, g in outs["auto"][1].items():
        torch.testing.assert_close(outs["torch"][1][name], g, rtol=1e-4, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="impl"):
        m.set_kernel_impl("cuda")


_TRITON_CHECK = """
import torch
from bslora import get_bslora_model
from bslora_testing import bs_config, randomize, tiny_llama
m = get_bslora_model(tiny_llama(), bs_config("slice"), "a")
m.add_adapter("b", bs_config("kron", r_local=3, r_intra=2, r_inter=5))
randomize(m, seed=4)
m.eval()
ids = torch.randint(0, 64, (3, 4), generator=torch.Generator().manual_seed(6))
outs = {}
for impl in ("auto", "triton"):
    m.set_kernel_impl(impl)
    m.zero_grad()
    logits = m(input_ids=ids, adapter_names=["b", "__base__", "a"]).logits
    logits.square().mean().backward()
    outs[impl] = (logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
torch.testing.assert_close(outs["triton"][0], outs["auto"][0], rtol=1e-5, atol=1e-5)
assert outs["triton"][1].keys() == outs["auto"][1].keys() and len(outs["auto"][1]) > 0
for name, g in outs["auto"][1].items():
    torch.testing.assert_close(outs["triton"][1][name], g, rtol=1e-4, atol=1e-6, msg=name)
print("ok")
"""


@pytest.mark.slow
def test_mixed_batch_triton_kernel_under_the_interpreter():
    """The CUDA route of mixed batches (the shared Triton ``grouped_lora``) on CPU tensors through Triton's
    interpreter, in a fresh process (the interpreter setting is read when triton is first imported)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from icml25_shared.kernels import triton_available

    if not triton_available():
        pytest.skip("triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).parent)}
    res = subprocess.run([sys.executable, "-c", _TRITON_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]
