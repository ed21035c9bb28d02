"""EAGLES on Flower 1.42 (Message API): the strategy, the ClientApp, the ServerApp, and a loopback grid.

- :class:`EaglesStrategy` subclasses ``flwr.serverapp.strategy.FedAvg``: personalised state is keyed by
  partition id; a node the strategy has not seen is first asked for its ``partition-id`` (a ``query`` message),
  so a node that restarts under a new node id is sent its partition's personalised model, and two nodes holding
  the same partition are refused. ``configure_train`` / ``configure_evaluate`` send every node its own
  personalised ``ArrayRecord``; ``aggregate_train`` builds the consensus mask, the client similarity and the
  density bands through :class:`eagles.server.EaglesServer`.
- :func:`make_client_app`: one ``ClientApp`` for EAGLES and for Flower's ``FedAvg``; the partition comes from
  ``context.node_config["partition-id"]``, Adam's state lives in ``context.state``. A train reply holds one
  ``ArrayRecord`` (the parameters, router weights included, and the layer masks as bit-packed ``mask/<name>``
  uint8 entries, :func:`pack_mask`) and one ``MetricRecord``: never features, labels or edges.
- :func:`make_server_app` / :func:`run_server`: the ServerApp's main, also what :func:`eagles.sim.run_inprocess`
  calls on a :class:`LocalGrid`.
- :class:`LocalGrid`: the in-process grid of :mod:`icml25_shared.flower` with the failure semantics of Flower's
  simulation and deployment engines: a ClientApp that raises becomes an error reply, and the node's
  ``context.state`` stays as it was before the message.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from torch import Tensor

from eagles.client import (
    ClientGraph,
    evaluate,
    graph_dims,
    initial_model,
    load_optimizer,
    load_state,
    local_train,
    make_optimizer,
    optimizer_bytes,
    prepare_client,
    state_of,
)
from eagles.config import EaglesConfig
from eagles.fl import BufferPool, empty_blocks
from eagles.server import ClientReply, EaglesServer, StackedReplies
from icml25_shared.flower import LocalGrid as _SharedLocalGrid
from icml25_shared.validate import check_choice, check_int, check_tensor

__all__ = [
    "MASK_PREFIX",
    "EaglesStrategy",
    "LocalGrid",
    "make_client_app",
    "make_server_app",
    "run_server",
    "mean_metrics",
    "pack_mask",
    "split_arrays",
    "stack_replies",
    "unpack_mask",
]

_log = logging.getLogger(__name__)

MASK_PREFIX = "mask/"
"""Prefix of the layer-mask entries of a train reply's ArrayRecord."""


LocalGrid = _SharedLocalGrid
"""``num_nodes`` virtual SuperNodes in this process with Flower's failure semantics (a raising ``ClientApp``
becomes an error reply and its node's state is kept): :class:`icml25_shared.flower.LocalGrid`, re-exported."""


def _metrics(msg: Message) -> dict[str, float]:
    """A reply's ``metrics`` record as floats."""
    return {k: float(cast(float, v)) for k, v in cast(MetricRecord, msg.content["metrics"]).items()}


def _arrays(msg: Message, key: str = "arrays") -> ArrayRecord:
    return cast(ArrayRecord, msg.content[key])


def _to_record(state: Mapping[str, Tensor]) -> ArrayRecord:
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


_BITS = 2 ** torch.arange(8, dtype=torch.uint8)  # bit i of a byte holds entry 8j + i


def pack_mask(mask: Tensor) -> Tensor:
    """A bool mask as ⌈numel/8⌉ uint8 bytes (little-endian bits): what a layer mask costs on the wire, the
    ⌈numel/8⌉ that :class:`eagles.metrics.CommMeter` counts."""
    flat = mask.reshape(-1).to(torch.uint8)
    flat = torch.cat([flat, flat.new_zeros(-flat.numel() % 8)])
    return (flat.view(-1, 8) * _BITS).sum(1, dtype=torch.uint8)


