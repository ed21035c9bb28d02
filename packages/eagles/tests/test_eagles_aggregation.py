"""The stacked server paths (one (C, numel) matrix per key) against per-client references written out loop by loop."""

import numpy as np
import pytest
import torch
from eagles_testing import small_config
from flwr.app import ArrayRecord, Message, MessageType, MetricRecord, RecordDict

from eagles import fl
from eagles.flower import MASK_PREFIX, EaglesStrategy, pack_mask, split_arrays, stack_replies
from eagles.metrics import kept_counts, payload_bytes, payload_bytes_rows
from eagles.server import GATE_KEY, ClientReply, EaglesServer, StackedReplies

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SHAPES = {
    "gnn.lin.weight": (6, 5),
    "gnn.lin.threshold": (6,),
    "gnn.lin.bias": (6,),
    "sparsifier.experts.0.weight": (3, 4),
    GATE_KEY: (5, 2),
    "gnn.steps": (),
}
MASKED = ("gnn.lin.weight", "sparsifier.experts.0.weight")


def _clients(c: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    states, masks = [], []
    for _ in range(c):
        st = {k: torch.randn(s, generator=g) for k, s in SHAPES.items() if k != "gnn.steps"}
        st["gnn.lin.threshold"] = st["gnn.lin.threshold"].abs() * 0.5
        st["gnn.steps"] = torch.tensor(int(torch.randint(0, 9, (), generator=g)))
        states.append(st)
        masks.append({k: torch.rand(SHAPES[k], generator=g) < 0.4 for k in MASKED})
    return states, masks


def _metrics(i: int) -> dict[str, float]:
    return {"val-acc": 0.1 * i, "test-acc": 0.2, "kept-edges": 1.0, "macs-gnn": 10.0 + i, "macs-sparsifier": 3.0,
            "num-examples": 5.0 + i}  # fmt: skip


def _closed_form_pairs(gates):
    """mean((sort a - sort b)^2) of every pair, pair by pair in float64 (the reference of the Gram form)."""
    s = [x.reshape(-1).to(torch.float64).sort().values for x in gates]
    return torch.tensor([[float(((a - b) ** 2).mean()) for b in s] for a in s], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_context_distance_gram_form_equals_the_pairwise_closed_form(dtype):
    g = torch.Generator().manual_seed(1)
    gates = [(torch.randn(7, 3, generator=g) * (1 + i)).to(dtype) for i in range(6)]
    # a cluster far from client 0 whose members are close to each other (the cancellation the Gram form risks)
    far = torch.randn(7, 3, generator=g, dtype=torch.float64) * 50
    gates += [(far + 1e-3 * torch.randn(7, 3, generator=g, dtype=torch.float64)).to(dtype) for _ in range(3)]
    d, ref = fl.context_distance(gates), _closed_form_pairs(gates)
    torch.testing.assert_close(d, ref, rtol=1e-12, atol=1e-13 * float(ref.max()))
    assert torch.equal(d, d.t()) and bool((d.diagonal() == 0).all()) and bool((d >= 0).all())
    assert torch.equal(fl.context_distance_stacked(torch.stack([x.reshape(-1) for x in gates])), d)
    # clients identical to client 0 are at distance 0 exactly, identical clients give the zero matrix
    same = fl.context_distance([gates[2], gates[4], gates[2], gates[2].clone()])
    assert float(same[0, 2]) == 0.0 and float(same[0, 3]) == 0.0 and float(same[2, 3]) == 0.0
    assert torch.equal(fl.context_distance([gates[1]] * 5), torch.zeros(5, 5, dtype=torch.float64))


def test_mask_products_int8_and_float32_blocks_agree_with_the_pairwise_counts(monkeypatch):
    g = torch.Generator().manual_seed(2)
    rows = torch.rand(5, 1000, generator=g) < 0.3
    pairwise = torch.tensor([[float((rows[i] & rows[j]).sum()) for j in range(5)] for i in range(5)]).double()
    assert torch.equal(fl._gram(rows), pairwise)
    monkeypatch.setattr(fl, "_BLOCK", 64)  # several column blocks
    assert torch.equal(fl._gram_float(rows), pairwise)
    assert torch.equal(fl._gram(rows[:, 3:700]), fl._gram_float(rows[:, 3:700]))  # a non-contiguous view


def test_stacked_consensus_and_distance_equal_the_per_client_functions():
    _, masks = _clients(4, 3)
    st = fl.stack_masks(masks)
    cons = fl.consensus_stacked(st)
    for k in MASKED:
        ref = masks[0][k].clone()
        for m in masks[1:]:
            ref |= m[k]
        assert torch.equal(cons[k].view(SHAPES[k]), ref)
    ref_d = torch.tensor(
        [[sum(float((a[k] != b[k]).double().mean()) for k in MASKED) for b in masks] for a in masks],
        dtype=torch.float64,
    )
    torch.testing.assert_close(fl.mask_distance_stacked(st), ref_d, rtol=0, atol=1e-12)


def test_personalized_mix_equals_the_weighted_sum_per_client_and_keeps_integer_tensors():
    states, _ = _clients(4, 4)
    g = torch.Generator().manual_seed(5)
    a = torch.rand(4, 4, generator=g, dtype=torch.float64)
    a = a / a.sum(1, keepdim=True)
    out = fl.personalized_aggregate(states, a)
    for i in range(4):
        for k in SHAPES:
            if k == "gnn.steps":
                assert torch.equal(out[i][k], states[i][k])
                continue
            ref = sum(float(a[i, j]) * states[j][k].double() for j in range(4))
            torch.testing.assert_close(out[i][k].double(), ref, rtol=1e-6, atol=1e-6)
            assert out[i][k].shape == states[i][k].shape and out[i][k].dtype == states[i][k].dtype


def test_payload_bytes_rows_equal_payload_bytes_per_client():
    states, masks = _clients(3, 6)
    st, sm = fl.stack_states(states), fl.stack_masks(masks)
    for known in (False, True):
        rows = payload_bytes_rows(st, sm, mask_known=known)
        assert rows == [payload_bytes(s, m, mask_known=known) for s, m in zip(states, masks, strict=True)]
    shared = masks[0]  # one mask for every client (the re-train's fixed mask), in the weight's shape
    ref = [payload_bytes(s, shared, mask_known=True) for s in states]
    assert payload_bytes_rows(st, shared, mask_known=True) == ref
    assert payload_bytes_rows(st) == [payload_bytes(s) for s in states]
    with pytest.raises(ValueError, match="entries"):
        payload_bytes_rows(st, {"gnn.lin.weight": torch.ones(4, dtype=torch.bool)})


def _reference_round(cfg, replies):
    """One round of the server written per client: metering, consensus, distances, weights, mixing."""
    replies = sorted(replies, key=lambda r: r.partition_id)
    up = [payload_bytes(r.state, r.masks) for r in replies]
    masks = [r.masks for r in replies]
    cons = fl.consensus_mask(masks)
    a = fl.personalized_weights(fl.mask_distance(masks), fl.context_distance([r.state[GATE_KEY] for r in replies]))
    mixed = []
    for i in range(len(replies)):
        mix = {}
        for k, t0 in replies[0].state.items():
            if t0.is_floating_point():
                mix[k] = sum(float(a[i, j]) * r.state[k].double() for j, r in enumerate(replies))
            else:
                mix[k] = replies[i].state[k]
        mixed.append(mix)
    return up, cons, a, mixed


@pytest.mark.parametrize("c", [1, 4])
def test_server_round_on_stacked_replies_equals_the_per_client_reference(c):
    cfg = small_config()
    states, masks = _clients(c, 7)
    replies = [ClientReply(i, s, m, _metrics(i)) for i, (s, m) in reversed(list(enumerate(zip(states, masks))))]
    server = EaglesServer(cfg, states[0], c)
    record = server.aggregate_train(1, replies)
    up, cons, a, mixed = _reference_round(cfg, replies)
    assert [server.comm.records[(1, i, "up", p)] for i in range(c) for p in ("gnn", "sparsifier")] == [
        u[p] for u in up for p in ("gnn", "sparsifier")
    ]
    assert record["density"] == fl.mask_density(cons)
    assert torch.equal(server.last_weights, a)
    for i in range(c):
        for k, ref in mixed[i].items():
            got = server.personal[i][k]
            assert got.shape == states[i][k].shape
            torch.testing.assert_close(got.double(), ref.double(), rtol=1e-6, atol=1e-6)
    # the downlink meter of every client at once equals the per-client meter, from the stored matrices or not
    many, one = EaglesServer(cfg, states[0], c), EaglesServer(cfg, states[0], c)
    many.aggregate_train(1, replies)
    one.aggregate_train(1, replies)
    many.count_down_many(2, dict(many.personal))  # the stored (C, numel) matrices
    many.count_down_many(3, {i: states[i] for i in range(c)})  # other states: stacked once
    for i in range(c):
        one.count_down(2, i, one.personal[i])
        one.count_down(3, i, states[i])
    assert dict(many.comm.records) == dict(one.comm.records)


def test_stack_replies_reads_the_arrays_as_split_arrays_does_and_refuses_mismatches():
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)  # Flower's task identity, which Message() needs outside a ServerApp
    states, masks = _clients(3, 8)

    def reply(i, st, ms):
        arrays = ArrayRecord({**st, **{MASK_PREFIX + k: pack_mask(v) for k, v in ms.items()}})
        sent = Message(RecordDict(), dst_node_id=10 + i, message_type=MessageType.TRAIN)
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({**_metrics(i), "partition-id": i})}),
                       reply_to=sent)  # fmt: skip

    msgs = [reply(i, s, m) for i, (s, m) in enumerate(zip(states, masks, strict=True))][::-1]
    st = stack_replies(msgs)
    assert st.partition_ids == [0, 1, 2]
    ref = StackedReplies.of([ClientReply(i, *split_arrays(m.content["arrays"]), _metrics(i)) for i, m in
                             zip([2, 1, 0], msgs, strict=True)])  # fmt: skip
    assert st.shapes == ref.shapes and st.states.keys() == ref.states.keys() and st.masks.keys() == ref.masks.keys()
    for k in ref.states:
        assert torch.equal(st.states[k], ref.states[k]) and st.states[k].dtype == ref.states[k].dtype
    for k in ref.masks:
        assert torch.equal(st.masks[k], ref.masks[k])
    # a Fortran-ordered array (its values do not follow the header in C order) is read through Array.numpy()
    fortran = dict(states[1])
    fortran["gnn.lin.weight"] = torch.from_numpy(np.asfortranarray(states[1]["gnn.lin.weight"].numpy()))
    st2 = stack_replies([reply(0, states[0], masks[0]), reply(1, fortran, masks[1])])
    assert torch.equal(st2.states["gnn.lin.weight"][1].view(6, 5), states[1]["gnn.lin.weight"])
    bad = dict(states[1])
    bad["gnn.lin.bias"] = torch.zeros(7)
    with pytest.raises(ValueError, match="shape"):
        stack_replies([reply(0, states[0], masks[0]), reply(1, bad, masks[1])])
    with pytest.raises(ValueError, match="at least one"):
        stack_replies([])


