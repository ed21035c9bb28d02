"""Generation helpers and the reproduction entry point at a tiny size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amortized_irt.datasets import template_difficulty
from amortized_irt.experiments import Setup
from amortized_irt.generation import (
    QuestionGenerator,
    RetrievalGenerator,
    TemplateGenerator,
    difficulty_reward,
    validate_generator,
)
from amortized_irt.reproduce import reproduce


class _LengthPredictor:
    """A stand-in amortized predictor: difficulty = text length / 10."""

    def predict(self, texts):
        return np.array([len(t) / 10 for t in texts])


class _NoTruth:
    def generate(self, target_difficulty, n, context=None):
        return ["q"] * n


def test_template_generator_hits_targets():
    gen = TemplateGenerator(seed=0)
    assert isinstance(gen, QuestionGenerator)
    texts = gen.generate(1.0, 5)
    assert len(texts) == len(set(texts)) == 5
    assert np.all(np.abs(gen.true_difficulty(texts) - 1.0) < 1.5)
    easy, hard = gen.generate(-1.5, 5), gen.generate(2.5, 5)
    assert gen.true_difficulty(easy).mean() < gen.true_difficulty(hard).mean()
    assert template_difficulty("mul", 4) > template_difficulty("add", 4)


def test_reward_and_retrieval():
    pred = _LengthPredictor()
    r = difficulty_reward(["abc", "abcdefghij"], 1.0, pred)
    np.testing.assert_allclose(r, [-0.7, 0.0])
    pool = ["x" * k for k in range(1, 40)]
    gen = RetrievalGenerator(pool, pred, pool_difficulty=np.arange(1, 40) / 10)
    first = gen.generate(2.0, 3)
    assert first[0] == "x" * 20 and len(first) == 3
    assert not set(first) & set(gen.generate(2.0, 3))  # used items are not served twice
    np.testing.assert_allclose(gen.true_difficulty(["x" * 5]), [0.5])


def test_validate_generator_tracks_targets():
    rng = np.random.default_rng(0)
    res = validate_generator(
        TemplateGenerator(seed=1), np.linspace(-1.5, 2.5, 5), rng.standard_normal(300) + 0.5, n_per_target=6
    )
    assert res["corr"] >= 0.8 and len(res["realised"]) == 30
    with pytest.raises(ValueError, match="truth is needed"):
        validate_generator(_NoTruth(), [0.0], [0.0])


@pytest.mark.slow  # a whole (tiny) reproduction: over 10 s on a loaded 2-core machine
def test_reproduce_tiny(tmp_path):
    tiny = Setup(
        n_items=880, n_scenarios=4, n_template_items=300, cat_scenarios=2, cat_takers=40, n_splits=1, cap=60,
        recovery_seeds=2,
    )  # fmt: skip
    res = reproduce(False, tmp_path, setup=tiny, seed=1)
    assert res.package == "amortized_irt" and len(res.claims) == 5
    assert all(len(c.label) <= 32 for c in res.claims)
    assert all(c.verdict in ("holds", "does not hold", "inconclusive") for c in res.claims)
    assert res.settings["recovery_data_seeds"] == [2, 3]  # seed_list(1, 2)
    assert list(res.claims[0].details["seeds"]["per_seed"]) == ["2", "3"]
    assert all(Path(p).exists() for p in res.artifacts)
