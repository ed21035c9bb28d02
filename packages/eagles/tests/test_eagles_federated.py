from dataclasses import replace

import pytest
import torch
from eagles_testing import small_clients, small_config
from flwr.app import Context, Message, MessageType, RecordDict

from eagles.flower import MASK_PREFIX, EaglesStrategy, LocalGrid, make_client_app
from eagles.sim import run_federated, run_inprocess

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _same_states(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("phase", ["pretrain", "retrain"])
def test_inprocess_flower_equals_plain_loop_bit_for_bit(tiny_graph, phase):
    clients = small_clients(tiny_graph, 3)
    cfg = small_config()
    fixed = None
    if phase == "retrain":
        pre = run_federated(clients, cfg, 2)
        fixed = {k: v.clone() for k, v in pre.server.masks_of(pre.server.personal[0]).items()}
    a = run_federated(clients, cfg, 3, fixed_mask=fixed)
    b = run_inprocess(clients, cfg, 3, fixed_mask=fixed, seed=7)
    assert a.history == b.history
    for pid in range(3):
        _same_states(a.server.personal[pid], b.server.personal[pid])
    assert dict(a.server.comm.records) == dict(b.server.comm.records)
    assert dict(a.server.flops.records) == dict(b.server.flops.records)
    if phase == "pretrain":
        assert a.history[-1]["density"] < 1.0  # thresholds moved: masks differ between clients
        assert not torch.equal(
            a.server.personal[0]["sparsifier.router.w_gate"], a.server.personal[1]["sparsifier.router.w_gate"]
        )
    else:
        for k, m in fixed.items():
            assert bool((a.server.personal[0][k][~m] == 0).all())


def test_flower_fedavg_matches_plain_size_weighted_fedavg(tiny_graph):
    clients = small_clients(tiny_graph, 3)
    cfg = small_config(weight_sparsifier=False, graph_sparsifier=False, aggregation="fedavg")
    a = run_federated(clients, cfg, 2)
    b = run_inprocess(clients, cfg, 2, strategy="fedavg")
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ha:
            assert ha[k] == pytest.approx(hb[k], abs=1e-6), k
    assert a.server.comm.total(direction="up") == b.server.comm.total(direction="up")


def _replies_of_one_round(clients, cfg):
    """Every reply message of one EAGLES round on the loopback grid (train and evaluate)."""
    from eagles.flower import run_server

    grid = LocalGrid(make_client_app(clients, cfg), len(clients))
    seen = []
    orig = grid.send_and_receive

    def spy(messages, *, timeout=None):
        replies = list(orig(messages, timeout=timeout))
        seen.extend(replies)
        return replies

    grid.send_and_receive = spy
    run_server(grid, cfg, 12, 3, len(clients), 1)
    return seen


def test_replies_hold_parameters_masks_gates_and_metrics_only(tiny_graph):
    clients = small_clients(tiny_graph, 2)
    cfg = small_config()
    seen = _replies_of_one_round(clients, cfg)
    assert seen
    forbidden = {tuple(t.shape) for c in clients for t in (c.x, c.y, c.edge_index)}
    for msg in seen:
        content = msg.content
        assert set(content.keys()) <= {"arrays", "metrics"}
        assert not content.config_records
        for rec in content.array_records.values():
            for k, arr in rec.items():
                assert k.startswith(MASK_PREFIX) or k.startswith(("gnn.", "sparsifier.")), k
                assert tuple(arr.shape) not in forbidden or k.startswith(("gnn.", "sparsifier.", MASK_PREFIX))
        for rec in content.metric_records.values():
            assert set(rec) <= {
                "val-acc",
                "test-acc",
                "num-examples",
                "num-val",
                "density",
                "train-loss",
                "kept-edges",
                "macs-gnn",
                "macs-sparsifier",
                "partition-id",
            }


def test_client_app_keeps_optimizer_state_in_context(tiny_graph):
    clients = small_clients(tiny_graph, 2)
    cfg = small_config()
    grid = LocalGrid(make_client_app(clients, cfg), 2)
    from eagles.flower import run_server

    run_server(grid, cfg, 12, 3, 2, 2)
    for ctx in grid.contexts.values():
        assert isinstance(ctx, Context) and "eagles" in ctx.state.config_records


def test_clients_without_edges_and_isolated_nodes_work(tiny_graph):
    from torch_geometric.data import Data

    lonely = Data(x=tiny_graph.x, edge_index=torch.zeros(2, 0, dtype=torch.long), y=tiny_graph.y)
    clients = small_clients(lonely, 2) + small_clients(tiny_graph, 2)
    run = run_federated(clients, small_config(), 2)
    assert len(run.history) == 2 and all(h["kept-edges"] <= 1.0 for h in run.history)


def test_personalized_aggregation_ablations_and_fixed_mask_checks(tiny_graph):
    clients = small_clients(tiny_graph, 3)
    for distance in ("mask", "ctx"):
        run = run_federated(clients, small_config(distance=distance), 1)
        a = run.server.last_weights
        torch.testing.assert_close(a.sum(1), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="masks must have the keys"):
        run_federated(clients, small_config(), 1, fixed_mask={"gnn.convs.0.lin_l.weight": torch.ones(8, 12)})
    pre = run_federated(clients, small_config(), 1)
    bad = {k: torch.ones(2, 2, dtype=torch.bool) for k in pre.server.masks_of(pre.server.personal[0])}
    with pytest.raises(ValueError, match="must have shape"):
        run_federated(clients, small_config(), 1, fixed_mask=bad)


def test_strategy_is_a_flower_fedavg_and_stops_at_band(tiny_graph):
    from flwr.serverapp.strategy import FedAvg

    clients = small_clients(tiny_graph, 3)
    cfg = replace(small_config(), threshold_lr=0.2, bands=(0.9, 0.5))
    run = run_inprocess(clients, cfg, 30, stop_band=0.9)
    assert run.server.selector.has(0.9) and len(run.history) < 30
    assert issubclass(EaglesStrategy, FedAvg)
    assert Message and MessageType and RecordDict


def _raising_in(monkeypatch, partition, server_round):
    """The real ClientApp's local training raises for one (partition, round): a ClientApp exception."""
    import eagles.flower as ef

    real = ef.local_train

    def local_train(model, opt, g, config, pid, r):
        if (pid, r) == (partition, server_round):
            raise RuntimeError(f"boom in client {pid}")
        return real(model, opt, g, config, pid, r)

    monkeypatch.setattr(ef, "local_train", local_train)


@pytest.mark.parametrize("strategy", ["eagles", "fedavg"])
def test_a_raising_client_app_is_left_out_of_its_round_and_the_run_goes_on(tiny_graph, monkeypatch, strategy):
    """Flower's semantics on the in-process grid: the exception becomes an error reply, the others aggregate."""
    clients = small_clients(tiny_graph, 3)
    cfg = small_config()
    if strategy == "fedavg":
        cfg = small_config(weight_sparsifier=False, graph_sparsifier=False, aggregation="fedavg")
    clean = run_inprocess(clients, cfg, 1, strategy=strategy, seed=1)
    _raising_in(monkeypatch, 1, 2)
    failed = run_inprocess(clients, cfg, 2, strategy=strategy, seed=1)
    assert len(failed.history) == 2 and not clean.failures
    assert [(r, reason) for r, _, reason in failed.failures] == [(2, "<class 'RuntimeError'>:<'boom in client 1'>")]
    assert {c for r, c, d, _ in failed.server.comm.records if r == 2 and d == "up"} == {0, 2}
    if strategy == "eagles":
        _same_states(failed.server.personal[1], clean.server.personal[1])  # round 2 left client 1 as round 1 made it
        key = "gnn.convs.0.lin_l.weight"
        assert not torch.equal(failed.server.personal[0][key], clean.server.personal[0][key])


def test_a_raising_client_app_keeps_its_node_state_and_raise_errors_lets_it_through(tiny_graph, monkeypatch):
    clients = small_clients(tiny_graph, 2)
    cfg = small_config()
    _raising_in(monkeypatch, 0, 1)
    grid = LocalGrid(make_client_app(clients, cfg), 2)
    from eagles.flower import run_server

    server = run_server(grid, cfg, 12, 3, 2, 1)
    node0 = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == 0)
    assert "eagles" not in grid.contexts[node0].state.config_records  # no optimizer state from the failed round
    assert len(server.failures) == 1 and server.failures[0][1] == node0
    with pytest.raises(RuntimeError, match="boom in client 0"):
        run_server(LocalGrid(make_client_app(clients, cfg), 2, raise_errors=True), cfg, 12, 3, 2, 1)


