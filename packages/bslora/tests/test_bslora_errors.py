"""Bad input raises a clear error naming the argument, the value and what was expected."""

from __future__ import annotations

import pytest
import torch
from bslora_testing import ToyDecoder, bs_config
from torch import nn

from bslora import BSLoRAConfig, get_bslora_model


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"r_local": -1}, r"r_local must be a non-negative int, got -1"),
        ({"r_intra": 2.5}, r"r_intra must be a non-negative int, got 2.5"),
        ({"r_local": 0, "r_intra": 0, "r_inter": 0}, r"all 0"),
        ({"share_mode": "ring"}, r"share_mode must be one of .*got 'ring'"),
        ({"kron_share_size": 0}, r"kron_share_size must be a positive int, got 0"),
        ({"gate_share_size": -4}, r"gate_share_size must be a positive int, got -4"),
        ({"lora_dropout": 1.0}, r"lora_dropout must be a float in \[0, 1\), got 1.0"),
        ({"lora_dropout": -0.1}, r"lora_dropout must be a float in \[0, 1\), got -0.1"),
        ({"init_lora_weights": "zeros"}, r"init_lora_weights must be .*got 'zeros'"),
        ({"slice_align": "end"}, r"slice_align must be .*got 'end'"),
        ({"target_modules": []}, r"target_modules must be a non-empty list"),
        ({"layers_pattern": r"layers\.\d+"}, r"capture group"),
        ({"lora_alpha": 16, "r_local": 0}, r"needs r_local > 0"),
        ({"scaling": float("nan")}, r"scaling must be a float > 0 and finite, got nan"),
        ({"scaling": -3}, r"scaling must be a float > 0, got -3"),
        ({"scaling": 0}, r"scaling must be a float > 0, got 0"),
        ({"lora_alpha": 0}, r"lora_alpha must be a float > 0, got 0"),
        ({"lora_alpha": float("inf")}, r"lora_alpha must be a float > 0 and finite, got inf"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BSLoRAConfig(**kwargs)


def test_scale_from_lora_alpha():
    assert BSLoRAConfig().scale == 2.0
    assert BSLoRAConfig(lora_alpha=16, r_local=8).scale == 2.0
    assert BSLoRAConfig(2, 4, 16, lora_alpha=44, scale_by="sum").scale == 2.0


def test_targets_matching_nothing_lists_linear_names():
    with pytest.raises(ValueError, match=r"matched no module.*\['down_proj', 'k_proj'"):
        get_bslora_model(ToyDecoder(), BSLoRAConfig(target_modules=["o_proj"]))


def test_kron_not_divisible_names_module_and_shape():
    with pytest.raises(ValueError, match=r"kron_share_size=3.*layers\.0\.q_proj.*out=8, in=8"):
        get_bslora_model(ToyDecoder(d=8), BSLoRAConfig(share_mode="kron", kron_share_size=3))


def test_missing_layer_index_with_intra():
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"r_intra=4 needs a layer index.*q_proj"):
        get_bslora_model(model, BSLoRAConfig())
    # without the intra branch no layer index is needed
    get_bslora_model(model, BSLoRAConfig(r_intra=0))


@pytest.mark.parametrize("bad", [nn.Embedding(10, 4), nn.Conv2d(2, 2, 3)])
def test_unsupported_module_type(bad):
    model = nn.Module()
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].q_proj = bad
    with pytest.raises(TypeError, match=r"layers\.0\.q_proj.*supports nn.Linear"):
        get_bslora_model(model, BSLoRAConfig())


def test_adapter_names_errors():
    m = get_bslora_model(ToyDecoder(), bs_config("slice")).eval()
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"adapter_names has 3 entries, expected the batch size 2"):
        m(x, adapter_names=["default"] * 3)
    with pytest.raises(ValueError, match=r"unknown adapter name\(s\) \['nope'\]; loaded adapters: \['default'\]"):
        m(x, adapter_names=["default", "nope"])
    m.merge_adapter()
    with pytest.raises(ValueError, match=r"while an adapter is merged"):
        m(x, adapter_names=["default", "__base__"])
    m.unmerge_adapter()
    m(x, adapter_names=["default", "__base__"])


def test_load_missing_folder(tmp_path):
    m = get_bslora_model(ToyDecoder(), bs_config("slice"))
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        m.load_adapter(tmp_path, "x")


def test_counts_refuse_the_kron_config_that_injection_refuses():
    from bslora import count_bslora_parameters

    cfg = BSLoRAConfig(share_mode="kron", kron_share_size=3)
    with pytest.raises(ValueError, match=r"kron_share_size=3.*layers\.0\.q_proj.*out=8, in=8"):
        count_bslora_parameters(ToyDecoder(d=8), cfg)
    with pytest.raises(ValueError, match=r"kron_share_size=3"):
        get_bslora_model(ToyDecoder(d=8), cfg)


def test_adapter_names_must_be_a_list_of_names_in_eval_mode():
    from icml25_shared.validate import ArgumentTypeError

    m = get_bslora_model(ToyDecoder(), bs_config("slice"), "a")
    m.add_adapter("aaa", bs_config("slice"))
    m.eval()
    x = torch.randn(3, 2, 8)
    with pytest.raises(ArgumentTypeError, match=r"adapter_names must be a list of adapter names.*got 'aaa'"):
        m(x, adapter_names="aaa")  # not split into ["a", "a", "a"]
    with pytest.raises(ArgumentTypeError, match=r"adapter_names must hold str names"):
        m(x, adapter_names=["a", 1, "a"])
    m.train()
    with pytest.raises(ValueError, match=r"training mode"):
        m(x, adapter_names=["a", "aaa", "a"])
    m.eval()
    m(x, adapter_names=("a", "aaa", "__base__"))


def test_fan_in_fan_out_on_nn_linear_warns_and_is_ignored():
    x = torch.randn(2, 3, 8)
    torch.manual_seed(0)
    ref = get_bslora_model(ToyDecoder(), bs_config("slice", r_intra=0, r_inter=0)).eval()
    torch.manual_seed(0)
    msg = r"fan_in_fan_out=True but \['layers\.0\.q_proj'.*\(10 targets\) are nn\.Linear"
    with pytest.warns(UserWarning, match=msg):
        m = get_bslora_model(ToyDecoder(), bs_config("slice", r_intra=0, r_inter=0, fan_in_fan_out=True)).eval()
    assert not any(layer.fan_in_fan_out for _, layer in m.bslora_layers())
    with torch.no_grad():
        m.load_adapter_state_dict(ref.adapter_state_dict())
        for (_, a), (_, b) in zip(m.bslora_layers(), ref.bslora_layers()):
            a.base_layer.load_state_dict(b.base_layer.state_dict())
        torch.testing.assert_close(m(x), ref(x))
