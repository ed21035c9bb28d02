"""Fusion modules, the load-balancing loss and configuration errors, each against a closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mohd_testing import tiny_llama_config

from mohd import BlockDiagFusion, GroupFusion, MoHDConfig, MonarchFusion, load_balancing_loss


def _explicit_monarch(f: MonarchFusion) -> torch.Tensor:
    """P^T BlockDiag(L) P BlockDiag(R), every factor built as a dense matrix."""
    b, m, n = f.blocks, f.block_size, f.dim
    perm = torch.zeros(n, n, dtype=f.right.dtype)
    for i in range(b):
        for p in range(m):
            perm[p * b + i, i * m + p] = 1.0  # (b, m) layout -> (m, b) layout
    return perm.t() @ torch.block_diag(*f.left) @ perm @ torch.block_diag(*f.right)


@pytest.mark.parametrize(("dim", "blocks"), [(12, 3), (16, 4), (24, 2)])
def test_monarch_factored_equals_dense_and_param_count(dim, blocks):
    f = MonarchFusion(dim, blocks).double()
    x = torch.randn(5, dim, dtype=torch.float64)
    torch.testing.assert_close(f(x), x, rtol=0, atol=0)  # identity init is a no-op
    with torch.no_grad():
        for p in f.parameters():
            p.normal_()
    dense = _explicit_monarch(f)
    torch.testing.assert_close(f.dense_matrix(), dense, rtol=0, atol=1e-12)
    torch.testing.assert_close(f(x), x @ dense.t(), rtol=0, atol=1e-12)
    assert sum(p.numel() for p in f.parameters()) == dim * (dim // blocks + blocks)


def test_group_and_blockdiag_fusion():
    x = torch.randn(3, 4 * 5, dtype=torch.float64)
    g, bd = GroupFusion(4, 5).double(), BlockDiagFusion(4, 5).double()
    torch.testing.assert_close(g(x), x, rtol=0, atol=0)
    torch.testing.assert_close(bd(x), x, rtol=0, atol=0)
    with torch.no_grad():
        g.weight.normal_()
        bd.weight.normal_()
    torch.testing.assert_close(g(x), x @ torch.kron(g.weight, torch.eye(5, dtype=torch.float64)).t())
    torch.testing.assert_close(bd(x), x @ torch.block_diag(*bd.weight).t())


def test_load_balancing_closed_form():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]], dtype=torch.float64)
    idx = torch.tensor([[0], [1], [0], [2]])
    f = np.array([2, 1, 1]) / 4
    pbar = probs.numpy().mean(0)
    expected = 3 * float((f * pbar).sum())
    assert float(load_balancing_loss(probs, idx, 3)) == pytest.approx(expected, rel=1e-14)
    # uniform load and probabilities: exactly 1, with K = 2 as well
    uniform = torch.full((6, 3), 1 / 3, dtype=torch.float64)
    assert float(load_balancing_loss(uniform, torch.tensor([[0], [1], [2], [0], [1], [2]]), 3)) == pytest.approx(1.0)
    idx2 = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 1], [1, 2], [2, 0]])
    assert float(load_balancing_loss(uniform, idx2, 3)) == pytest.approx(1.0)
    # collapsed routing: N - N_s (the maximum)
    collapsed = torch.tensor([[1.0, 0.0, 0.0]] * 4, dtype=torch.float64)
    assert float(load_balancing_loss(collapsed, torch.zeros(4, 1, dtype=torch.long), 3)) == pytest.approx(3.0)


BASE = dict(
    vocab_size=37,
    hidden_size=48,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    head_dim=8,
    num_subdims=8,
    num_shared=3,
    num_routed=1,
)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"hidden_size": 50}, "hidden_size must be divisible by num_subdims=8, got hidden_size=50"),
        ({"num_shared": 6, "num_routed": 3}, "num_routed must be <= num_subdims - num_shared = 2, got num_routed=3"),
        ({"num_routed": 0}, "num_routed must be >= 1"),
        ({"num_shared": 9}, "num_shared must be"),
        ({"placement": "attn"}, "placement must be one of 'residual', 'ffn', got 'attn'"),
        ({"router": "hash"}, "router must be one of"),
        ({"gate_norm": "sigmoid"}, "gate_norm must be one of"),
        ({"scaling": "x"}, "scaling must be one of"),
        ({"fusion": "fft"}, "fusion must be one of"),
        ({"fusion_site": "middle"}, "fusion_site must be one of"),
        ({"impl": "triton"}, "impl must be one of"),
        ({"monarch_blocks": 5}, "monarch_blocks must divide hidden_size=48, got 5"),
        ({"gate_norm": "topk"}, "gate_norm must not be 'topk' with num_routed=1"),
        ({"router_aux_loss_coef": -0.1}, "router_aux_loss_coef must be a float >= 0.0, got -0.1"),
        ({"placement": "ffn", "intermediate_size": 30}, "intermediate_size must be divisible by num_subdims=8"),
        ({"attention_bias": True}, "attention_bias must be False"),
        ({"num_subdims": "8"}, "num_subdims must be a positive int, got '8'"),
        ({"write_gate": 1}, "write_gate must be a bool, got 1"),
    ],
)
def test_config_errors_name_argument_and_value(kw, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        MoHDConfig(**{**BASE, **kw})


@pytest.mark.parametrize("expansion", [0, -1, 1.5, True])
def test_from_llama_expansion_must_be_positive_int(expansion):
    with pytest.raises(ValueError, match="expansion must be"):
        MoHDConfig.from_llama(tiny_llama_config(), expansion=expansion, num_subdims=4, num_shared=1, num_routed=1)


def test_from_llama_keeps_inner_widths():
    cfg = MoHDConfig.from_llama(tiny_llama_config(), expansion=3, num_subdims=12, num_shared=3, num_routed=1)
    assert (cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads) == (72, 10, 4, 2)
    assert cfg.intermediate_size == 32 and cfg.active_ratio == pytest.approx(1 / 3)
    assert cfg.resolved_monarch_blocks == 8  # largest divisor of 72 that is <= sqrt(72)
    assert MoHDConfig(**{**BASE, "num_routed": 2, "num_shared": 2}).resolved_gate_norm == "topk"


def test_numpy_scalars_become_python_numbers(tmp_path):
    cfg = MoHDConfig(**{**BASE, "num_subdims": np.int64(8), "num_routed": np.int32(1), "router_aux_loss_coef": 0.5})
    assert type(cfg.num_subdims) is int and type(cfg.num_routed) is int
    cfg.save_pretrained(tmp_path)
    assert MoHDConfig.from_pretrained(tmp_path).num_subdims == 8
