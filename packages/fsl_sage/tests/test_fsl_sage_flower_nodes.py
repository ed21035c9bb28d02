"""Node handling of the Flower strategies on the in-process grid (Flower's failure semantics): a client that
raises every round, an extra node, too few nodes, a duplicate partition id, a config mismatch, sampling, and an
aux lost with a failed reply being sent again."""

import pytest
import torch

from fsl_sage import FSLConfig, client_datasets, digits_cnn_split, expected_bytes, load_digits_split, nbytes
from fsl_sage.flower import LocalGrid, make_client_app, run_server

CFG = FSLConfig(
    rounds=3,
    batch_size=32,
    server_update_interval=5,
    align_interval=1,
    align_epochs=2,
    align_batch_size=64,
    buffer_size=200,
    mode="lazy",
    seed=0,
)


def _model_fn():
    torch.manual_seed(0)
    return digits_cnn_split()


@pytest.fixture(scope="module")
def digits4():
    xtr, ytr, xte, yte = load_digits_split(0)
    return client_datasets(xtr, ytr, 4, alpha=None, seed=0), (xte, yte)


TINY = FSLConfig(**{**CFG.to_dict(), "batch_size": 8, "server_update_interval": 2, "align_batch_size": 16})


def _data_fn(data):
    def fn(pid, n):
        return data[pid]

    return fn


class _Failing:
    """A data_fn that raises for the partitions and rounds ``fail(pid, call)`` names (call = how many times that
    partition was asked so far, i.e. its server round - 1 when it is sampled every round)."""

    def __init__(self, data, fail):
        self.data, self.fail, self.calls = data, fail, {}

    def __call__(self, pid, n):
        c = self.calls.get(pid, 0)
        self.calls[pid] = c + 1
        if self.fail(pid, c):
            raise RuntimeError(f"disk of partition {pid} unplugged")
        return self.data[pid]


def _run(data_fn, n_nodes, n_clients, ev=None, cfg=TINY, client_cfg="same", **nodes):
    client_cfg = cfg if client_cfg == "same" else client_cfg
    grid = LocalGrid(make_client_app(_model_fn, data_fn, client_cfg), n_nodes)
    return grid, *run_server(grid, _model_fn, cfg, cfg.rounds, n_clients, eval_data=ev, **nodes)


def _same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_one_of_four_clients_raising_every_round(digits4):
    data, ev = digits4
    _, ref, ref_res = _run(_data_fn(data[:3]), 3, 3, ev, cfg=CFG)
    _, strat, res = _run(_Failing(data, lambda pid, c: pid == 3), 4, 4, ev, cfg=CFG)
    # the run completes with the three survivors: the 3-client run exactly (same seeds, partition order)
    acc, ref_acc = (
        res.evaluate_metrics_serverapp[CFG.rounds]["accuracy"],
        ref_res.evaluate_metrics_serverapp[3]["accuracy"],
    )
    assert abs(acc - ref_acc) <= 0.02
    _same(dict(res.arrays.to_torch_state_dict()), dict(ref_res.arrays.to_torch_state_dict()))
    assert [(f["round"], f["partition-id"]) for f in strat.failures] == [(t, 3) for t in range(CFG.rounds)]
    assert all("disk of partition 3 unplugged" in f["reason"] for f in strat.failures)
    # ledger = the closed form for what was sent: three clients' FSL-SAGE traffic, plus x̄_c sent to partition 3
    c, s, a = _model_fn()
    closed = expected_bytes(
        "fsl_sage", [len(d[1]) for d in data[:3]], CFG.batch_size, CFG.q, CFG.align_interval, CFG.rounds,
        512, nbytes(c), nbytes(s), nbytes(a), mode="lazy",
    )  # fmt: skip
    per_round = [strat.ledger.total_where(round=t) for t in range(CFG.rounds)]
    assert per_round == [b + nbytes(c) for b in closed]
    assert strat.ledger.total_where(client=3, direction="up") == 0
    assert strat.ledger.total_where(client=3) == CFG.rounds * nbytes(c)


def test_extra_node_is_ignored(tiny_data):
    data, _ = tiny_data
    data4 = [*data, data[0]]
    _, ref, ref_res = _run(_data_fn(data), 3, 3)
    grid, strat, res = _run(_data_fn(data4), 4, 3)
    _same(dict(res.arrays.to_torch_state_dict()), dict(ref_res.arrays.to_torch_state_dict()))
    assert strat.ledger.by_kind() == ref.ledger.by_kind()
    assert list(strat.extra.values()) == [3]
    assert all(cohort == [0, 1, 2] for cohort in strat.cohorts.values())


def test_too_few_nodes_is_a_clear_error(tiny_data):
    data, _ = tiny_data
    with pytest.raises(TimeoutError, match=r"waited 0.3 s for 3 nodes .* have 2 \(partition ids \[0, 1\]"):
        _run(_data_fn(data), 2, 3, node_timeout=0.3)


