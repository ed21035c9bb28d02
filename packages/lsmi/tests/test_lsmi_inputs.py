"""Inputs that used to give silent garbage now raise or are handled; the estimator's thread policy."""

import numpy as np
import pytest
import torch

from icml25_shared.device import torch_threads
from lsmi import LSMIConfig, LSMIEstimator, lsmi_from_terms, mlp_classifier
from lsmi.datasets import gate_joint, logic_gate

FAST = dict(n_classes=2, epochs_clf=2, epochs_entropy=2, seed=0)


def test_zero_variance_column_is_scaled_by_one():
    """A constant feature at fit used to be divided by 1e-8: any other value at transform gave ~1e7 nats."""
    x1, x2, y = logic_gate("or", 200, seed=0)
    x1 = np.concatenate([x1, np.full((200, 1), 3.0, np.float32)], 1)
    est = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, verbose=False)
    assert torch.all(est.std1 > 0) and est.std1[-1] == 1.0
    moved = x1.copy()
    moved[:, -1] += 0.5  # the constant column takes another value at transform
    inter = est.transform(moved, x2, y)
    for v in (inter.r, inter.u1, inter.u2, inter.s):
        assert torch.isfinite(v).all() and v.abs().max() < 100  # nats, not 1e7


def test_float64_beyond_float32_range_is_refused():
    x1, x2, y = logic_gate("or", 100, seed=0)
    big = x1.astype(np.float64)
    big[5, 1] = 1e39  # finite in float64, inf in float32
    est = LSMIEstimator(LSMIConfig(**FAST))
    with pytest.raises(ValueError, match="x1 holds values beyond the float32 range"):
        est.fit(big, x2, y)
    est.fit(x1, x2, y, verbose=False)
    with pytest.raises(ValueError, match="x1 holds values beyond the float32 range"):
        est.transform(big, x2, y)
    # in range but standardised beyond it: refused, not turned into inf
    tiny = np.concatenate([x1, 1e-30 * np.arange(100, dtype=np.float64)[:, None]], 1)
    est2 = LSMIEstimator(LSMIConfig(**FAST)).fit(tiny, x2, y, verbose=False)
    far = tiny.copy()
    far[0, -1] = 1e12
    with pytest.raises(ValueError, match="x1 standardised"):
        est2.transform(far, x2, y)


