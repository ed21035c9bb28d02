"""SoftShapeClassifier as a scikit-learn estimator: checks, determinism, save/load, bad input, explanations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from softshape import SoftShapeClassifier
from softshape.experiments import bump_dataset

TINY = {"emb_dim": 8, "epochs": 3, "warmup_epochs": 1, "batch_size": 64, "random_state": 0}


def tiny(**kw) -> SoftShapeClassifier:
    return SoftShapeClassifier(**{**TINY, **kw})


@pytest.fixture(scope="module")
def data():
    X, y, _ = bump_dataset(n_cases=40, n_timepoints=48, window=(20, 30), random_state=1)
    return X, y


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_sklearn_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator

    # a small, quick configuration that still learns the blobs of check_classifiers_train (accuracy > 0.83)
    est = SoftShapeClassifier(emb_dim=8, epochs=40, warmup_epochs=5, lr=0.02, dropout=0.0, random_state=0)
    failed = check_estimator(est, on_fail=None)
    bad = [r for r in failed if r["status"] == "failed"]
    assert not bad, [(r["check_name"], str(r["exception"])[:300]) for r in bad]


def test_clone_get_params_and_constructor_stores_only():
    est = SoftShapeClassifier(shape_size=0.2, emb_dim=16, sparsification="hard", random_state=3)
    params = est.get_params()
    assert params["shape_size"] == 0.2 and params["sparsification"] == "hard"
    c = clone(est)
    assert c.get_params() == params and not hasattr(c, "network_")
    c.set_params(emb_dim=32)
    assert c.emb_dim == 32 and est.emb_dim == 16
    # invalid values are stored, and reported at fit
    bad = SoftShapeClassifier(emb_dim=18)
    with pytest.raises(ValueError, match="emb_dim"):
        bad.fit(np.random.default_rng(0).normal(size=(8, 40)), np.arange(8) % 2)


def test_fit_and_predict_run_on_n_threads_and_restore_the_callers(data, monkeypatch):
    """Fit and inference run torch on ``n_threads`` (1 by default) whatever the caller had set (an aeon fit can leave
    torch at two), and give the caller's setting back; ``None`` keeps the caller's; 0 is refused by name."""
    from softshape.model import SoftShapeNet

    X, y = data
    seen: list[int] = []
    forward = SoftShapeNet.forward

    def spy(self, *a, **kw):
        seen.append(torch.get_num_threads())
        return forward(self, *a, **kw)

    monkeypatch.setattr(SoftShapeNet, "forward", spy)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        est = tiny().fit(X, y)
        est.predict(X)
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        tiny(n_threads=None).fit(X, y).predict(X)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="n_threads"):
        tiny(n_threads=0).fit(X, y)


def test_fixed_random_state_is_repeatable_and_save_load_identical(data, tmp_path):
    X, y = data
    p1 = tiny().fit(X, y).predict_proba(X)
    est = tiny().fit(X, y)
    p2 = est.predict_proba(X)
    np.testing.assert_array_equal(p1, p2)
    p3 = tiny(random_state=1).fit(X, y).predict_proba(X)
    assert np.abs(p1 - p3).max() > 1e-6
    path = tmp_path / "model.pt"
    est.save(path)
    loaded = SoftShapeClassifier.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X), p2)
    assert loaded.get_params() == est.get_params()
    for a, b in zip(est.network_.state_dict().values(), loaded.network_.state_dict().values()):
        assert torch.equal(a, b)


def test_string_labels_round_trip(data):
    X, y = data
    labels = np.array(["cat", "dog"])[y]
    est = tiny().fit(X, labels)
    assert list(est.classes_) == ["cat", "dog"]
    assert set(est.predict(X)) <= {"cat", "dog"}
    assert est.predict_proba(X).shape == (len(X), 2)


def test_input_forms_2d_multivariate_unequal(data):
    X, y = data
    est2d = tiny().fit(X[:, 0], y)
    assert est2d.n_channels_ == 1 and est2d.n_features_in_ == 48
    np.testing.assert_array_equal(est2d.predict_proba(X[:, 0]), est2d.predict_proba(X))
    Xmv = np.concatenate([X, -X, X**2], axis=1)
    est = tiny().fit(Xmv, y)
    assert est.n_channels_ == 3 and est.predict(Xmv).shape == (len(y),)
    ragged = [x[:, : 40 + (i % 9)] for i, x in enumerate(X)]
    est_r = tiny().fit(ragged, y)
    assert est_r.n_timepoints_ == 48
    padded = np.zeros((len(X), 1, 48), dtype=np.float32)
    for i, x in enumerate(ragged):
        padded[i, :, : x.shape[1]] = x
    np.testing.assert_allclose(est_r.predict_proba(ragged), est_r.predict_proba(padded), atol=1e-7)


def test_bad_input_raises_clear_errors(data):
    X, y = data
    Xn = X.copy()
    Xn[0, 0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        tiny().fit(Xn, y)
    with pytest.raises(ValueError, match="shape_size"):
        tiny(shape_size=100).fit(X, y)
    with pytest.raises(ValueError, match="emb_dim"):
        tiny(emb_dim=10).fit(X, y)
    for rate in (1.0, -0.1):
        with pytest.raises(ValueError, match="sparse_rate"):
            tiny(sparse_rate=rate).fit(X, y)
    with pytest.raises(ValueError, match="one class"):
        tiny().fit(X, np.zeros(len(y), dtype=int))
    with pytest.raises(ValueError, match="len"):
        tiny().fit(X, y[:-1])
    with pytest.raises(ValueError, match="4 dimensions"):
        tiny().fit(X[:, :, :, None], y)
    with pytest.raises(ValueError, match="shape_size"):
        tiny(shape_size="wide").fit(X, y)
    with pytest.raises(NotFittedError):
        tiny().predict(X)
    est = tiny().fit(X, y)
    with pytest.raises(ValueError, match="channels"):
        est.predict(np.concatenate([X, X], axis=1))
    with pytest.raises(ValueError, match="time points"):
        est.predict(X[:, :, :40])
    with pytest.raises(ValueError, match="top"):
        est.explain(X, top=0)


def test_fill_nan_uses_training_column_means(data):
    X, y = data
    Xn = X.copy()
    Xn[:5, 0, 7] = np.nan
    est = tiny(fill_nan=True).fit(Xn, y)
    np.testing.assert_allclose(est.nan_fill_[0, 7], X[5:, 0, 7].mean(), rtol=1e-5)
    Xt = X[:4].copy()
    Xt[:, 0, 7] = np.nan
    filled = Xt.copy()
    filled[:, 0, 7] = est.nan_fill_[0, 7]
    np.testing.assert_array_equal(est.predict_proba(Xt), est.predict_proba(filled))


def test_shape_scores_and_explain_map_to_original_positions(data):
    X, y = data
    est = tiny(shape_size=8, stride=4).fit(X, y)
    scores, kept = est.shape_scores(X)
    m = (48 - 8) // 4 + 1
    assert scores.shape == (len(X), m) and kept.shape == (len(X), m)
    assert np.all((scores > 0) & (scores < 1))
    spans = est.explain(X, top=3)
    assert spans.shape == (len(X), 3, 2)
    assert np.all(spans[..., 1] - spans[..., 0] == 8) and np.all(spans[..., 0] % 4 == 0)
    best = np.argmax(scores, axis=1)
    np.testing.assert_array_equal(spans[:, 0, 0], best * 4)


def test_variants_and_eval_modes(data):
    X, y = data
    for variant in (
        {"sparsification": "hard"},
        {"sparsification": "none"},
        {"use_moe": False},
        {"use_inception": False},
    ):
        assert tiny(**variant).fit(X, y).predict_proba(X).shape == (len(X), 2)
    assert tiny(eval_sparse="always", warmup_epochs=10).fit(X, y).sparse_inference_ is True
    assert tiny(eval_sparse="never").fit(X, y).sparse_inference_ is False
    assert tiny(eval_sparse="match_train", warmup_epochs=10).fit(X, y).sparse_inference_ is False
    assert tiny(eval_sparse="match_train", warmup_epochs=1).fit(X, y).sparse_inference_ is True


def test_gunpoint_smoke_beats_080():
    aeon_datasets = pytest.importorskip("aeon.datasets")
    X, y = aeon_datasets.load_classification("GunPoint", split="train")
    Xt, yt = aeon_datasets.load_classification("GunPoint", split="test")
    # batch 16: the older setting of the paper, min(0.06 n, 16); one full-batch step per epoch needs more epochs
    est = SoftShapeClassifier(shape_size=32, epochs=30, warmup_epochs=10, batch_size=16, random_state=0)
    assert est.fit(X, y).score(Xt, yt) > 0.8


def test_shared_warmup_equals_separate_fits(data):
    from softshape.estimator import fit_shared_warmup

    X, y = data
    base = tiny(epochs=6, warmup_epochs=3, batch_size=16, validation_fraction=0.25)
    variants = {
        "soft": {},
        "dense": {"sparse_rate": 0.0},
        "hard": {"sparsification": "hard"},
        "no_moe": {"use_moe": False},
    }
    shared = fit_shared_warmup(base, variants, X, y)
    for name, params in variants.items():
        alone = clone(base).set_params(**params).fit(X, y)
        np.testing.assert_array_equal(shared[name].predict_proba(X), alone.predict_proba(X))
        assert shared[name].best_epoch_ == alone.best_epoch_ and len(shared[name].history_) == len(alone.history_)
    # the variants really differ after warm-up
    assert not np.array_equal(shared["soft"].predict_proba(X), shared["hard"].predict_proba(X))
    with pytest.raises(ValueError, match="use_inception"):
        fit_shared_warmup(base, {"a": {"use_inception": False}}, X, y)
    with pytest.raises(ValueError, match="random_state"):
        fit_shared_warmup(tiny(random_state=None), variants, X, y)


# the package's fast settings for sklearn's checks (the issue's): 2 epochs cannot reach the 0.83 accuracy that
# check_classifiers_train asks of any classifier on its blobs, so that check is the one documented expected failure
FAST = {"emb_dim": 8, "epochs": 2, "warmup_epochs": 1, "shape_size": 2, "stride": 1}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_sklearn_check_estimator_fast_settings():
    from sklearn.utils.estimator_checks import check_estimator

    est = SoftShapeClassifier(**FAST, random_state=0)
    declared = est.expected_failed_checks()  # the estimator declares what it may fail, with the reason
    assert set(declared) == {"check_classifiers_train"} and "epochs=2" in declared["check_classifiers_train"]
    results = check_estimator(est, on_fail=None, expected_failed_checks=declared)
    bad = [r for r in results if r["status"] == "failed"]
    assert not bad, [(r["check_name"], str(r["exception"])[:300]) for r in bad]
    assert {r["check_name"] for r in results if r["status"] == "xfail"} == set(declared)


def test_expected_failed_checks_follow_the_epochs():
    assert set(SoftShapeClassifier(**FAST).expected_failed_checks()) == {"check_classifiers_train"}
    assert SoftShapeClassifier(emb_dim=8, epochs=40, warmup_epochs=5, lr=0.02).expected_failed_checks() == {}


@pytest.mark.parametrize("seed", range(5))
def test_predict_proba_does_not_depend_on_the_batch(seed):
    """sklearn's subset-invariance check, and the stronger form: each case alone gives the batch's probabilities
    to 1e-12 (float32 inference differed by ~1e-8..1e-7 with the batch composition)."""
    from sklearn.utils.estimator_checks import check_methods_subset_invariance

    check_methods_subset_invariance("SoftShapeClassifier", SoftShapeClassifier(**FAST, random_state=seed))
    X = np.random.default_rng(seed).normal(size=(30, 20)).astype(np.float32)
    y = np.arange(30) % 3
    est = SoftShapeClassifier(**FAST, random_state=seed).fit(X, y)
    full = est.predict_proba(X)
    alone = np.concatenate([est.predict_proba(X[i : i + 1]) for i in range(len(X))])
    np.testing.assert_allclose(alone, full, atol=1e-12, rtol=0)
    reversed_ = est.predict_proba(X[::-1])[::-1]
    np.testing.assert_allclose(reversed_, full, atol=1e-12, rtol=0)


def test_one_feature_error_and_no_sparsify_name():
    from sklearn.utils.estimator_checks import check_fit2d_1feature

    check_fit2d_1feature("SoftShapeClassifier", SoftShapeClassifier(**FAST, random_state=0))
    # sklearn's checks call `sparsify()` on estimators that have that attribute (linear models' method)
    assert not hasattr(SoftShapeClassifier(), "sparsify")
    assert "sparsification" in SoftShapeClassifier().get_params()


def test_layer_scores_are_the_first_layer_scores_of_the_input_subsequences(data):
    X, y = data
    est = tiny(shape_size=8, stride=4, epochs=4, warmup_epochs=1).fit(X, y)  # sparse inference, depth 2
    assert est.sparse_inference_
    scores, kept = est.shape_scores(X)
    # reference: the scorer on layer 1's tokens, i.e. the embedded input subsequences (float64, eval mode)
    net = est.network_
    with torch.no_grad():
        net64 = __import__("copy").deepcopy(net).double().eval()
        z = net64.rms1[0](net64.embed_shapes(torch.from_numpy(X).double()))
        ref = net64.scorer(z).squeeze(-1).numpy()
    np.testing.assert_allclose(scores, ref, atol=1e-12, rtol=0)
    # layer 2 scores the shapes that layer 1 left as tokens (all, as layer 1 is dense); "last" is the old definition
    s2, _ = est.shape_scores(X, layer=2)
    with pytest.warns(UserWarning, match="does not localise input subsequences"):
        last, _ = est.shape_scores(X, layer="last")
    np.testing.assert_array_equal(s2, last)
    assert not np.allclose(s2, scores)
    # kept: the top half of the layer-2 scores
    k = kept.sum(1)
    assert np.all(k == int(np.ceil(0.5 * scores.shape[1])))
    # explanations rank the layer-1 scores; layer=2 ranks the layer-2 scores
    np.testing.assert_array_equal(est.explain(X, top=1)[:, 0, 0], scores.argmax(1) * 4)
    np.testing.assert_array_equal(est.explain(X, top=1, layer=2)[:, 0, 0], s2.argmax(1) * 4)
    with pytest.raises(ValueError, match="layer"):
        est.shape_scores(X, layer=3)
    with pytest.raises(ValueError, match="aggregate"):
        est.shape_scores(X, aggregate="sum")


def test_deeper_layer_scores_are_nan_for_merged_shapes(data):
    X, y = data
    est = tiny(shape_size=8, stride=4, depth=3, sparse_rate=0.6, epochs=3, warmup_epochs=1).fit(X, y)
    s1, _ = est.shape_scores(X, layer=1)
    s2, _ = est.shape_scores(X, layer=2)
    s3, kept = est.shape_scores(X, layer=3)
    assert not np.isnan(s1).any() and not np.isnan(s2).any()  # layer 1 is dense: layer 2 sees every shape
    m = s1.shape[1]
    assert np.all((~np.isnan(s3)).sum(1) == int(np.ceil(0.7 * m)))  # keep ratios 1, 0.7, 0.4: layer 2 kept 70 %
    with pytest.warns(UserWarning, match="use the default layer=1"):
        last, _ = est.shape_scores(X, layer="last")
    np.testing.assert_array_equal(last, np.where(np.isnan(s3), s2, s3))
    assert np.all(kept <= ~np.isnan(s3))


@pytest.mark.parametrize("how", ["mean", "max"])
def test_aggregate_maps_shape_scores_to_time_positions(data, how):
    X, y = data
    est = tiny(shape_size=8, stride=3).fit(X, y)  # M = (48 - 8) // 3 + 1 = 14 shapes, last covers [39, 47)
    scores, kept = est.shape_scores(X[:5])
    t_scores, t_kept = est.shape_scores(X[:5], aggregate=how)
    assert t_scores.shape == (5, 48) and t_kept.shape == (5, 48)
    reduce = np.mean if how == "mean" else np.max
    for s in range(48):
        covering = [j for j in range(scores.shape[1]) if j * 3 <= s < j * 3 + 8]
        if not covering:
            assert s == 47 and np.isnan(t_scores[:, s]).all() and not t_kept[:, s].any()
            continue
        np.testing.assert_allclose(t_scores[:, s], reduce(scores[:, covering], axis=1))
        np.testing.assert_array_equal(t_kept[:, s], kept[:, covering].any(axis=1))


def test_expert_utilisation_after_fit(data, tmp_path):
    X, y = data
    est = tiny(n_experts=3, epochs=4, warmup_epochs=1).fit(X, y)
    u = est.expert_utilisation_
    assert u.shape == (3,) and abs(u.sum() - 1) < 1e-12 and np.all(u >= 0)
    np.testing.assert_array_equal(est.expert_utilisation(X), u)
    path = tmp_path / "m.pt"
    est.save(path)
    np.testing.assert_array_equal(SoftShapeClassifier.load(path).expert_utilisation_, u)
    dense = tiny(eval_sparse="never").fit(X, y)  # no layer runs the MoE at inference
    assert np.isnan(dense.expert_utilisation_).all()


def test_predictions_follow_the_network_after_an_optimiser_step_and_load_state_dict(data):
    """``network_`` is a plain module users may keep training: predict / predict_proba / shape_scores use its
    current weights, never a copy of older ones."""
    X, y = data
    est = tiny().fit(X, y)
    p0 = est.predict_proba(X)
    s0, _ = est.shape_scores(X)
    before = {k: v.clone() for k, v in est.network_.state_dict().items()}
    opt = torch.optim.SGD(est.network_.parameters(), lr=0.5)
    est.network_.train()
    xb = torch.as_tensor(X.reshape(len(X), 1, -1), dtype=torch.float32)
    for _ in range(3):
        opt.zero_grad()
        out = est.network_(xb)
        torch.nn.functional.cross_entropy(out.logits, torch.as_tensor(1 - np.searchsorted(est.classes_, y))).backward()
        opt.step()
    est.network_.eval()
    with torch.no_grad():
        direct = torch.softmax(est.network_.double()(xb.double(), sparse=est.sparse_inference_).logits, 1).numpy()
        est.network_.float()
    p1 = est.predict_proba(X)
    assert np.abs(p1 - p0).max() > 1e-3  # the stale copy gave exactly p0
    np.testing.assert_allclose(p1, direct, rtol=0, atol=1e-5)
    assert np.nanmax(np.abs(est.shape_scores(X)[0] - s0)) > 0
    est.network_.load_state_dict(before)  # back to the fitted weights
    np.testing.assert_array_equal(est.predict_proba(X), p0)


def test_pickle_carries_the_weights_once(data):
    """The float64 inference copy (twice the weights) is rebuilt on first use, never pickled."""
    import copy
    import pickle

    X, y = data
    est = tiny().fit(X, y)
    p = est.predict_proba(X)  # builds the float64 copy
    blob = pickle.dumps(est)
    bare = copy.copy(est)
    del bare._net64
    weights64 = sum(t.numel() * 8 for t in est.network_.state_dict().values())
    assert len(blob) < len(pickle.dumps(bare)) + weights64 / 4
    again = pickle.loads(blob)
    np.testing.assert_array_equal(again.predict_proba(X), p)
    assert copy.deepcopy(est)._net64._net is None


def test_depth_one_refuses_a_sparse_rate(data):
    X, y = data
    with pytest.raises(ValueError, match="sparse_rate=0.5 would be ignored at depth=1"):
        tiny(depth=1).fit(X, y)
    assert tiny(depth=1, sparse_rate=0.0).fit(X, y).predict(X).shape == (len(X),)


def test_explanations_are_faithful_on_the_readme_recipe():
    """Occluding the top-1 explained span of the bump task's class-1 series (README recipe: m = 16, q = 4, 20
    epochs, seed 0) moves P(class 1) more than occluding a random span of the same length, and the top span is the
    window (IoU > 0.5); ``layer="last"`` is not (it warns)."""
    from softshape.experiments import interpretability

    res = interpretability(20, 160, seed=0)
    f = res["faithfulness"]
    assert f["delta_top"] > f["delta_random"] + 0.02, f
    assert res["mean_iou"] > 0.5 and res["accuracy"] >= 0.9
    assert res["mean_iou_last_layer_definition"] < 0.5
