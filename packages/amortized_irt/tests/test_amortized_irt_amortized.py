"""Amortized difficulty: the joint fit reduces to the plain fit when every item is free, recovers the content
weights, and the GP's predictive intervals are calibrated."""

from __future__ import annotations

import numpy as np
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import AmortizedDifficulty, HashingFeaturizer, Rasch, ResponseMatrix
from amortized_irt.datasets import template_items


def _content_data(n=300, m=150, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    w = rng.normal(0, 0.8, d)
    b = X @ w + 0.3 + 0.2 * rng.standard_normal(m)
    theta = rng.standard_normal(n)
    Y = (rng.random((n, m)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    Y[rng.random((n, m)) > 0.6] = np.nan
    return X, ResponseMatrix.from_dense(Y), b, w


def test_joint_with_all_items_free_equals_plain_fit():
    Y, *_ = rasch_data(300, 15, seed=1, density=0.8)
    R = ResponseMatrix.from_dense(Y)
    X = np.zeros((15, 3))  # w = 0: content carries nothing
    am = AmortizedDifficulty().fit(X, R, free=np.ones(15, dtype=bool))
    plain = Rasch().fit(R)
    assert np.array_equal(am.difficulty_, plain.difficulty_)
    assert np.array_equal(am.loglik_trace_, plain.loglik_trace_)


def test_joint_linear_recovers_content_weights_and_is_monotone():
    X, R, b, w = _content_data()
    am = AmortizedDifficulty(ridge=1e-3).fit(X, R)
    assert np.corrcoef(am.coef_, w)[0, 1] > 0.98
    assert np.diff(am.loglik_trace_).min() >= -1e-9
    two = AmortizedDifficulty(mode="two_stage").fit(X, R)
    assert np.corrcoef(two.predict(X), b)[0, 1] > 0.95
    X_new = np.random.default_rng(5).standard_normal((40, 4))
    assert np.corrcoef(am.predict(X_new), X_new @ w)[0, 1] > 0.98


def test_gp_predictive_intervals_cover():
    rng = np.random.default_rng(2)
    d, n, n_test, noise = 3, 300, 400, 0.3
    w = rng.normal(0, 1, d)
    X, Xt = rng.standard_normal((n, d)), rng.standard_normal((n_test, d))
    y, yt = X @ w + noise * rng.standard_normal(n), Xt @ w + noise * rng.standard_normal(n_test)
    gp = AmortizedDifficulty(regressor="gp", mode="two_stage")
    gp.n_features_in_ = d
    gp._fit_regressor(X, y, np.ones(n), np.full(n, 1e-4))  # observed targets with negligible noise
    mu, var = gp.predict(Xt, return_var=True)
    cover = np.mean(np.abs(yt - mu) <= 1.96 * np.sqrt(var))
    assert 0.9 <= cover <= 0.99


def test_mlp_and_gp_joint_fit_run_and_predict():
    X, R, b, _ = _content_data(n=200, m=80, seed=3)
    for reg in ("mlp", "gp"):
        am = AmortizedDifficulty(regressor=reg, alternations=1, gp_steps=30).fit(X, R)
        assert np.corrcoef(am.predict(X), b)[0, 1] > 0.8, reg
    official = AmortizedDifficulty(regressor="mlp", mode="two_stage", official_mlp=True, hidden=(8, 8)).fit(X, R)
    assert sum(type(m).__name__ == "ELU" for m in official.net_) == 1


def test_hashing_featurizer_on_template_text():
    texts, b, _ = template_items(800, seed=4)
    feat = HashingFeaturizer()
    F1 = feat(texts)
    assert F1.shape == (800, 64)
    np.testing.assert_array_equal(HashingFeaturizer()(texts), F1)  # deterministic
    Xa = np.hstack([F1, np.ones((800, 1))])
    coef = np.linalg.lstsq(Xa, b, rcond=None)[0]
    assert np.corrcoef(Xa @ coef, b)[0, 1] > 0.8  # content predicts difficulty


def test_bad_input():
    X, R, _, _ = _content_data(n=50, m=20, seed=4)
    with pytest.raises(ValueError, match="one row per item"):
        AmortizedDifficulty().fit(X[:10], R)
    with pytest.raises(ValueError, match="regressor must be one of"):
        AmortizedDifficulty(regressor="forest")
    with pytest.raises(RuntimeError, match="not fitted"):
        AmortizedDifficulty().predict(X)
    am = AmortizedDifficulty().fit(X, R)
    with pytest.raises(ValueError, match="columns"):
        am.predict(X[:, :2])


def _tiny_lm():
    """A random-init tiny Llama and a character-level fast tokenizer built in code (nothing downloaded)."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789 +-*=?.,"))
    vocab = {"<pad>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    cfg = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).eval(), tokenizer


def test_transformers_featurizer_equals_unpadded_forward_per_text():
    import torch

    from amortized_irt import TransformersFeaturizer

    model, tokenizer = _tiny_lm()
    texts = ["what is 2+2?", "a", "compute 12*7 - 3 = ?", "sort b, a, c", "xyz"]
    for pooling, layer in (("mean", -1), ("last", -1), ("mean", 1)):
        feat = TransformersFeaturizer(model, tokenizer, pooling=pooling, layer=layer, batch_size=3)
        F = feat(texts)
        assert F.shape == (5, 16) and F.dtype == np.float64
        for i, text in enumerate(texts):  # one text alone: no padding, no mask
            ids = torch.as_tensor([tokenizer(text)["input_ids"]])
            with torch.no_grad():
                h = model(input_ids=ids, output_hidden_states=True).hidden_states[layer][0].double()
            ref = h.mean(0) if pooling == "mean" else h[-1]
            np.testing.assert_allclose(F[i], ref.numpy(), atol=1e-5, err_msg=f"{pooling} layer {layer} text {i}")
    # batch composition does not matter; the model's mode and the caller's thread count are restored
    model.train()
    threads = torch.get_num_threads()
    one = TransformersFeaturizer(model, tokenizer, batch_size=1)(texts)
    whole = TransformersFeaturizer(model, tokenizer, batch_size=len(texts))(texts)
    np.testing.assert_allclose(one, whole, atol=1e-5)
    assert model.training and torch.get_num_threads() == threads


def test_transformers_featurizer_feeds_the_amortized_fit_and_rejects_bad_input():
    from amortized_irt import TransformersFeaturizer

    model, tokenizer = _tiny_lm()
    texts, b, _ = template_items(60, seed=1)
    feat = TransformersFeaturizer(model, tokenizer, batch_size=16)
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(120)
    Y = (rng.random((120, 60)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(float)
    am = AmortizedDifficulty(featurizer=feat, mode="two_stage").fit(texts, Y)
    assert am.predict(texts[:7]).shape == (7,)
    with pytest.raises(ValueError, match="one string"):
        feat("what is 2+2?")
    with pytest.raises(ValueError, match="no tokens"):
        feat(["ok", ""])
    with pytest.raises(ValueError, match="position 1"):
        feat(["ok", 3])
    with pytest.raises(ValueError, match="pooling"):
        TransformersFeaturizer(model, tokenizer, pooling="max")
    with pytest.raises(ValueError, match="tokenizer"):
        TransformersFeaturizer(model, None)


def test_sparse_variational_gp_path_matches_the_exact_gp():
    rng = np.random.default_rng(2)
    d, n, n_test, noise = 3, 200, 300, 0.3
    w = rng.normal(0, 1, d)
    X, Xt = rng.standard_normal((n, d)), rng.standard_normal((n_test, d))
    y, yt = X @ w + noise * rng.standard_normal(n), Xt @ w + noise * rng.standard_normal(n_test)
    fits = {}
    for name, above in (
        ("exact", n),
        ("sparse", n - 1),
    ):  # sparse_above < n items: variational ELBO, min(256, n) inducing points
        gp = AmortizedDifficulty(regressor="gp", mode="two_stage", sparse_above=above, gp_steps=60)
        gp.n_features_in_ = d
        gp._fit_regressor(X, y, np.ones(n), np.full(n, 1e-4))
        fits[name] = gp.predict(Xt, return_var=True)
        assert (type(gp.gp_).__name__ == "_Sparse") == (name == "sparse")
    mu, var = fits["sparse"]
    assert np.sqrt(np.mean((mu - fits["exact"][0]) ** 2)) < 0.1
    assert 0.88 <= np.mean(np.abs(yt - mu) <= 1.96 * np.sqrt(var)) <= 0.99