def test_non_finite_lr_and_bad_options_are_refused():
    for lr in (float("inf"), float("nan"), np.float64("inf"), 0.0, -1e-3):
        with pytest.raises(ValueError, match="lr"):
            LSMIConfig(n_classes=2, lr=lr)
    for kw in ({"validation_fraction": 0.9}, {"patience": 0}, {"n_threads": 0}, {"tol": -1.0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            LSMIConfig(n_classes=2, **kw)


@pytest.mark.parametrize("bad", ["f1", "f2", "f12"])
def test_user_heads_of_the_wrong_width_are_refused(bad):
    x1, x2, y = logic_gate("or", 100, seed=0)
    widths = {"f1": 2, "f2": 2, "f12": 2}
    widths[bad] = 3  # a 3-class head for a 2-class problem used to be read as a posterior silently
    heads = (mlp_classifier(2, widths["f1"]), mlp_classifier(2, widths["f2"]), mlp_classifier(4, widths["f12"]))
    with pytest.raises(ValueError, match=rf"classifier {bad} must return logits of shape \(n_samples, n_classes=2\)"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=heads, verbose=False)


def test_lsmi_from_terms_does_not_broadcast():
    good = [np.zeros(3)] * 5
    assert lsmi_from_terms(*good)[0].shape == (3,)
    for i, name in enumerate(("i1", "i2", "i12", "h1", "h2")):
        terms = list(good)
        terms[i] = np.zeros((4, 1))  # (3,) with (4, 1) used to broadcast to (4, 3)
        named = name if i else "i2"  # a bad i1 sets the reference shape, so i2 is the first that disagrees
        with pytest.raises(ValueError, match=named):
            lsmi_from_terms(*terms)
        t = [torch.zeros(3)] * 5
        t[i] = torch.zeros(4, 1)
        with pytest.raises(ValueError, match=named):
            lsmi_from_terms(*t)


class _ThreadProbe(torch.nn.Module):
    """A classifier head that records the torch thread count it runs under."""

    def __init__(self, d: int, seen: list[int]) -> None:
        super().__init__()
        self.f, self.seen = mlp_classifier(d, 2), seen

    def forward(self, x):
        self.seen.append(torch.get_num_threads())
        return self.f(x)


@pytest.mark.parametrize(("n_threads", "outer"), [(1, 2), (None, 2), (2, 1)])
def test_fit_and_transform_run_on_n_threads_and_restore(n_threads, outer):
    x1, x2, y = logic_gate("xor", 64, seed=0)
    seen: list[int] = []
    heads = (_ThreadProbe(2, seen), _ThreadProbe(2, seen), _ThreadProbe(4, seen))
    est = LSMIEstimator(LSMIConfig(**FAST, n_threads=n_threads))
    with torch_threads(outer):
        est.fit(x1, x2, y, classifiers=heads, verbose=False)
        assert torch.get_num_threads() == outer
        est.transform(x1, x2, y)
        assert torch.get_num_threads() == outer
    assert seen and set(seen) == {outer if n_threads is None else n_threads}
    assert LSMIConfig(n_classes=2).n_threads == 1  # the default: one thread for the tiny models


def _raw_trained_heads(x1, x2, y, steps=300):
    """Three heads trained by hand on the *raw* features (as a user would, outside the estimator)."""
    torch.manual_seed(0)
    heads = (mlp_classifier(2, 2), mlp_classifier(2, 2), mlp_classifier(4, 2))
    inputs = (torch.as_tensor(x1), torch.as_tensor(x2), torch.cat([torch.as_tensor(x1), torch.as_tensor(x2)], 1))
    ty = torch.as_tensor(y).long()
    for f, x in zip(heads, inputs):
        opt = torch.optim.Adam(f.parameters(), lr=1e-2)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(f(x), ty).backward()
            opt.step()
    return heads, inputs


def test_user_heads_trained_on_raw_features_are_fed_raw_features():
    """Heads trained on raw features used to be fed the standardised ones: the pointwise MIs must be the heads'
    own posteriors on what they were trained on."""
    from lsmi.functional import pmi

    x1, x2, y = logic_gate("or", 400, seed=0)
    x1, x2 = 3.0 * x1 + 2.0, 0.5 * x2 - 1.0  # far from z-scores, so feeding z-scores would show
    heads, inputs = _raw_trained_heads(x1, x2, y)
    est = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=heads, verbose=False)
    t = est.terms(x1, x2, y)
    ty = torch.as_tensor(y).long()
    with torch.no_grad():
        for name, f, x in zip(("i1", "i2", "i12"), heads, inputs):
            ref = pmi(torch.log_softmax(f(x), -1), ty, est.log_prior)
            torch.testing.assert_close(t[name], ref, atol=1e-5, rtol=1e-5)
    # heads trained on z-scores: say so, and they are fed z-scores
    z = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=heads, classifier_input="standardized")
    with torch.no_grad():
        zin = ((torch.as_tensor(x1, dtype=torch.float64) - z.mean1) / z.std1).float()
        ref = pmi(torch.log_softmax(heads[0](zin), -1), ty, z.log_prior)
    torch.testing.assert_close(z.terms(x1, x2, y)["i1"], ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="classifier_input"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=heads, classifier_input="scaled")


def test_fit_mean_shift_makes_a_samples_values_independent_of_its_batch_mates():
    x1, x2, y = logic_gate("or", 400, seed=0)
    batch = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, verbose=False)
    ref = LSMIEstimator(LSMIConfig(**FAST, adjust="fit_mean_shift")).fit(x1, x2, y, verbose=False)
    whole = ref.transform(x1, x2, y)
    for i in (0, 7, 123):
        one = ref.transform(x1[i : i + 1], x2[i : i + 1], y[i : i + 1])
        for a, b in ((one.r, whole.r), (one.u1, whole.u1), (one.s, whole.s)):
            torch.testing.assert_close(a[0], b[i])
    # the fit delta is the per-call delta of the fit samples; the same fit otherwise
    assert ref.fit_delta_ == pytest.approx(batch.transform(x1, x2, y).delta, abs=1e-6)
    assert whole.delta == ref.fit_delta_
    back = LSMIEstimator.from_state_dict(ref.state_dict())
    torch.testing.assert_close(back.transform(x1[:1], x2[:1], y[:1]).r, whole.r[:1])