def test_strategy_round_equals_the_server_round_on_the_same_replies():
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)
    cfg = small_config()
    states, masks = _clients(3, 9)
    strategy = EaglesStrategy(cfg, states[0], 3)
    msgs = []
    for i, (s, m) in enumerate(zip(states, masks, strict=True)):
        sent = Message(RecordDict(), dst_node_id=20 + i, message_type=MessageType.TRAIN)
        arrays = ArrayRecord({**s, **{MASK_PREFIX + k: pack_mask(v) for k, v in m.items()}})
        met = MetricRecord({**_metrics(i), "partition-id": i})
        msgs.append(Message(RecordDict({"arrays": arrays, "metrics": met}), reply_to=sent))
        strategy.node_to_pid[20 + i] = i
        strategy._sent[i] = states[0]
    strategy.aggregate_train(1, msgs)
    server = EaglesServer(cfg, states[0], 3)
    for i in range(3):
        server.count_down(1, i, states[0])
    server.aggregate_train(1, [ClientReply(i, s, m, {**_metrics(i), "partition-id": float(i)}) for i, (s, m) in
                               enumerate(zip(states, masks, strict=True))])  # fmt: skip
    assert strategy.server.history == server.history
    assert dict(strategy.server.comm.records) == dict(server.comm.records)
    for i in range(3):
        for k in states[0]:
            assert torch.equal(strategy.server.personal[i][k], server.personal[i][k]), k


