"""The aeon adapter: BaseClassifier conventions (3-D numpy, unequal-length lists) and aeon's estimator checks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aeon")

from softshape.aeon_adapter import SoftShapeAeonClassifier
from softshape.experiments import bump_dataset


def test_aeon_adapter_fit_predict_and_unequal_length():
    X, y, _ = bump_dataset(n_cases=30, n_timepoints=40, window=(15, 25), random_state=0)
    labels = np.array(["a", "b"])[y]
    clf = SoftShapeAeonClassifier(emb_dim=8, epochs=3, warmup_epochs=1, random_state=0)
    clf.fit(X, labels)
    proba = clf.predict_proba(X)
    assert proba.shape == (30, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    assert list(clf.classes_) == ["a", "b"]
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(1)])
    ragged = [x[:, : 30 + i % 10] for i, x in enumerate(X)]
    clf_r = SoftShapeAeonClassifier(emb_dim=8, epochs=2, warmup_epochs=1, random_state=0).fit(ragged, labels)
    assert clf_r.predict(ragged).shape == (30,)


@pytest.mark.slow
def test_aeon_check_estimator():
    from aeon.testing.estimator_checking import check_estimator

    results = check_estimator(SoftShapeAeonClassifier, raise_exceptions=False)
    failed = {k: v for k, v in results.items() if v != "PASSED" and not str(v).startswith("SKIPPED")}
    assert not failed, failed


def test_aeon_adapter_exposes_every_parameter_with_the_same_defaults():
    from softshape import SoftShapeClassifier

    assert SoftShapeAeonClassifier().get_params() == SoftShapeClassifier().get_params()
    clf = SoftShapeAeonClassifier(sparsification="hard", use_moe=False, gating="official", emb_dim=8)
    assert (
        clf._estimator().get_params()
        == SoftShapeClassifier(sparsification="hard", use_moe=False, gating="official", emb_dim=8).get_params()
    )