def test_duplicate_partition_id_names_the_nodes(tiny_data):
    data, _ = tiny_data
    grid = LocalGrid(make_client_app(_model_fn, _data_fn(data), TINY), 3)
    nodes = sorted(grid.contexts)
    grid.contexts[nodes[2]].node_config["partition-id"] = grid.contexts[nodes[0]].node_config["partition-id"]
    pid = grid.contexts[nodes[0]].node_config["partition-id"]
    with pytest.raises(ValueError, match=rf"nodes {nodes[0]} and {nodes[2]} both report partition-id {pid}"):
        run_server(grid, _model_fn, TINY, TINY.rounds, 3, node_timeout=0.3)


def test_out_of_range_partition_can_be_an_error(tiny_data):
    data, _ = tiny_data
    grid = LocalGrid(make_client_app(_model_fn, _data_fn(data), TINY), 3)
    nodes = list(grid.contexts)
    grid.contexts[nodes[1]].node_config["partition-id"] = 7
    with pytest.raises(ValueError, match=rf"node {nodes[1]} reports partition-id 7, outside \[0, 3\)"):
        run_server(grid, _model_fn, TINY, TINY.rounds, 3, extra_nodes="error")


def test_config_mismatch_is_refused_and_config_travels(tiny_data):
    data, _ = tiny_data
    client_cfg = FSLConfig(**{**TINY.to_dict(), "server_update_interval": 3})
    with pytest.raises(RuntimeError, match=r"server_update_interval = 3 here, 2 on the server"):
        _run(_data_fn(data), 3, 3, cfg=TINY, client_cfg=client_cfg, accept_failures=False)
    # a ClientApp without its own config runs the server's (q = 3 here: 2 uploads of 5 batches per client)
    _, strat, _ = _run(_data_fn(data), 3, 3, cfg=client_cfg, client_cfg=None)
    _, ref, _ = _run(_data_fn(data), 3, 3, cfg=client_cfg, client_cfg=client_cfg)
    assert strat.server_steps == ref.server_steps == 3 * 3 * 2
    assert strat.ledger.by_kind() == ref.ledger.by_kind()
    _same(strat.server.state_dict(), ref.server.state_dict())


def test_fraction_train_samples_the_configured_number(tiny_data):
    data, _ = tiny_data
    data4 = [*data, data[1]]
    cfg = FSLConfig(**{**TINY.to_dict(), "rounds": 4})
    _, strat, _ = _run(_data_fn(data4), 4, 4, cfg=cfg, fraction_train=0.5)
    cohorts = [strat.cohorts[t] for t in range(4)]
    assert all(len(c) == 2 and c == sorted(c) for c in cohorts)
    assert len({tuple(c) for c in cohorts}) > 1  # a seeded draw, not always the same two
    for t, cohort in enumerate(cohorts):
        assert {tr.client for tr in strat.ledger.transfers if tr.round == t and tr.direction == "up"} == set(cohort)
    _, again, _ = _run(_data_fn(data4), 4, 4, cfg=cfg, fraction_train=0.5)
    assert again.cohorts == strat.cohorts


def test_aux_lost_with_a_failed_reply_is_sent_again(tiny_data):
    data, _ = tiny_data
    # l = 2, R = 4: aligned after rounds 0 and 2, sent in rounds 1 and 3. Partition 1 fails in round 1 (its
    # second call): the aux sent with that message is lost with the failed ClientApp's state, so it goes again
    cfg = FSLConfig(**{**TINY.to_dict(), "rounds": 4, "align_interval": 2})
    _, strat, _ = _run(_Failing(data, lambda pid, c: pid == 1 and c == 1), 3, 3, cfg=cfg)
    aux_down = [tr.round for tr in strat.ledger.transfers if tr.client == 1 and tr.kind == "aux"]
    assert aux_down == [1, 2, 3]
    assert [tr.round for tr in strat.ledger.transfers if tr.client == 0 and tr.kind == "aux"] == [1, 3]
    assert [(f["round"], f["partition-id"]) for f in strat.failures] == [(1, 1)]


def test_config_mismatch_with_accept_failures_raises_after_the_first_round(tiny_data):
    """A ClientApp/ServerApp mismatch is deterministic: every client fails every round. Accepting failures must
    not turn it into a run that 'succeeds' with the initial weights."""
    data, _ = tiny_data
    client_cfg = FSLConfig(**{**TINY.to_dict(), "server_update_interval": 3})
    with pytest.raises(RuntimeError, match=r"round 1: no client survived \(the ClientApp's FSLConfig does not match"):
        _run(_data_fn(data), 3, 3, cfg=TINY, client_cfg=client_cfg)
    with pytest.raises(RuntimeError, match=r"round 2: no client survived \(every sampled client failed\).*unplugged"):
        _run(_Failing(data, lambda pid, c: c == 1), 3, 3)