def test_mask_grams_give_the_distance_and_every_clients_kept_count():
    _, masks = _clients(5, 10)
    st = fl.stack_masks(masks)
    grams = fl.mask_grams(st)
    for k in MASKED:
        assert torch.equal(grams[k].diagonal(), st[k].sum(1).double())
    assert torch.equal(fl.mask_distance_stacked(st, grams), fl.mask_distance_stacked(st))


def test_payload_bytes_rows_from_known_kept_counts_equal_the_counted_masks():
    states, masks = _clients(4, 11)
    st, sm = fl.stack_states(states), fl.stack_masks(masks)
    nnz = {k: sm[k].sum(1) for k in MASKED}
    for known in (False, True):
        assert payload_bytes_rows(st, nnz=nnz, mask_known=known) == payload_bytes_rows(st, sm, mask_known=known)
    with pytest.raises(ValueError, match="counts"):
        payload_bytes_rows(st, nnz={"gnn.lin.weight": torch.tensor([1, 2, 3, 31])})  # 31 > 30 entries
    with pytest.raises(ValueError, match="counts"):
        payload_bytes_rows(st, nnz={"gnn.lin.weight": torch.tensor([1, 2])})


@pytest.mark.parametrize("t_dtype", [torch.float32, torch.float64])
def test_kept_counts_equal_the_masks_a_state_implies(t_dtype):
    g = torch.Generator().manual_seed(12)
    w = torch.randn(5, 6, 9, generator=g)
    w[0, 0, :3] = torch.tensor([0.5, -0.5, float("nan")])
    t = (torch.rand(5, 6, generator=g) * 0.8).to(t_dtype)
    t[0, 0] = 0.5  # ties |W| = t are not kept
    t[1, 2] = -1.0  # a negative threshold keeps the whole row
    ref = torch.tensor([int((w[i].abs() > t[i].unsqueeze(1)).sum()) for i in range(5)])
    assert torch.equal(kept_counts(w, t), ref)
    server = EaglesServer(small_config(), {"a.weight": w[0], "a.threshold": t[0]}, 5)
    for i in range(5):  # the per-client masks_of the downlink meter reads
        assert int(server.masks_of({"a.weight": w[i], "a.threshold": t[i]})["a.weight"].sum()) == int(ref[i])