def _restart(grid, partition):
    """The node holding ``partition`` restarts: a new node id, an empty ``context.state``."""
    old = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == partition)
    ctx = grid.contexts.pop(old)
    new = max(grid.contexts) + 1
    grid.contexts[new] = Context(
        run_id=ctx.run_id, node_id=new, node_config=dict(ctx.node_config), state=RecordDict(), run_config={}
    )
    return new


def test_a_node_restarted_under_a_new_id_is_sent_its_partitions_personalised_model(tiny_graph):
    from flwr.app import ArrayRecord

    from eagles.client import initial_model, state_of
    from eagles.flower import split_arrays

    clients = small_clients(tiny_graph, 3)
    cfg = small_config()
    grid = LocalGrid(make_client_app(clients, cfg), 3, seed=2)
    init = state_of(initial_model(12, 3, cfg))
    strategy = EaglesStrategy(cfg, init, 3)
    configure, seen = strategy.configure_train, {}

    def configure_train(server_round, arrays, config, grid):
        if server_round == 2:
            seen["node"] = _restart(grid, 1)
            seen["personal"] = strategy.server.personal[1]
        msgs = list(configure(server_round, arrays, config, grid))
        seen[server_round] = {m.metadata.dst_node_id: m for m in msgs}
        return msgs

    strategy.configure_train = configure_train
    strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=2)
    sent, _ = split_arrays(seen[2][seen["node"]].content["arrays"])
    _same_states(sent, seen["personal"])
    assert not torch.equal(sent["gnn.convs.0.lin_l.weight"], init["gnn.convs.0.lin_l.weight"])
    assert strategy.node_to_pid[seen["node"]] == 1 and len(strategy.server.history) == 2


