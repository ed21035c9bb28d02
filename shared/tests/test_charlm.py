"""icml25_shared.charlm: setup validation, the crossing measure, and a deterministic training loop that learns."""

from __future__ import annotations

import copy
import math

import pytest

from icml25_shared.charlm import CharLMSetup, CharLMTask, tiny_llama_config, tokens_to_reach, train_char_lm

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_tokens_to_reach_interpolates_linearly():
    assert tokens_to_reach([0, 10, 20], [3.0, 2.0, 1.0], 1.5) == pytest.approx(15.0)
    assert tokens_to_reach([0, 10], [1.0, 0.5], 2.0) == 0.0  # already there
    assert math.isinf(tokens_to_reach([0, 10], [3.0, 2.5], 1.0))


def test_setup_is_validated_and_subclassable():
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        CharLMSetup(steps=0)
    assert CharLMSetup(steps=25).eval_every == 2 and CharLMSetup(batch_size=4, seq_len=8).tokens_per_step == 32
    assert tiny_llama_config().num_key_value_heads == 4


def test_training_is_deterministic_and_learns():
    from icml25_shared.data import DataNotFoundError

    setup = CharLMSetup(
        hidden_size=32, num_hidden_layers=1, intermediate_size=64, seq_len=16, batch_size=8, steps=30, val_batches=2
    )
    try:
        task = CharLMTask.build(setup)
    except DataNotFoundError:
        pytest.skip("Tiny Shakespeare not installed (icml25-datasets)")
    curves = []
    for _ in range(2):
        model = copy.deepcopy(task.init_model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        curves.append(train_char_lm(model, task, [opt]))
    a, b = curves
    assert a.steps == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30] and len(a.train_loss) == 30
    assert a.val_loss == b.val_loss and a.train_loss == b.train_loss  # same windows, same init
    assert a.val_loss[-1] < a.val_loss[0] - 0.5  # from ~ln(65) = 4.17 towards the unigram entropy