def unpack_mask(packed: Tensor, shape: Sequence[int]) -> Tensor:
    """Inverse of :func:`pack_mask`: the bool mask of ``shape``."""
    numel = 1
    for d in shape:
        numel *= int(d)
    check_tensor("packed", packed, ndim=1, shape=((numel + 7) // 8,), dtype=torch.uint8)
    bits = (packed[:, None] & _BITS) != 0
    return bits.reshape(-1)[:numel].reshape(tuple(shape))


def split_arrays(rec: ArrayRecord) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(parameters, masks) of a reply's ArrayRecord; each mask is unpacked to its weight's shape."""
    sd = rec.to_torch_state_dict()
    state = {k: v for k, v in sd.items() if not k.startswith(MASK_PREFIX)}
    masks = {}
    for k, v in sd.items():
        if k.startswith(MASK_PREFIX):
            name = k[len(MASK_PREFIX) :]
            if name not in state:
                raise ValueError(f"mask entry {k!r} must name a parameter of the reply, got no {name!r}")
            masks[name] = unpack_mask(v, state[name].shape)
    return state, masks


def _npy_layout(arr: Array) -> tuple[np.dtype, int, bytes | None]:
    """(dtype, value bytes, ``.npy`` header) of a Flower ``Array``; the header is None unless the values follow it
    in C order (then they can be read in place)."""
    dt = np.dtype(arr.dtype)
    nbytes = int(np.prod([int(d) for d in arr.shape], dtype=np.int64)) * dt.itemsize
    data = arr.data
    off = len(data) - nbytes
    head = bytes(data[: max(off, 0)])
    descr = f"'descr': '{np.lib.format.dtype_to_descr(dt)}'".encode()
    ok = off > 0 and head.startswith(b"\x93NUMPY") and b"'fortran_order': False" in head and descr in head
    return dt, nbytes, head if ok else None


def stack_replies(
    replies: Sequence[Message], arrays_key: str = "arrays", pool: BufferPool | None = None
) -> StackedReplies:
    """Train replies (one ``ArrayRecord`` under ``arrays_key``, one ``MetricRecord`` with ``partition-id``) as
    :class:`eagles.server.StackedReplies`, in partition order: each array is read once, in place from its
    ``.npy`` bytes straight into its row of a ``(C, numel)`` matrix (``Array.numpy()`` would copy it first); the
    matrices of one dtype are blocks of one buffer (:func:`eagles.fl.empty_blocks`), and every client's bit-packed
    masks are unpacked together (``np.unpackbits``). The same tensors as :func:`split_arrays` per reply.
    ``pool``: where the buffer comes from (the strategy reuses one across rounds)."""
    if not replies:
        raise ValueError("replies must hold at least one train reply, got none")
    parsed = []
    for msg in replies:
        metrics = _metrics(msg)
        parsed.append((int(metrics["partition-id"]), metrics, _arrays(msg, arrays_key)))
    parsed.sort(key=lambda p: p[0])
    c = len(parsed)
    first = parsed[0][2]
    keys = list(first.keys())
    shapes = {k: tuple(int(d) for d in first[k].shape) for k in keys}
    layout = {k: _npy_layout(first[k]) for k in keys}
    dtypes = {k: torch.from_numpy(np.empty(0, layout[k][0].newbyteorder("="))).dtype for k in keys}
    blocks = empty_blocks({k: ((c, math.prod(shapes[k])), dtypes[k]) for k in keys}, pool)
    rows = [(k, blocks[k].numpy(), *layout[k]) for k in keys]
    for i, (pid, _, rec) in enumerate(parsed):
        if list(rec.keys()) != keys:
            raise ValueError(
                f"the reply of partition {pid} must hold the arrays of partition {parsed[0][0]}'s, got "
                f"{sorted(set(rec.keys()) ^ set(keys))} apart"
            )
        for (k, out, dt, nbytes, head), arr in zip(rows, rec.values(), strict=True):
            data = arr.data
            off = len(data) - nbytes
            if head is not None and off == len(head) and data.startswith(head):  # same dtype, shape and layout
                out[i] = np.frombuffer(data, dtype=dt, count=out.shape[1], offset=off)
                continue
            if tuple(int(d) for d in arr.shape) != shapes[k] or np.dtype(arr.dtype) != dt:
                raise ValueError(
                    f"array {k!r} of partition {pid} must be {dt} of shape {shapes[k]} as in partition "
                    f"{parsed[0][0]}'s reply, got {arr.dtype} of shape {tuple(arr.shape)}"
                )
            out[i] = arr.numpy().reshape(-1)
    states = {k: v for k, v in blocks.items() if not k.startswith(MASK_PREFIX)}
    masks = {}
    for k, packed in blocks.items():
        if not k.startswith(MASK_PREFIX):
            continue
        name = k[len(MASK_PREFIX) :]
        if name not in states:
            raise ValueError(f"mask entry {k!r} must name a parameter of the reply, got no {name!r}")
        numel = states[name].size(1)
        check_tensor(f"packed {k!r}", packed, ndim=2, shape=(c, (numel + 7) // 8), dtype=torch.uint8)
        bits = np.unpackbits(packed.numpy(), axis=1, count=numel, bitorder="little")  # bit i of byte j: entry 8j + i
        masks[name] = torch.from_numpy(bits.view(np.bool_))
    for k in [k for k in shapes if k.startswith(MASK_PREFIX)]:
        del shapes[k]
    return StackedReplies([p[0] for p in parsed], [p[1] for p in parsed], states, shapes, masks)


def mean_metrics(records: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Unweighted mean over clients of every metric (the paper's "mean client accuracy")."""
    mrs = [next(iter(rd.metric_records.values())) for rd in records]
    keys = [k for k in mrs[0] if k != "partition-id"]
    return MetricRecord({k: sum(float(cast(float, m[k])) for m in mrs) / len(mrs) for k in keys})


def make_client_app(
    partitions: Sequence[Any], config: EaglesConfig, *, fixed_mask: Mapping[str, Tensor] | None = None
) -> ClientApp:
    """A ``ClientApp`` training partition ``context.node_config["partition-id"]`` of ``partitions``.

    ``fixed_mask``: the re-train phase's mask, known to every client (it never travels with the weights).
    """
    if not isinstance(config, EaglesConfig):
        raise TypeError(f"config must be an EaglesConfig, got {type(config).__name__}")
    graphs: list[ClientGraph] = [prepare_client(p) for p in partitions]
    f, k = graph_dims(graphs)
    app = ClientApp()

    def _partition(context: Context) -> int:
        if "partition-id" not in context.node_config:
            raise ValueError(
                f"node {context.node_id}: node_config must hold a 'partition-id' (flower-supernode "
                f"--node-config 'partition-id=0 num-partitions={len(graphs)}'), got {dict(context.node_config)}"
            )
        return check_int("partition-id", context.node_config["partition-id"], min=0, max=len(graphs) - 1)

    def _setup(msg: Message, context: Context):
        pid = _partition(context)
        model = initial_model(f, k, config, fixed_mask)
        state, _ = split_arrays(_arrays(msg))
        load_state(model, state)
        return pid, model

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid, model = _setup(msg, context)
        opt = make_optimizer(model, config)
        if "eagles" in context.state.config_records:
            load_optimizer(opt, cast(bytes, context.state.config_records["eagles"]["optimizer"]))
        server_round = int(cast(int, cast(ConfigRecord, msg.content["config"])["server-round"]))
        metrics = local_train(model, opt, graphs[pid], config, pid, server_round)
        context.state["eagles"] = ConfigRecord({"optimizer": optimizer_bytes(opt)})
        arrays = state_of(model)
        for name, m in model.masks().items():
            arrays[MASK_PREFIX + name] = pack_mask(m)
        metrics["partition-id"] = pid
        content = RecordDict({"arrays": _to_record(arrays), "metrics": MetricRecord(cast(dict[str, Any], metrics))})
        return Message(content=content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """The node's partition id, asked by :class:`EaglesStrategy` of every node it has not seen yet."""
        content = RecordDict({"metrics": MetricRecord({"partition-id": _partition(context)})})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        pid, model = _setup(msg, context)
        metrics: dict[str, Any] = dict(evaluate(model, graphs[pid]))
        metrics["num-examples"] = metrics.pop("num-val")
        metrics["partition-id"] = pid
        return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

    return app


class EaglesStrategy(FedAvg):
    """EAGLES' server on Flower: personalised per-node models, consensus mask, density bands.

    Args:
        config: the method's configuration.
        initial_arrays_state: θ_0 (the same for every client).
        num_clients: nodes to wait for and train every round (all of them: personalised state is per client).
        fixed_mask: the re-train phase's mask; stop_band: stop pre-training once this band is stored.
        **kwargs: passed to ``FedAvg`` (keys of the records, ...).
    """

    def __init__(
        self,
        config: EaglesConfig,
        initial_arrays_state: Mapping[str, Tensor],
        num_clients: int,
        *,
        fixed_mask: Mapping[str, Tensor] | None = None,
        stop_band: float | None = None,
        **kwargs: Any,
    ) -> None:
        num_clients = check_int("num_clients", num_clients, min=1)
        kw: dict[str, Any] = {
            "min_train_nodes": num_clients,
            "min_evaluate_nodes": num_clients,
            "min_available_nodes": num_clients,
        }
        kw.update(kwargs)
        kw.setdefault("train_metrics_aggr_fn", mean_metrics)
        kw.setdefault("evaluate_metrics_aggr_fn", mean_metrics)
        super().__init__(**kw)
        self.num_clients = num_clients
        self.server = EaglesServer(
            config, initial_arrays_state, num_clients, fixed_mask=fixed_mask, stop_band=stop_band
        )
        self.node_to_pid: dict[int, int] = {}
        """Partition id of every node seen (asked with a ``query`` message before the node's first round)."""
        self._sent: dict[int, dict[str, Tensor]] = {}
        self._read_pool = BufferPool(keep=1)
        """The buffer the replies are read into, reused every round (nothing keeps a view of it past a round)."""
        self.failures = self.server.failures
        """(round, node id, reason) of every error reply, the partition-id queries' included (the server's list)."""

    def partitions_of(self, grid: Grid, nodes: Iterable[int], server_round: int = 0) -> dict[int, int]:
        """node id → partition id for ``nodes``: known nodes from ``node_to_pid``, the others asked with a
        ``query`` message (a node whose query fails is left out of this round, as a failed train reply is).
        Personal state is keyed by partition, so a node restarted under a new node id gets its partition's
        personalised model. Two nodes holding one partition are refused (each would train the other's model
        and a partition would be missing): ``ValueError`` naming the nodes."""
        nodes = sorted(nodes)
        unknown = [n for n in nodes if n not in self.node_to_pid]
        if unknown:
            asks = [
                Message(
                    content=RecordDict({"config": ConfigRecord({"query": "partition-id"})}),
                    message_type=MessageType.QUERY,
                    dst_node_id=n,
                )
                for n in unknown
            ]
            for reply in grid.send_and_receive(asks):
                node = reply.metadata.src_node_id
                if reply.has_error():
                    self.failures.append((server_round, node, reply.error.reason))
                    _log.warning("node %s did not report its partition-id: %s", node, reply.error.reason)
                    continue
                pid = reply.content["metrics"]["partition-id"]
                self.node_to_pid[node] = check_int(f"partition-id of node {node}", pid, min=0, max=self.num_clients - 1)
        found = {n: self.node_to_pid[n] for n in nodes if n in self.node_to_pid}
        holders: dict[int, list[int]] = {}
        for n, pid in found.items():
            holders.setdefault(pid, []).append(n)
        dup = {pid: ns for pid, ns in holders.items() if len(ns) > 1}
        if dup:
            raise ValueError(
                "every node must hold its own partition (node_config 'partition-id'), got "
                + "; ".join(f"partition {pid} on nodes {ns}" for pid, ns in sorted(dup.items()))
            )
        return found

    def _messages(self, server_round: int, config: ConfigRecord, grid: Grid, kind: str) -> list[Message]:
        if self.server.stopped:
            return []
        nodes, _ = sample_nodes(grid, self.min_available_nodes, self.num_clients)
        msgs = []
        for node, pid in sorted(self.partitions_of(grid, nodes, server_round).items()):
            state = self.server.state_for(pid)
            if kind == MessageType.TRAIN:
                self._sent[pid] = state
            cfg = ConfigRecord(dict(config))
            cfg["server-round"] = server_round
            content = RecordDict({self.arrayrecord_key: _to_record(state), self.configrecord_key: cfg})
            msgs.append(Message(content=content, message_type=kind, dst_node_id=node))
        return msgs

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per node with that node's personalised parameters."""
        return self._messages(server_round, config, grid, MessageType.TRAIN)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self._messages(server_round, config, grid, MessageType.EVALUATE)

    def _checked(self, server_round: int, replies: Iterable[Message], is_train: bool) -> list[Message]:
        """The replies without an error. A failed client is left out of this round, as Flower's ``FedAvg`` does:
        it keeps its last personalised model and is sent it again next round; the failure is logged by Flower
        and kept in ``failures`` as (round, node id, reason)."""
        valid, errors = self._check_and_log_replies(list(replies), is_train=is_train)
        self.failures.extend((server_round, m.metadata.src_node_id, m.error.reason) for m in errors)
        return valid

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Consensus mask, similarity-weighted personalised models and band bookkeeping (no global model)."""
        valid = self._checked(server_round, replies, True)
        if not valid:
            return None, None
        pids = []
        for msg in valid:
            pid, node = int(_metrics(msg)["partition-id"]), msg.metadata.src_node_id
            if self.node_to_pid.get(node) != pid:
                raise ValueError(
                    f"node {node} replied for partition {pid} but was sent partition {self.node_to_pid.get(node)}'s "
                    "model (a node's partition-id must not change during a run)"
                )
            pids.append(pid)
        self.server.count_down_many(server_round, {pid: self._sent[pid] for pid in pids})
        record = self.server.aggregate_train(server_round, stack_replies(valid, self.arrayrecord_key, self._read_pool))
        return None, MetricRecord(cast(dict[str, Any], record))

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        valid = self._checked(server_round, replies, False)
        if not valid:
            return None
        metrics = [_metrics(m) for m in valid]
        self.server.record_evaluate(server_round, sorted(metrics, key=lambda m: m["partition-id"]))
        return mean_metrics([m.content for m in valid], self.weighted_by_key)


class _FedAvgRecorder(FedAvg):
    """Flower's FedAvg, unchanged in what it computes, with the per-round records of :class:`EaglesServer`."""

    def __init__(self, server: EaglesServer, num_clients: int) -> None:
        super().__init__(
            min_train_nodes=num_clients,
            min_evaluate_nodes=num_clients,
            min_available_nodes=num_clients,
            train_metrics_aggr_fn=mean_metrics,
            evaluate_metrics_aggr_fn=mean_metrics,
        )
        self.server = server
        self._arrays: ArrayRecord | None = None

    def configure_train(self, server_round, arrays, config, grid):
        self._arrays = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def _log_failures(self, server_round, replies):
        self.server.failures.extend(
            (server_round, m.metadata.src_node_id, m.error.reason) for m in replies if m.has_error()
        )

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self._log_failures(server_round, replies)
        # Flower samples the nodes with the unseeded global ``random``, so replies arrive in any order: sorted by
        # partition, the weighted sums (and the run) are the same bit for bit every time
        replies = sorted(replies, key=_partition_of)
        arrays, metrics = super().aggregate_train(server_round, replies)
        assert self._arrays is not None, "configure_train runs before aggregate_train"
        sent = self._arrays.to_torch_state_dict()
        parsed = []
        for msg in (m for m in replies if not m.has_error()):  # Flower's FedAvg leaves failed clients out
            m = _metrics(msg)
            self.server.count_down(server_round, int(m["partition-id"]), sent)
            state, masks = split_arrays(_arrays(msg))
            parsed.append(ClientReply(int(m["partition-id"]), state, masks, m))
        self.server.aggregate_train(server_round, parsed)  # records and meters; its average is discarded
        return arrays, metrics

    def aggregate_evaluate(self, server_round, replies):
        replies = sorted(replies, key=_partition_of)
        self._log_failures(server_round, replies)
        self.server.record_evaluate(
            server_round,
            [_metrics(m) for m in replies if not m.has_error()],
        )
        return super().aggregate_evaluate(server_round, replies)


def _partition_of(msg: Message) -> int:
    return -1 if msg.has_error() else int(_metrics(msg)["partition-id"])


def run_server(
    grid: Grid,
    config: EaglesConfig,
    num_features: int,
    num_classes: int,
    num_clients: int,
    num_rounds: int,
    *,
    fixed_mask: Mapping[str, Tensor] | None = None,
    stop_band: float | None = None,
    strategy: str = "eagles",
) -> EaglesServer:
    """Drive ``num_rounds`` through ``strategy.start`` on ``grid``; returns the server state (history, meters)."""
    strategy = check_choice("strategy", strategy, ("eagles", "fedavg"))
    init = state_of(initial_model(num_features, num_classes, config, fixed_mask))
    if strategy == "eagles":
        strat: FedAvg = EaglesStrategy(config, init, num_clients, fixed_mask=fixed_mask, stop_band=stop_band)
        server = strat.server
    else:
        server = EaglesServer(config, init, num_clients)
        strat = _FedAvgRecorder(server, num_clients)
    strat.start(grid=grid, initial_arrays=_to_record(init), num_rounds=num_rounds)
    return server


def make_server_app(
    config: EaglesConfig,
    num_features: int,
    num_classes: int,
    num_clients: int,
    num_rounds: int,
    *,
    fixed_mask: Mapping[str, Tensor] | None = None,
    stop_band: float | None = None,
    strategy: str = "eagles",
    on_finish: Callable[[EaglesServer], None] | None = None,
) -> ServerApp:
    """A ``ServerApp`` running :func:`run_server`; ``on_finish`` receives the server state at the end."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        server = run_server(
            grid,
            config,
            num_features,
            num_classes,
            num_clients,
            num_rounds,
            fixed_mask=fixed_mask,
            stop_band=stop_band,
            strategy=strategy,
        )
        if on_finish is not None:
            on_finish(server)

    return app
