"""The model against references that could disagree: Llama with copied weights (dense limit), the masked-dense
oracle (gather path), full forwards (cache, causality), and the saved/loaded model."""

from __future__ import annotations

import pytest
import torch
from mohd_testing import SWITCHES, VOCAB, tiny_llama_config, tiny_mohd
from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

from mohd import MoHDConfig, MoHDForCausalLM


def _ids(b: int = 2, t: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("fusion", "scaling", "placement"),
    [(f, s, "residual") for f in ("none", "monarch", "group", "blockdiag") for s in ("none", "inverse_ratio")]
    + [("none", "none", "ffn"), ("monarch", "inverse_ratio", "ffn")],
)
def test_dense_limit_equals_llama(fusion, scaling, placement):
    """N_s = N, K = 0, alpha = 1, fusion at its identity init: the logits are Llama's with the same weights."""
    torch.manual_seed(0)
    lcfg = tiny_llama_config()
    llama = LlamaForCausalLM(lcfg).double().eval()
    cfg = MoHDConfig.from_llama(
        lcfg, num_subdims=4, num_shared=4, num_routed=0, fusion=fusion, scaling=scaling, placement=placement
    )
    model = MoHDForCausalLM(cfg).double().eval()
    missing, unexpected = model.load_state_dict(llama.state_dict(), strict=False)
    assert not unexpected and all("fusion" in k for k in missing)
    ids = _ids()
    ref = llama(ids).logits
    for impl in ("masked", "gather", "grouped"):
        for sub in model.modules():
            if hasattr(sub, "impl"):
                sub.impl = impl
        torch.testing.assert_close(model(ids).logits, ref, rtol=0, atol=1e-10)


def _set_impl(model, impl):
    for sub in model.modules():
        if hasattr(sub, "impl") and isinstance(sub.impl, str):
            sub.impl = impl


@pytest.mark.parametrize(
    ("name", "tile"),
    [(n, 16) for n in SWITCHES] + [(n, t) for n in ("default", "K2_topk", "output_site", "ffn") for t in (1, 5)],
)
def test_gather_and_grouped_equal_masked_forward_and_gradients(name, tile, monkeypatch):
    monkeypatch.setattr("mohd.layer.SLOT_TILE", tile)
    model = tiny_mohd(seed=3, **SWITCHES[name])
    ids = _ids(3, 9)
    results = {}
    for impl in ("masked", "gather", "grouped"):
        _set_impl(model, impl)
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        results[impl] = (out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    lm, gm = results["masked"]
    for impl in ("gather", "grouped"):
        lg, gg = results[impl]
        torch.testing.assert_close(lg, lm, rtol=0, atol=1e-10, msg=impl)
        for n in gm:
            torch.testing.assert_close(gg[n], gm[n], rtol=0, atol=1e-10, msg=f"{impl}: {n}")
    assert any(float(g.abs().sum()) > 0 for n, g in gm.items() if "router" in n)


def test_routing_active_groups_and_gates():
    model = tiny_mohd(seed=0, num_routed=2, num_shared=2)
    sub = model.model.layers[0].mlp.subdims
    h = torch.randn(50, 48, dtype=torch.float64)
    r = sub.route(h)
    active = r.gates > 0
    assert (active.sum(1) == 2 + 2).all()
    assert (r.gates[:, :2] == 1).all()
    assert ((r.index >= 2) & (r.index < 8)).all()
    # zero exactly where not chosen
    chosen = torch.zeros_like(active).scatter(1, r.index, True)
    chosen[:, :2] = True
    assert torch.equal(active, chosen)
    # topk gates average to 1 per token
    torch.testing.assert_close(r.gate_values.mean(1), torch.ones(50, dtype=torch.float64))


def test_routing_ties_go_to_lower_index():
    model = tiny_mohd(seed=0, num_routed=2, num_shared=2)
    router = model.model.layers[0].mlp.subdims.router
    with torch.no_grad():
        router.weight.zero_()  # every logit equal
    r = router(torch.randn(5, 48, dtype=torch.float64))
    assert torch.equal(r.index, torch.tensor([[2, 3]] * 5))


def test_k1_auto_gate_gives_router_gradient():
    model = tiny_mohd(seed=0)  # K = 1, gate_norm auto -> softmax gates
    assert model.config.resolved_gate_norm == "softmax"
    model.config.router_aux_loss_coef = 0.0
    ids = _ids()
    model(ids, labels=ids).loss.backward()
    for name, p in model.named_parameters():
        if "router" in name:
            assert float(p.grad.abs().max()) > 0, name


def test_sparse_write_leaves_inactive_groups_and_gives_them_zero_gradient():
    model = tiny_mohd(seed=2)
    layer = model.model.layers[0]
    x = torch.randn(1, 1, 48, dtype=torch.float64)
    delta, routing = layer.mlp(layer.post_attention_layernorm(x))
    inactive = (routing.gates[0] == 0).repeat_interleave(6)
    assert inactive.sum() == 4 * 6
    assert torch.equal(delta[0, 0, inactive], torch.zeros(24, dtype=torch.float64))
    # one token: the inactive column blocks of the read projections and row blocks of the write get exactly 0 grad
    model.zero_grad()
    delta.pow(2).sum().backward()
    assert torch.equal(layer.mlp.gate_proj.weight.grad[:, inactive], torch.zeros(32, 24, dtype=torch.float64))
    assert torch.equal(layer.mlp.down_proj.weight.grad[inactive], torch.zeros(24, 32, dtype=torch.float64))
    assert float(layer.mlp.gate_proj.weight.grad[:, ~inactive].abs().min()) >= 0
    assert float(layer.mlp.down_proj.weight.grad[~inactive].abs().sum()) > 0


@pytest.mark.parametrize("name", ["default", "ffn", "output_site"])
def test_causality(name):
    model = tiny_mohd(seed=4, **SWITCHES[name])
    ids = _ids(2, 10)
    t = 5
    changed = ids.clone()
    changed[:, t + 1] = (changed[:, t + 1] + 1) % VOCAB
    a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=0)
    assert not torch.allclose(a[:, t + 1], b[:, t + 1])


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_cached_greedy_generate_equals_stepwise_full_forwards(mode):
    model = tiny_mohd(seed=5, dtype=torch.float32)
    prompt = _ids(2, 4)
    ctx = torch.inference_mode() if mode == "inference_mode" else torch.no_grad()
    with ctx:
        out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
        seq = prompt
        for _ in range(6):
            nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq)


