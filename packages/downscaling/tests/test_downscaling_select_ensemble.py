"""Data selection, the specialist ensemble and the cost report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ds_testing import tiny_llama, tokens

from downscaling.config import EnsembleConfig, PruneConfig
from downscaling.ensemble import Ensemble, specialize_and_ensemble
from downscaling.flops import count_flops
from downscaling.report import report
from downscaling.selection import EL2N, ProxyLoss, Random, select_data


def _windows(n=20, t=17, seed=0):
    return torch.randint(0, 65, (n, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("scorer", [Random(), "proxy", "el2n"])
def test_keep_count_deterministic_complementary(scorer):
    if scorer == "proxy":
        scorer = ProxyLoss(tiny_llama())
    elif scorer == "el2n":
        scorer = EL2N(tiny_llama())
    w = _windows()
    hard = select_data(w, scorer, keep=0.5, mode="hard", seed=3)
    easy = select_data(w, scorer, keep=0.5, mode="easy", seed=3)
    assert len(hard.indices) == len(easy.indices) == 10
    assert set(hard.indices.tolist()).isdisjoint(easy.indices.tolist())
    assert set(hard.indices.tolist()) | set(easy.indices.tolist()) == set(range(20))
    again = select_data(w, scorer, keep=0.5, mode="hard", seed=3)
    assert torch.equal(again.indices, hard.indices)
    assert hard.scores[hard.indices].min() >= easy.scores[easy.indices].max()
    assert len(select_data(w, scorer, keep=0.3).indices) == 6
    assert torch.equal(hard.data, w[hard.indices])


def test_proxy_loss_equals_model_cross_entropy():
    m = tiny_llama()
    w = _windows(4)
    s = ProxyLoss(m)(w)
    with torch.no_grad():
        logits = m(input_ids=w[:, :-1]).logits.double()
    for i in range(4):
        ce = torch.nn.functional.cross_entropy(logits[i], w[i, 1:])
        assert s[i].item() == pytest.approx(ce.item(), rel=1e-9)


def test_el2n_closed_form_on_perfect_and_uniform_models():
    class Const(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, x):
            return self.logits.expand(x.shape[0], x.shape[1], -1)

    v = 5
    w = torch.randint(0, v, (3, 9), generator=torch.Generator().manual_seed(0))
    s = EL2N(Const(torch.zeros(v)))(w)  # uniform p: ||p - e_y|| = sqrt((1 - 1/v)^2 + (v - 1)/v^2)
    torch.testing.assert_close(s, torch.full((3,), math.sqrt((1 - 1 / v) ** 2 + (v - 1) / v**2), dtype=torch.float64))


@pytest.mark.parametrize(
    "kw, match",
    [({"keep": 0.0}, "keep"), ({"keep": 1.5}, "keep"), ({"mode": "medium"}, "mode"), ({"seed": -1}, "seed")],
)
def test_select_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        select_data(_windows(), **kw)


def test_select_empty_and_numpy():
    with pytest.raises(ValueError, match="dataset"):
        select_data(torch.zeros(0, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="dataset"):
        select_data([])
    r = select_data(np.zeros((4, 8), dtype=np.int32), keep=np.float64(0.5))
    assert len(r.indices) == 2


def test_ensemble_k1_equals_monolith():
    base = tiny_llama()
    data = tokens(1, 300, seed=2).reshape(-1)
    ens = specialize_and_ensemble(base, {"only": data}, EnsembleConfig(steps_per_domain=0, seq_len=16))
    x = tokens()
    with torch.no_grad():
        assert torch.equal(ens(x, "only"), base(input_ids=x).logits)
        assert torch.equal(Ensemble({"only": base}, "average")(x), base(input_ids=x).logits)


def test_ensemble_flops_sum_the_experts_run():
    experts = {"a": tiny_llama(seed=0), "b": tiny_llama(layers=1, seed=1), "c": tiny_llama(seed=2)}
    x = tokens(2, 12)
    one = {k: count_flops(m, x) for k, m in experts.items()}
    assert Ensemble(experts, "label").forward_flops(x, "b") == one["b"]
    assert Ensemble(experts, "average").forward_flops(x) == sum(one.values())
    rows = Ensemble(experts, "label").forward_flops(x, ["a", "c"])
    assert rows == count_flops(experts["a"], x[:1]) + count_flops(experts["c"], x[1:])
    mixed = Ensemble(experts, "label")(x, ["a", "b"])
    with torch.no_grad():
        torch.testing.assert_close(mixed[1], experts["b"](input_ids=x[1:]).logits[0])


def test_specialists_pruned_trained_and_routed():
    base = tiny_llama(layers=2, kv=2)
    g = torch.Generator().manual_seed(0)
    doms = {"low": torch.randint(0, 20, (600,), generator=g), "high": torch.randint(40, 65, (600,), generator=g)}
    cfg = EnsembleConfig(prune=PruneConfig("heads", 0.5), steps_per_domain=5, router="classifier", seq_len=16)
    ens = specialize_and_ensemble(base, doms, cfg)
    for e in ens.experts.values():
        assert e.config.num_attention_heads == 2
    x = torch.cat([doms["low"][:32].reshape(2, 16), doms["high"][:32].reshape(2, 16)])
    assert ens.route(x) == ["low", "low", "high", "high"]
    out = ens.generate(x[:1, :4], max_new_tokens=3)
    assert out.shape == (1, 7)


def test_ensemble_bad_input():
    base = tiny_llama()
    with pytest.raises(ValueError, match="no data"):
        specialize_and_ensemble(base, {"a": torch.zeros(0, dtype=torch.long)})
    with pytest.raises(ValueError, match="domains"):
        specialize_and_ensemble(base, {})
    with pytest.raises(ValueError, match="domain must be one of"):
        Ensemble({"a": base})(tokens(), "z")
    with pytest.raises(ValueError, match="router"):
        EnsembleConfig(router="vote")


def test_report_pareto_and_break_even():
    from downscaling.quantize import quantize

    base = tiny_llama(layers=2)
    small = tiny_llama(layers=1)
    q = quantize(base).model
    quality = {id(base): 2.0, id(small): 2.5, id(q): 2.01}
    rep = report(base, {"small": small, "int8": q}, lambda m: quality[id(m)], served_tokens=1e6,
                 train_flops={"baseline": 1e12, "small": 2e12, "int8": 1e12}, n_runs=1)  # fmt: skip
    df = rep.frame.set_index("model")
    assert df.loc["baseline", "pareto"] and df.loc["small", "pareto"]
    assert not df.loc["int8", "pareto"]  # same FLOPs, worse quality than the baseline
    fb, fs = df.loc["baseline", "flops_per_token"], df.loc["small", "flops_per_token"]
    s_star = df.loc["small", "break_even_served"]
    assert s_star == pytest.approx(1e12 / (fb - fs))
    assert 1e12 + fb * s_star == pytest.approx(2e12 + fs * s_star)  # equal lifetime compute at S*
    assert "small" in rep.markdown() and "<table" in rep.html()


def test_report_uneven_degradation():
    base = tiny_llama()
    cand = tiny_llama(seed=5)
    q = {id(base): {"a": 1.0, "b": 1.0, "c": 1.0}, id(cand): {"a": 1.1, "b": 1.1, "c": 1.4}}
    df = report(base, {"c": cand}, lambda m: q[id(m)], n_runs=1).frame
    assert df.loc[1, "uneven_degradation"] == pytest.approx(0.4 / 0.2)


def test_cli_profile_and_plan(tmp_path, capsys):
    import json

    from downscaling.cli import main

    tiny_llama(kv=2).save_pretrained(tmp_path / "m")
    assert main(["profile", str(tmp_path / "m"), "--batch", "2", "--seq-len", "8", "--energy", "estimate"]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["measured"] is False and prof["flops_per_token_fwd"] > 0
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"model: {tmp_path / 'm'}\ncalib: {{windows: 4, seq_len: 8}}\nsteps:\n"
        "  - prune: {method: heads, sparsity: 0.5}\n  - prune: {method: wanda, sparsity: 0.5}\n"
        f"out: {tmp_path / 'out'}\n"
    )
    assert main(["run", str(plan)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["steps"][0]["record"]["heads_after"] == 2
    assert res["steps"][1]["record"]["achieved_sparsity"] == 0.5
    assert res["steps"][1]["profile"]["params"] < res["before"]["params"]
    from transformers import LlamaForCausalLM

    assert LlamaForCausalLM.from_pretrained(tmp_path / "out").config.num_attention_heads == 2


def test_cli_report_equals_report_on_the_same_models(tmp_path, capsys):
    import json

    from downscaling.cli import main
    from downscaling.config import PruneConfig
    from downscaling.prune import prune
    from downscaling.report import bpc_evaluator

    base = tiny_llama(kv=2)
    heads = prune(base, PruneConfig("heads", 0.5)).model
    base.save_pretrained(tmp_path / "base")
    heads.save_pretrained(tmp_path / "heads-50")
    ids = torch.randint(0, 65, (400,), generator=torch.Generator().manual_seed(2))
    torch.save(ids, tmp_path / "val.pt")
    argv = ["report", str(tmp_path / "base"), str(tmp_path / "heads-50"), f"copy={tmp_path / 'base'}",
            "--data", str(tmp_path / "val.pt"), "--windows", "3", "--seq-len", "16"]  # fmt: skip
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == ["baseline", "heads-50", "copy"]
    # the same windows by hand: seeded starts into the id stream
    starts = torch.randint(400 - 17, (3,), generator=torch.Generator().manual_seed(0)).tolist()
    win = torch.stack([ids[s : s + 17] for s in starts])
    want = bpc_evaluator([(win[:, :-1], win[:, 1:])])
    assert rows[0]["quality"] == pytest.approx(want(base)["all"], rel=1e-6)
    assert rows[1]["quality"] == pytest.approx(want(heads)["all"], rel=1e-6)
    assert rows[2]["quality"] == pytest.approx(rows[0]["quality"], rel=1e-12)
    assert rows[1]["flops_per_token"] < rows[0]["flops_per_token"] == rows[2]["flops_per_token"]
    assert main([*argv, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "heads-50" in md and "pareto" in md
    with pytest.raises(ValueError, match="unique"):
        main(["report", str(tmp_path / "base"), f"a={tmp_path / 'base'}", f"a={tmp_path / 'heads-50'}"])