def test_load_state_dict_needs_no_throwaway_config_and_string_labels_are_named():
    x1, x2, y = logic_gate("or", 100, seed=0)
    est = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, verbose=False)
    loaded = LSMIEstimator().load_state_dict(est.state_dict())
    assert torch.equal(loaded.transform(x1, x2, y).r, est.transform(x1, x2, y).r)
    with pytest.raises(ValueError, match="no config: pass n_classes"):
        LSMIEstimator().fit(x1, x2, y)
    with pytest.raises(ValueError, match=r"y must hold integer class labels.*dtype <U3.*LabelEncoder"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, np.where(y == 1, "yes", "no"))


def test_complex_torch_features_and_non_finite_labels_are_refused():
    """A complex torch tensor used to lose its imaginary part in ``.double()`` (a warning only); an infinite label
    used to be reported as -9223372036854775808."""
    x1, x2, y = logic_gate("or", 100, seed=0)
    est = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, verbose=False)
    cx = torch.tensor(x1, dtype=torch.complex64) + 1j
    with pytest.raises(TypeError, match="x1 must have a real numeric dtype.*complex64"):
        est.transform(cx, x2, y)
    with pytest.raises(TypeError, match="x2 must have a real numeric dtype"):
        est.fit(x1, torch.tensor(x2, dtype=torch.complex128), y)
    bad_y = y.astype(np.float64)
    bad_y[3] = np.inf
    with pytest.raises(ValueError, match="y must hold integer labels, got inf"):
        est.transform(x1, x2, bad_y)


@pytest.mark.parametrize("bs", [0, -1, 2.5])
def test_terms_batch_size_is_validated(bs):
    """batch_size=0 crashed inside range(); a negative one returned empty terms without a word."""
    x1, x2, y = logic_gate("or", 60, seed=0)
    est = LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, verbose=False)
    with pytest.raises(ValueError, match="batch_size"):
        est.terms(x1, x2, y, batch_size=bs)
    small = est.terms(x1, x2, y, batch_size=np.int64(7))
    full = est.terms(x1, x2, y)
    for k in full:
        assert torch.equal(small[k], full[k])