def test_buffer_pool_reuses_a_buffer_only_once_nothing_holds_it():
    pool = fl.BufferPool(keep=2)
    layout = {"a": ((3, 4), torch.float32), "b": ((3, 2), torch.float32), "n": ((3,), torch.int64)}
    first = fl.empty_blocks(layout, pool)
    assert {k: (tuple(v.shape), v.dtype) for k, v in first.items()} == layout
    assert all(v.is_contiguous() for v in first.values())
    first["a"].fill_(1.0)
    held = first["a"][1]  # a view of a row, as a personalised state is
    ptr_a = first["a"].data_ptr()
    del first
    second = fl.empty_blocks(layout, pool)  # the first buffer is still held: a new one
    assert second["a"].data_ptr() != ptr_a
    second["a"].fill_(2.0)
    ptr_second = second["a"].data_ptr()
    del second
    third = fl.empty_blocks(layout, pool)  # the second is free again: reused
    assert third["a"].data_ptr() == ptr_second
    third["a"].fill_(3.0)
    assert bool((held == 1.0).all())  # the held view kept its values
    del held, third
    assert fl.empty_blocks(layout, pool)["a"].data_ptr() in (ptr_a, ptr_second)


def _messages(states, masks, node0=30):
    msgs = []
    for i, (s, m) in enumerate(zip(states, masks, strict=True)):
        sent = Message(RecordDict(), dst_node_id=node0 + i, message_type=MessageType.TRAIN)
        arrays = ArrayRecord({**s, **{MASK_PREFIX + k: pack_mask(v) for k, v in m.items()}})
        met = MetricRecord({**_metrics(i), "partition-id": i})
        msgs.append(Message(RecordDict({"arrays": arrays, "metrics": met}), reply_to=sent))
    return msgs


