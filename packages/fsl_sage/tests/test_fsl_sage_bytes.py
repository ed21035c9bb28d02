"""The byte ledger against the closed form of expected_bytes, and the upload and alignment schedules."""

import math

import pytest
import torch

from fsl_sage import ALGORITHMS, FSLSAGE, FSLConfig, RingBuffer, digits_cnn_split, expected_bytes, nbytes


def _fit(method, data, models, **cfg):
    c, s, a = models
    algo = ALGORITHMS[method](c, s, a, FSLConfig(**cfg))
    h = algo.fit(*data)
    return algo, h


def _expected(algo, data, **kw):
    cfg = algo.config
    return expected_bytes(
        algo.method,
        [len(d[1]) for d in data[0]],
        cfg.batch_size,
        cfg.q,
        cfg.align_interval,
        cfg.rounds,
        algo.smashed_numel,
        nbytes(algo.client_template),
        nbytes(algo.server),
        nbytes(algo.aux_template) if algo.aux_template is not None else 0,
        mode=cfg.mode,
        local_epochs=cfg.local_epochs,
        count_labels=cfg.count_labels,
        warm_start_rounds=cfg.warm_start_rounds,
        **kw,
    )


@pytest.mark.parametrize(
    ("mode", "rounds", "align_interval"),
    [("eager", 4, 2), ("lazy", 4, 2), ("eager", 3, 2), ("lazy", 3, 2), ("eager", 3, 10), ("lazy", 3, 10)],
)
def test_fsl_sage_ledger_equals_closed_form(tiny_data, digits_models, small_cfg, mode, rounds, align_interval):
    small_cfg.update(mode=mode, rounds=rounds, align_interval=align_interval)
    algo, h = _fit("fsl_sage", tiny_data, digits_models, **small_cfg)
    exp = _expected(algo, tiny_data)
    assert h.bytes_per_round == exp
    aux = nbytes(digits_models[2])
    # the aux travels: eager in the alignment round, lazy one round later and never after the last round
    aux_rounds = [t for t in range(rounds) if algo.ledger.total_where(round=t, kind="aux") > 0]
    if mode == "eager":
        assert aux_rounds == [t for t in range(rounds) if t % align_interval == 0]
    else:
        assert aux_rounds == [t + 1 for t in range(rounds - 1) if t % align_interval == 0]
    assert algo.ledger.total_where(kind="aux") == 3 * aux * len(aux_rounds)


@pytest.mark.parametrize("method", ["cse_fsl", "splitfed_v1", "splitfed_v2", "fedavg"])
def test_baseline_ledgers_equal_closed_form(tiny_data, digits_models, small_cfg, method):
    small_cfg.update(rounds=2)
    algo, h = _fit(method, tiny_data, digits_models, **small_cfg)
    assert h.bytes_per_round == _expected(algo, tiny_data)


@pytest.mark.parametrize("method", ["fsl_sage", "cse_fsl", "splitfed_v1", "splitfed_v2"])
@pytest.mark.parametrize(("dtype", "itemsize"), [(torch.float64, 8), (torch.bfloat16, 2)])
def test_smashed_payloads_count_their_dtype(tiny_data, small_cfg, method, dtype, itemsize):
    # a float64 or bfloat16 split: models count 8 or 2 bytes a value, and so must the smashed activations and
    # their gradients (they used to count 4 whatever the dtype)
    torch.manual_seed(0)
    models = [m.to(dtype) for m in digits_cnn_split()]
    data = ([(x.to(dtype), y) for x, y in tiny_data[0]], (tiny_data[1][0].to(dtype), tiny_data[1][1]))
    small_cfg.update(rounds=2)
    algo, h = _fit(method, data, models, **small_cfg)
    assert h.bytes_per_round == _expected(algo, data, smashed_itemsize=itemsize)
    assert h.bytes_per_round != _expected(algo, data)  # the float32 count
    # uploads at k = 0, 2, 4 (FSL-SAGE, CSE-FSL) or every batch (SplitFed) of 512 values each
    n_up = 21 if method in ("fsl_sage", "cse_fsl") else 37
    assert algo.ledger.total_where(round=0, client=0, kind="smashed") == n_up * 512 * itemsize
    if method.startswith("splitfed"):
        assert algo.ledger.total_where(round=0, client=0, kind="gradient") == 37 * 512 * itemsize
    assert algo.ledger.total_where(round=0, client=0, kind="client", direction="up") == nbytes(algo.clients[0])


