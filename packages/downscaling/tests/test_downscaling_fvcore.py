"""FlopCounterMode's counts (``count_flops``, ``profile``) against fvcore's ``FlopCountAnalysis`` on the same models:
fvcore counts multiply-adds, so 2 x its total must equal FlopCounterMode's; it skips SDPA attention."""

from __future__ import annotations

import pytest
import torch
from ds_testing import tiny_llama, tokens
from torch import nn

from downscaling.flops import analytic_llama, count_flops, fvcore_flops
from downscaling.profiling import profile

pytest.importorskip("fvcore")


def test_pure_mlp_equals_fvcore():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    x = torch.randn(5, 16)
    fv = fvcore_flops(mlp, x)
    assert fv["flops"] == count_flops(mlp, x) == 2 * 5 * (16 * 32 + 32 * 8)


@pytest.mark.parametrize("kw", [{}, {"kv": 2}, {"tied": False}])
def test_llama_eager_attention_equals_fvcore(kw):
    m = tiny_llama(**kw)
    m.config._attn_implementation = "eager"  # explicit matmuls, which fvcore counts
    x = tokens(2, 16)
    fv = fvcore_flops(m, x)
    p = profile(m, x, n_runs=1, energy="estimate", train_flops=False)
    assert fv["flops"] == p.flops_per_token_fwd * x.numel() == count_flops(m, x)
    assert "aten::scaled_dot_product_attention" not in fv["unsupported"]


def test_llama_sdpa_fvcore_misses_exactly_the_attention_term():
    m = tiny_llama(kv=2)
    m.config._attn_implementation = "sdpa"
    b, t = 2, 16
    x = tokens(b, t)
    fv = fvcore_flops(m, x)
    g = m.config
    attention = b * 4 * t * t * g.num_attention_heads * (g.hidden_size // g.num_attention_heads) * g.num_hidden_layers
    assert fv["unsupported"].get("aten::scaled_dot_product_attention") == g.num_hidden_layers
    assert fv["flops"] == count_flops(m, x) - attention == b * analytic_llama(g, t).forward - attention