def test_stack_replies_into_a_reused_buffer_equal_a_fresh_one():
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)
    states, masks = _clients(3, 13)
    msgs = _messages(states, masks)
    pool = fl.BufferPool(keep=1)
    ref = stack_replies(msgs)
    kept = stack_replies(msgs, pool=pool)  # held: the next call reads into another buffer
    other = stack_replies(_messages(*_clients(3, 14)), pool=pool)
    ptr = other.states["gnn.lin.weight"].data_ptr()
    assert ptr != kept.states["gnn.lin.weight"].data_ptr()
    del other
    again = stack_replies(msgs, pool=pool)  # the buffer of ``other``, free again
    assert again.states["gnn.lin.weight"].data_ptr() == ptr
    for st in (kept, again):
        assert st.shapes == ref.shapes and st.partition_ids == ref.partition_ids
        for k in ref.states:
            assert torch.equal(st.states[k], ref.states[k])
        for k in ref.masks:
            assert torch.equal(st.masks[k], ref.masks[k])


def test_strategy_rounds_on_reused_buffers_equal_server_rounds_and_meter_the_serialised_payload():
    """Four rounds: the strategy reads every round into one buffer and mixes round 4 into round 2's buffer (round
    1's is held by the caller, so round 3 gets a new one). The personalised models, records and metered bytes
    equal the server's on ClientReply objects, the personalised state held from round 1 keeps its values, and the
    uplink bytes equal the serialised payload's (each masked layer: its values' bytes per kept entry plus its
    packed mask bytes, as Flower carries them)."""
    from flwr.clientapp import ClientApp

    from eagles.flower import LocalGrid

    LocalGrid(ClientApp(), 1)
    cfg = small_config()
    strategy = EaglesStrategy(cfg, _clients(1, 15)[0][0], 3)
    server = EaglesServer(cfg, _clients(1, 15)[0][0], 3)
    strategy.node_to_pid.update({30 + i: i for i in range(3)})
    kept_state, ptrs = None, []
    for rnd in range(1, 5):
        states, masks = _clients(3, 20 + rnd)
        msgs = _messages(states, masks)
        sent = {i: strategy.server.state_for(i) for i in range(3)}  # what configure_train records
        strategy._sent.update(sent)
        strategy.aggregate_train(rnd, msgs)
        server.count_down_many(rnd, {i: server.state_for(i) for i in range(3)})
        server.aggregate_train(rnd, [ClientReply(i, s, m, {**_metrics(i), "partition-id": float(i)})
                                     for i, (s, m) in enumerate(zip(states, masks, strict=True))])  # fmt: skip
        for i, msg in enumerate(msgs):
            arrays = msg.content["arrays"]
            up = {"gnn": 0, "sparsifier": 0}
            for k, arr in arrays.items():
                if k.startswith(MASK_PREFIX):
                    continue
                v = arr.numpy()
                b = v.nbytes
                if k in masks[i]:
                    packed = arrays[MASK_PREFIX + k].numpy()
                    b = v.itemsize * int(masks[i][k].sum()) + packed.nbytes
                up["sparsifier" if k.startswith("sparsifier.") else "gnn"] += b
            assert {p: strategy.server.comm.records[(rnd, i, "up", p)] for p in up} == up
        ptrs.append(strategy.server.personal[0]["gnn.lin.weight"].data_ptr())
        if rnd == 1:
            kept_state = {k: v.clone() for k, v in strategy.server.personal[0].items()}
            held = strategy.server.personal[0]
    assert ptrs[3] == ptrs[1] and len(set(ptrs[:3])) == 3
    assert strategy.server.history == server.history
    assert dict(strategy.server.comm.records) == dict(server.comm.records)
    for i in range(3):
        for k in server.personal[i]:
            assert torch.equal(strategy.server.personal[i][k], server.personal[i][k]), k
    for k, v in kept_state.items():
        assert torch.equal(held[k], v), k
