"""Bad input a user can hand the public API: each raises a ValueError naming the argument and what was expected,
never an error from deep inside torch or a silent wrong answer."""

import numpy as np
import pytest
import torch

from fsl_sage import FSLSAGE, FSLConfig, History, RoundRecord, SplitFedV2, digits_cnn_split, expected_bytes


def test_config_betas_must_be_a_pair():
    with pytest.raises(ValueError, match=r"betas must be two floats in \[0, 1\), got 0.9"):
        FSLConfig(betas=0.9)
    with pytest.raises(ValueError, match="betas must be two floats"):
        FSLConfig(betas="0.9,0.99")
    assert FSLConfig(betas=np.array([0.9, 0.99]), lr=np.float32(0.5), rounds=np.int64(3)).betas == (0.9, 0.99)


@pytest.mark.parametrize("algo", [FSLSAGE, SplitFedV2])
def test_inputs_that_do_not_fit_the_split_name_the_first_client(tiny_data, small_cfg, algo):
    data, ev = tiny_data
    cases = [
        ([(torch.rand(37, 3, 8, 8), y) for _, y in data], r"client_datasets\[0\]: inputs of shape \(3, 8, 8\)"),
        ([(x.double(), y) for x, y in data], r"client_datasets\[0\]: inputs .* do not fit the split"),
        ([(x, y[:, None]) for x, y in data], r"client_datasets\[0\]: labels must be 1-d"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            algo(*digits_cnn_split(), FSLConfig(**small_cfg)).fit(bad, ev)
    with pytest.raises(ValueError, match=r"sample_input: inputs of shape \(1, 9, 9\)"):
        algo(*digits_cnn_split(), FSLConfig(**small_cfg), sample_input=torch.rand(2, 1, 9, 9))


def test_bfloat16_split_trains(tiny_data, small_cfg):
    # log-probabilities in bfloat16 sum to one only to bfloat16's precision: the split check allows for it
    torch.manual_seed(0)
    c, s, a = (m.to(torch.bfloat16) for m in digits_cnn_split())
    data = [(x.to(torch.bfloat16), y) for x, y in tiny_data[0]]
    small_cfg.update(rounds=1)
    algo = FSLSAGE(c, s, a, FSLConfig(**small_cfg))
    h = algo.fit(data, (tiny_data[1][0].to(torch.bfloat16), tiny_data[1][1]))
    assert algo.clients[0][0].weight.dtype == torch.bfloat16 and np.isfinite(h.records[0].loss)
    # raw scores (no LogSoftmax) are still refused in bfloat16
    with pytest.raises(ValueError, match="must be log-probabilities"):
        FSLSAGE(c, s[:-1], a, FSLConfig(**small_cfg)).fit(data)


def test_bytes_to_accuracy_takes_a_fraction():
    h = History("x", [RoundRecord(0, 0.95, 0.1, 1, 1, 2, 2, {})])
    assert h.bytes_to_accuracy(0.93) == 2.0
    with pytest.raises(ValueError, match=r"target must be a float in \[0.0, 1.0\], got 93"):
        h.bytes_to_accuracy(93)  # a percentage used to give inf: "never reached"


def test_expected_bytes_refuses_impossible_sizes():
    args = dict(method="fsl_sage", client_sizes=[10, 10], batch_size=4, q=2, align_interval=2, rounds=3,
                smashed_numel=512, client_bytes=100, server_bytes=100, aux_bytes=10)  # fmt: skip
    assert len(expected_bytes(**args)) == 3
    for key, value, match in (
        ("local_epochs", 0, "local_epochs must be a positive int"),
        ("smashed_numel", -512, "smashed_numel must be a positive int"),
        ("client_bytes", -1, "client_bytes must be a non-negative int"),
        ("client_sizes", [10, 0], r"client_sizes\[1\] must be a positive int"),
        ("smashed_itemsize", 0, "smashed_itemsize must be a positive int"),
    ):
        with pytest.raises(ValueError, match=match):
            expected_bytes(**{**args, key: value})


def test_evaluate_batch_size_is_checked(tiny_data):
    from fsl_sage.runner import evaluate

    c, s, _ = digits_cnn_split()
    acc, loss = evaluate(c, s, tiny_data[1], batch_size=np.int64(7))
    assert (acc, loss) == pytest.approx(evaluate(c, s, tiny_data[1]))  # batching does not change the result
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        evaluate(c, s, tiny_data[1], batch_size=0)  # was range()'s "arg 3 must not be zero"