def test_labels_and_warm_start_counted(tiny_data, digits_models, small_cfg):
    small_cfg.update(count_labels=True, warm_start_rounds=1, rounds=3, mode="lazy")
    algo, h = _fit("fsl_sage", tiny_data, digits_models, **small_cfg)
    assert h.bytes_per_round == _expected(algo, tiny_data)
    # uploads at k = 0, 2, 4 → 8 + 8 + 5 samples of 512 floats + an int64 label each
    assert algo.ledger.total_where(round=0, client=0, kind="smashed") == 21 * (512 * 4 + 8)


def test_digits_closed_form_numbers():
    c, s, a = digits_cnn_split()
    assert (nbytes(c), nbytes(s), nbytes(a)) == (19_200, 267_816, 20_520)
    kw = {
        "batch_size": 32,
        "q": 5,
        "align_interval": 10,
        "rounds": 2,
        "smashed_numel": 512,
        "client_bytes": 19_200,
        "server_bytes": 267_816,
        "aux_bytes": 20_520,
    }
    one = [479]
    assert expected_bytes("fsl_sage", one, **kw) == [235_008 + 20_520, 235_008]
    assert expected_bytes("cse_fsl", one, **kw) == [276_048] * 2
    assert expected_bytes("fedavg", one, **kw) == [574_032] * 2
    assert expected_bytes("splitfed_v2", one, **kw) == [2_000_384] * 2
    assert expected_bytes("splitfed_v1", one, **kw) == [2_000_384] * 2


def test_digits_ledger_one_round_matches_hand_count():
    torch.manual_seed(0)
    c, s, a = digits_cnn_split()
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(479, 1, 8, 8, generator=g), torch.randint(0, 10, (479,), generator=g)) for _ in range(3)]
    algo = FSLSAGE(c, s, a, FSLConfig(rounds=1, batch_size=32, align_epochs=1))
    h = algo.fit(data)
    assert h.bytes_per_round == [3 * (235_008 + 20_520)]
    assert h.records[0].server_steps == 3 * 3  # ⌈15 / 5⌉ per client


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_schedules(tiny_data, digits_models, small_cfg, mode):
    small_cfg.update(mode=mode, local_epochs=2)  # 10 iterations a round, k counted across epochs
    algo, h = _fit("fsl_sage", tiny_data, digits_models, **small_cfg)
    assert [r.server_steps for r in h.records] == [3 * math.ceil(10 / 2)] * 4
    assert [r.alignments for r in h.records] == [3, 0, 3, 0]
    if mode == "eager":  # client i aligns at k = 0, after that iteration's upload: one batch at t = 0
        assert [int(d["n"]) for d in algo.align_log[:3]] == [8, 8, 8]
    else:  # end of round: the buffer holds the round's uploads (k = 0, 2, ..., 8: 5 batches of 8, 5, ... → M)
        assert [int(d["n"]) for d in algo.align_log[:3]] == [20, 20, 20]
    assert all(len(b) <= small_cfg["buffer_size"] for b in algo.buffers)


def test_ring_buffer_keeps_newest():
    buf = RingBuffer(5)
    for i in range(4):
        buf.push(torch.full((2, 3), float(i)), torch.full((2,), i))
    z, y = buf.get()
    assert len(buf) == 5 and z.shape == (5, 3)
    assert y.tolist() == [1, 2, 2, 3, 3]
    buf.push(torch.arange(7.0)[:, None].expand(7, 3), torch.arange(7))
    assert buf.get()[1].tolist() == [2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="buffer_size"):
        RingBuffer(0)