def test_user_heads_that_cannot_read_the_features_get_a_clear_error():
    """A head of the wrong input width used to crash inside torch's addmm; a non-module inside 'not callable'."""
    x1, x2, y = logic_gate("or", 100, seed=0)  # d1 = d2 = 2
    heads = (mlp_classifier(3, 2), mlp_classifier(2, 2), mlp_classifier(4, 2))
    with pytest.raises(ValueError, match=r"classifier f1 failed on a float32 input of shape \(2, 2\)"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=heads)
    with pytest.raises(TypeError, match="classifier f2 must be a torch module"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(x1, x2, y, classifiers=(heads[1], 1, heads[2]))


def test_config_of_the_wrong_type_and_a_single_held_out_fit_sample_are_refused():
    """A dict config crashed with AttributeError; one fit sample with a held-out split trained nothing and
    returned the initial heads without a word."""
    with pytest.raises(TypeError, match="config must be an LSMIConfig"):
        LSMIEstimator({"n_classes": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verbose must be a bool, got 'no'"):
        LSMIEstimator(LSMIConfig(**FAST)).fit(*logic_gate("or", 10, seed=0), verbose="no")  # type: ignore[arg-type]
    x1, x2, y = logic_gate("or", 10, seed=0)
    cfg = LSMIConfig(**{**FAST, "prior": "uniform"})
    with pytest.raises(ValueError, match="at least 2 fit samples, got 1"):
        LSMIEstimator(cfg).fit(x1[:1], x2[:1], y[:1])
    LSMIEstimator(LSMIConfig(**{**FAST, "prior": "uniform", "validation_fraction": 0.0})).fit(
        x1[:1], x2[:1], y[:1], verbose=False
    )


def test_baselines_refuse_labels_and_joints_they_used_to_cast():
    """broja_cvx cast float labels to int (1.5 -> 1) and let -1 index the last class; an n_classes below the labels
    crashed in np.add.at; an infinite joint reached the solver; PIDBatch.score on one sample returned NaN."""
    pytest.importorskip("sklearn")
    pytest.importorskip("cvxpy")
    from lsmi.baselines import PIDBatch, broja_cvx, broja_discrete

    x1, x2, y = logic_gate("xor", 60, seed=0)
    for bad, shown in ((y + 0.5, "0.5"), (y - 1, "-1.0"), (np.where(y == 1, np.nan, y), "nan")):
        with pytest.raises(ValueError, match=f"y must hold integer class labels >= 0, got {shown}"):
            broja_cvx(x1, x2, bad, k=2)
    with pytest.raises(ValueError, match="n_classes must be an int >= 2, got 1"):
        broja_cvx(x1, x2, y, k=2, n_classes=1)
    with pytest.raises(ValueError, match="P must be finite"):
        broja_discrete(np.full((2, 2, 2), np.inf))
    pid = PIDBatch(2, epochs=0, classifier={"epochs_clf": 1}).fit(x1, x2, y)
    with pytest.raises(ValueError, match="at least 2 samples.*got 1"):
        pid.score(x1[:1], x2[:1])
    assert all(np.isfinite(pid.score(x1[:2], x2[:2])))


def test_dataset_generators_validate_their_arguments():
    """An unknown gate was a KeyError, rho = 2 a 'math domain error', a negative joint was normalised into a
    positive one and sampled, a negative n or noise went through."""
    from lsmi.datasets import gaussian_exact_terms, gaussian_modalities, noisy_discrete

    with pytest.raises(ValueError, match="gate must be one of"):
        gate_joint("nand")
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        logic_gate("or", -1)
    with pytest.raises(ValueError, match="noise must be a float >= 0.0"):
        logic_gate("or", 5, noise=-0.1)
    with pytest.raises(ValueError, match=r"rho must be a float in \[-1.0, 1.0\], got 2.0"):
        gaussian_modalities(5, rho=2.0)
    with pytest.raises(ValueError, match="n_classes must be an int >= 2"):
        gaussian_modalities(5, n_classes=1)
    x1, x2, y = gaussian_modalities(np.int64(5), np.int64(2), np.float32(0.5), np.float32(1.0))
    with pytest.raises(ValueError, match=r"rho must be a float in \(-1.0, 1.0\)"):
        gaussian_exact_terms(x1, x2, y, rho=1.0)
    with pytest.raises(ValueError, match="P must be finite and non-negative"):
        noisy_discrete(-gate_joint("or"), 5)


def test_density_modules_name_bad_input():
    """A float64 tensor reached KNIFE's einsum ("expected scalar type Double but found Float"), a numpy array failed
    on '-' and StackedKNIFE took x1, x2 of different lengths; GaussianMixtureDensity.fit refused a numpy array with
    AttributeError."""
    from lsmi import KNIFE, GaussianMixtureDensity, StackedKNIFE

    knife = KNIFE(3, 2)
    x = torch.randn(5, 3)
    with pytest.raises(TypeError, match="x must have the module's dtype torch.float32.*got torch.float64"):
        knife(x.double())
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        knife(x.numpy())
    same = KNIFE(3, 2)
    same.load_state_dict(knife.state_dict())
    torch.testing.assert_close(same.double()(x.double()).float(), knife(x))  # a float64 module takes float64 input
    stacked = StackedKNIFE(KNIFE(3, 2), KNIFE(2, 2))
    with pytest.raises(ValueError, match="same number of rows, got 5 and 4"):
        stacked(x, torch.randn(4, 2))
    pytest.importorskip("sklearn")
    data = np.random.default_rng(0).normal(size=(60, 3))
    a = GaussianMixtureDensity.fit(data, 2)
    b = GaussianMixtureDensity.fit(torch.as_tensor(data), 2)
    assert torch.equal(a.logpdf(x), b.logpdf(x))