def test_two_nodes_holding_one_partition_are_refused(tiny_graph):
    from eagles.flower import run_server

    clients = small_clients(tiny_graph, 3)
    cfg = small_config()
    grid = LocalGrid(make_client_app(clients, cfg), 3)
    twin = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == 1)
    grid.contexts[twin].node_config["partition-id"] = 0
    with pytest.raises(ValueError, match=r"own partition.*partition 0 on nodes \[\d+, \d+\]"):
        run_server(grid, cfg, 12, 3, 3, 1)


def test_masks_travel_bit_packed_as_many_bytes_as_the_meter_counts(tiny_graph):
    from eagles.flower import pack_mask, split_arrays, unpack_mask
    from eagles.metrics import payload_bytes

    g = torch.Generator().manual_seed(0)
    for shape in ((3, 5), (8,), (1, 1), (0, 4), (7, 9, 2)):
        m = torch.rand(shape, generator=g) < 0.4
        packed = pack_mask(m)
        assert packed.dtype == torch.uint8 and packed.numel() == -(-m.numel() // 8)
        assert torch.equal(unpack_mask(packed, shape), m)
    with pytest.raises(ValueError, match="packed"):
        unpack_mask(torch.zeros(3, dtype=torch.uint8), (3, 5))
    clients = small_clients(tiny_graph, 2)
    cfg = small_config()
    seen = _replies_of_one_round(clients, cfg)
    reply = next(m for m in seen if "arrays" in m.content)
    arrays = reply.content["arrays"]
    state, masks = split_arrays(arrays)
    assert masks and all(m.dtype == torch.bool and m.shape == state[k].shape for k, m in masks.items())
    wire = sum(arrays[MASK_PREFIX + k].numpy().nbytes for k in masks)
    counted = sum(payload_bytes(state, masks)[p] for p in ("gnn", "sparsifier"))
    values = sum(4 * int(m.sum()) for m in masks.values()) + 4 * sum(
        v.numel() for k, v in state.items() if k not in masks
    )
    assert wire == counted - values  # the meter's ⌈numel/8⌉ per mask is what travels