def test_cached_logits_equal_full_forward():
    model = tiny_mohd(seed=6)
    ids = _ids(2, 9)
    full = model(ids).logits
    out = model(ids[:, :5], use_cache=True)
    step = model(ids[:, 5:], cache=out.cache, use_cache=True).logits
    # Llama's RMSNorm computes in float32 even for float64 input, so the two paths agree to float32 rounding
    torch.testing.assert_close(step, full[:, 5:], rtol=1e-5, atol=1e-6)


def test_save_pretrained_round_trip_via_auto_classes(tmp_path):
    model = tiny_mohd(seed=7, **SWITCHES["learned"])
    model.save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_text()
    for key in (
        "num_subdims",
        "num_shared",
        "num_routed",
        "placement",
        "router",
        "gate_norm",
        "scaling",
        "fusion",
        "fusion_site",
        "monarch_blocks",
        "write_gate",
        "router_aux_loss_coef",
        "aux_loss_sync",
        "impl",
    ):
        assert f'"{key}"' in text, key
    assert isinstance(AutoConfig.from_pretrained(tmp_path), MoHDConfig)
    # the attention backend is a load-time choice in transformers, not saved: load with the same one
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64, attn_implementation="eager").eval()
    assert type(loaded) is MoHDForCausalLM
    ids = _ids()
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_loss_includes_aux_and_same_seed_same_loss():
    a, b = tiny_mohd(seed=8), tiny_mohd(seed=8)
    ids = _ids()
    oa, ob = a(ids, labels=ids, output_router_logits=True), b(ids, labels=ids)
    assert torch.equal(oa.loss, ob.loss)
    assert len(oa.router_logits) == 4 and oa.router_logits[0].shape == (14, 5)
    lm = torch.nn.functional.cross_entropy(oa.logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    # HF's causal-LM loss upcasts to float32; the aux term (coef 1e-2 x ~1) is far above that rounding
    torch.testing.assert_close(oa.loss, lm + a.config.router_aux_loss_coef * oa.aux_loss, rtol=0, atol=1e-6)
    assert abs(float((oa.loss - lm).detach())) > 1e-3


def test_bad_forward_input():
    model = tiny_mohd(seed=0)
    with pytest.raises(ValueError, match="input_ids must lie in"):
        model(torch.tensor([[0, VOCAB]]))
    emb = torch.randn(1, 3, 48, dtype=torch.float64)
    emb[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="inputs_embeds"):
        model(inputs_embeds=emb)
    # int32 ids and float32 embeddings into a float64 model are accepted
    ids = _ids().to(torch.int32)
    torch.testing.assert_close(model(ids).logits, model(ids.long()).logits, rtol=0, atol=0)
    model(inputs_embeds=torch.randn(1, 3, 48))


def test_feed_forward_alone_dense_limit_equals_llama_mlp():
    from transformers.models.llama.modeling_llama import LlamaMLP

    from mohd import MoHDFeedForward

    cfg = MoHDConfig.from_llama(
        tiny_llama_config(), num_subdims=4, num_shared=4, num_routed=0, placement="ffn", fusion="none"
    )
    torch.manual_seed(0)
    ref = LlamaMLP(tiny_llama_config()).double()
    ffn = MoHDFeedForward(cfg).double()
    ffn.load_state_dict(ref.state_dict(), strict=True)
    h = torch.randn(2, 5, 24, dtype=torch.float64)
    y, routing = ffn(h)
    torch.testing.assert_close(y, ref(h), rtol=0, atol=1e-12)
    assert routing.logits is None
