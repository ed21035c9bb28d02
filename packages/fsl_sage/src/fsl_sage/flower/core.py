"""FSL-SAGE and CSE-FSL on Flower (flwr 1.42 Message API): strategies, a ClientApp and a ServerApp.

A message-driven server can only run the *lazy* form of Alg. 3: in round t every client trains on the aux it
holds, queues its smashed activations at k % q == 0 and uploads them with its client model; the strategy replays
the uploads in partition order (server steps, FIFO buffers), averages the client models and, in the rounds
:func:`fsl_sage.align.is_alignment_round` names (t % l == 0 and t < R − 1), aligns every client's aux, which
travels with that client's round-(t + 1) message.
This equals :class:`fsl_sage.FSLSAGE` with ``mode="lazy"`` (same weights and payload bytes).

The strategies keep two ledgers: ``ledger`` (payload bytes, the paper's convention, comparable with the
in-process ledger) and ``wire`` (Σ ``len(Array.data)`` of the ArrayRecords actually sent, .npy headers, labels
and the initial models included). FedAvg on Flower is Flower's built-in ``FedAvg`` with :func:`make_client_app`
(``method="fedavg"``); SplitFed stays in process.
"""

from __future__ import annotations

import copy
import io
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import Strategy
from torch import nn

from fsl_sage.aggregate import weighted_average
from fsl_sage.align import AuxAdamState, RingBuffer, align_client, is_alignment_round
from fsl_sage.comm import ByteCounter, nbytes
from fsl_sage.config import FSLConfig
from fsl_sage.data import as_client_data, batch_key, check_client_data
from fsl_sage.models import GradScalarAux, SplitModel, as_aux
from fsl_sage.runner import evaluate, local_batches, make_optimizer, server_step
from fsl_sage.sage import run_client_round
from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "FSLSAGEStrategy",
    "CSEFSLStrategy",
    "make_client_app",
    "make_server_app",
    "ModelFn",
    "DataFn",
    "wire_bytes",
    "client_train",
    "client_query",
    "config_record",
    "config_from_record",
    "run_server",
]

logger = logging.getLogger(__name__)

ModelFn = Callable[[], tuple[nn.Module, nn.Module, nn.Module]]
"""Builds (client, server, aux) with the initial weights (seeded: identical on every side)."""
FLOWER_METHODS = ("fsl_sage", "cse_fsl", "fedavg")
"""The methods with a Flower ClientApp (FedAvg through Flower's built-in strategy)."""
DataFn = Callable[[int, int], "tuple[torch.Tensor, torch.Tensor] | torch.utils.data.Dataset[Any]"]
"""(partition_id, num_partitions) → the client's (x, y)."""


def wire_bytes(content: RecordDict) -> int:
    """Σ len(Array.data) over the ArrayRecords of a message (.npy bytes: payload plus headers)."""
    return sum(len(arr.data) for rec in content.array_records.values() for arr in rec.values())


def _sd(rec: Any) -> dict[str, torch.Tensor]:
    """The state dict in a message's ``ArrayRecord`` (a clear error for any other record type)."""
    return dict(_record(rec, ArrayRecord).to_torch_state_dict())


def _record(rec: Any, kind: type[Any]) -> Any:
    """``rec`` checked to be a ``kind`` record (messages carry a union of record types)."""
    if not isinstance(rec, kind):
        raise TypeError(f"expected a {kind.__name__} in the message, got {type(rec).__name__}")
    return rec


def _int(value: Any) -> int:
    """A record value that must be an integer (partition ids, counts, rounds)."""
    return int(value)


CONFIG_PREFIX = "fsl."
SERVER_ONLY = ("rounds", "mode", "comm_budget_bytes")
"""FSLConfig fields a client does not compare: the server's loop control."""


def config_record(config: FSLConfig) -> dict[str, Any]:
    """The run configuration as ``ConfigRecord`` entries ``fsl.<field>`` (``None`` fields left out)."""
    out: dict[str, Any] = {}
    for k, v in config.to_dict().items():
        if v is None:
            continue
        out[CONFIG_PREFIX + k] = [float(b) for b in v] if k == "betas" else v
    return out


def config_from_record(record: ConfigRecord | dict[str, Any]) -> FSLConfig | None:
    """The :class:`FSLConfig` a strategy sent in a message's ``ConfigRecord`` (``None`` if it sent none)."""
    d: dict[str, Any] = {k[len(CONFIG_PREFIX) :]: v for k, v in dict(record).items() if k.startswith(CONFIG_PREFIX)}
    if not d:
        return None
    if "betas" in d:
        d["betas"] = tuple(d["betas"])
    return FSLConfig(**d)


def check_client_config(local: FSLConfig, sent: FSLConfig, who: str) -> None:
    """Raise ``ValueError`` naming every field where the client's config differs from the server's."""
    a, b = local.to_dict(), sent.to_dict()
    diff = [f"{k} = {a[k]!r} here, {b[k]!r} on the server" for k in a if k not in SERVER_ONLY and a[k] != b[k]]
    if diff:
        raise ValueError(f"{who}: this ClientApp's FSLConfig differs from the ServerApp's: " + "; ".join(diff))


def _opt_bytes(opt: torch.optim.Optimizer) -> bytes:
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    return buf.getvalue()


def _load_opt(opt: torch.optim.Optimizer, data: Any) -> None:
    if not isinstance(data, bytes):
        raise TypeError(f"optimizer state must be bytes in the record, got {type(data).__name__}")
    opt.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


class _SplitStrategy(Strategy):
    """Shared machinery of the split-learning strategies: the S-server's model, optimizer and ledgers, and node
    handling as Flower's own strategies do it (see :class:`FSLSAGEStrategy` for the arguments)."""

    method = "base"

    def __init__(
        self,
        server: nn.Module,
        aux: nn.Module,
        config: FSLConfig,
        num_rounds: int,
        num_clients: int,
        *,
        fraction_train: float = 1.0,
        min_train_nodes: int = 1,
        min_available_nodes: int | None = None,
        accept_failures: bool = True,
        node_timeout: float = 60.0,
        extra_nodes: str = "ignore",
    ) -> None:
        self.config = config
        self.num_rounds = check_int("num_rounds", num_rounds, min=1)
        self.num_clients = check_int("num_clients", num_clients, min=1)
        self.fraction_train = check_float("fraction_train", fraction_train, min=0.0, max=1.0, min_open=True)
        self.min_train_nodes = check_int("min_train_nodes", min_train_nodes, min=1, max=self.num_clients)
        self.min_available_nodes = check_int(
            "min_available_nodes", min_available_nodes, min=1, max=self.num_clients, allow_none=True
        )
        self.accept_failures = check_bool("accept_failures", accept_failures)
        self.node_timeout = check_float("node_timeout", node_timeout, min=0.0)
        self.extra_nodes = check_choice("extra_nodes", extra_nodes, ("ignore", "error"))
        self.server = copy.deepcopy(server)
        self.server_opt = make_optimizer(self.server.parameters(), config)
        self.aux_template: GradScalarAux = as_aux(copy.deepcopy(aux))
        self.ledger = ByteCounter()
        self.wire = ByteCounter()
        self.node_to_pid: dict[int, int] = {}
        self.extra: dict[int, int] = {}  # node id -> its out-of-range partition id (never sampled)
        self.unusable: dict[int, str] = {}  # node id -> why its partition-id query failed
        self.failures: list[dict[str, Any]] = []  # {"round", "partition-id", "node", "reason"} of each lost reply
        self.cohorts: dict[int, list[int]] = {}  # round t -> the partition ids sampled
        self.server_steps = 0
        self.round = 0  # server rounds completed
        self.poll_interval = 0.2

    def summary(self) -> None:
        logger.info(
            "%s: %d clients (fraction %.2f, min train %d, min available %s, accept failures %s), %d rounds, config %s",
            type(self).__name__,
            self.num_clients,
            self.fraction_train,
            self.min_train_nodes,
            self.min_available_nodes,
            self.accept_failures,
            self.num_rounds,
            self.config,
        )

    # -- nodes: discovery (partition-id query), validation, sampling
    def _discover(self, grid: Grid, connected: list[int]) -> None:
        """Ask every new node for its ``partition-id`` (a ``query`` message); validate uniqueness and range."""
        new = [n for n in connected if n not in self.node_to_pid and n not in self.extra and n not in self.unusable]
        if not new:
            return
        msgs = [
            Message(content=RecordDict({"config": ConfigRecord({"fsl-sage": "partition-id"})}),
                    message_type=MessageType.QUERY, dst_node_id=n)
            for n in new
        ]  # fmt: skip
        replies = {r.metadata.src_node_id: r for r in grid.send_and_receive(msgs, timeout=self.node_timeout)}
        live = set(connected)
        for node in new:
            reply = replies.get(node)
            if reply is None or reply.has_error():
                why = "no reply" if reply is None else str(reply.error.reason)
                logger.warning("node %d did not report its partition-id (%s): not used", node, why)
                self.unusable[node] = why
                continue
            pid = _int(reply.content["metrics"]["partition-id"])
            if not 0 <= pid < self.num_clients:
                msg = (
                    f"node {node} reports partition-id {pid}, outside [0, {self.num_clients}) for this run of "
                    f"{self.num_clients} clients"
                )
                if self.extra_nodes == "error":
                    raise ValueError(msg)
                logger.warning("%s: extra node, not used", msg)
                self.extra[node] = pid
                continue
            for other, opid in self.node_to_pid.items():
                if opid == pid and other in live:
                    raise ValueError(
                        f"nodes {other} and {node} both report partition-id {pid}: every SuperNode needs its own "
                        f'--node-config "partition-id=i num-partitions={self.num_clients}"'
                    )
            self.node_to_pid[node] = pid

    def _eligible(self, connected: list[int]) -> dict[int, int]:
        """{partition id: node id} of the connected nodes with a valid partition (the most recent node per id)."""
        return {self.node_to_pid[n]: n for n in connected if n in self.node_to_pid}

    def _sample(self, t: int, grid: Grid) -> list[tuple[int, int]]:
        """(partition id, node id) of round t's cohort, in partition order.

        Flower's rule (``FedAvg.configure_train`` + ``sample_nodes``): sample max(⌊fraction_train · N⌋,
        min_train_nodes) nodes once max(min_available_nodes, sample size) are available — with N the run's
        ``num_clients`` (not the connected count, so an extra node changes nothing), only nodes with a valid
        partition id counted, a seeded draw (reproducible, resumable) and a timeout instead of waiting forever."""
        size = max(int(self.fraction_train * self.num_clients), self.min_train_nodes)
        need = max(self.min_available_nodes or 0, size)
        deadline = time.monotonic() + self.node_timeout
        while True:
            connected = sorted(grid.get_node_ids())
            self._discover(grid, connected)
            eligible = self._eligible(connected)
            if len(eligible) >= need:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"round {t + 1}: waited {self.node_timeout:g} s for {need} nodes with distinct partition ids "
                    f"in [0, {self.num_clients}), have {len(eligible)} (partition ids {sorted(eligible)}; "
                    f"{len(connected)} connected, extra {sorted(self.extra.values())}, "
                    f"unusable {len(self.unusable)}); start more SuperNodes or lower min_available_nodes"
                )
            logger.info("waiting for nodes: %d of %d with a valid partition-id", len(eligible), need)
            time.sleep(self.poll_interval)
        pids = sorted(eligible)
        if size < len(pids):
            pids = sorted(random.Random(self.config.seed * 1_000_003 + t).sample(pids, size))
        self.cohorts[t] = pids
        return [(pid, eligible[pid]) for pid in pids]

    def _payload(self, t: int, pid: int, arrays: ArrayRecord) -> RecordDict:
        raise NotImplementedError

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per sampled node: the averaged client model, the run config and (per node) its aux.

        The averaged model x̄_c of round t − 1 travels in round t's message and is charged to round t − 1 (the
        paper's convention: the F-server's broadcast ends the round that formed it, Alg. 2)."""
        t = server_round - 1
        msgs = []
        size = nbytes(_sd(arrays)) if t > 0 else 0
        for pid, node in self._sample(t, grid):
            content = self._payload(t, pid, arrays)
            if t > 0:
                self.ledger.down(t - 1, pid, "client", size)
            cfg = ConfigRecord(dict(config))
            cfg.update(config_record(self.config))
            cfg["server-round"] = server_round
            content["config"] = cfg
            self.wire.down(t, pid, "wire", wire_bytes(content))
            msgs.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node))
        logger.info("round %d: sampled partitions %s", server_round, self.cohorts[t])
        return msgs

    def _split_replies(self, t: int, replies: Iterable[Message]) -> list[tuple[int, Message]]:
        """The successful replies in partition order; failures (error replies, and sampled nodes that did not
        answer within the timeout) are logged and kept in ``failures`` (Flower's ``accept_failures``)."""
        out, seen = [], set()
        for msg in replies:
            node = msg.metadata.src_node_id
            pid = self.node_to_pid.get(node, -1)
            seen.add(pid)
            if msg.has_error():
                self._fail(t, pid, node, str(msg.error.reason))
                continue
            rpid = _int(msg.content["metrics"]["partition-id"])
            if rpid != pid:
                raise ValueError(f"round {t + 1}: node {node} answered as partition-id {rpid}, it said {pid} before")
            self.wire.up(t, pid, "wire", wire_bytes(msg.content))
            out.append((pid, msg))
        nodes = {p: n for n, p in self.node_to_pid.items()}
        for pid in self.cohorts.get(t, []):
            if pid not in seen:
                self._fail(t, pid, nodes.get(pid, -1), "no reply within the timeout")
        failed = [f for f in self.failures if f["round"] == t]
        reasons = "; ".join(f"partition-id {f['partition-id']} (node {f['node']}): {f['reason']}" for f in failed)
        if failed and not self.accept_failures:
            raise RuntimeError(
                f"round {t + 1}: {len(failed)} of {len(self.cohorts.get(t, []))} clients failed and "
                f"accept_failures=False: " + reasons
            )
        if failed and not out:
            # nothing would be trained this round, and a deterministic error repeats every round: stop here
            what = (
                "the ClientApp's FSLConfig does not match the ServerApp's"
                if any("differs from the ServerApp's" in f["reason"] for f in failed)
                else "every sampled client failed"
            )
            raise RuntimeError(f"round {t + 1}: no client survived ({what}): " + reasons)
        out.sort(key=lambda p: p[0])
        return out

    def _fail(self, t: int, pid: int, node: int, reason: str) -> None:
        logger.warning("round %d: partition-id %d (node %d) failed: %s", t + 1, pid, node, reason)
        self.failures.append({"round": t, "partition-id": pid, "node": node, "reason": reason})
        self._on_failure(pid)

    def _on_failure(self, pid: int) -> None:
        pass

    def _replay_uploads(self, t: int, pid: int, content: RecordDict) -> None:
        up = _record(content["smashed"], ArrayRecord)
        n_up = len([k for k in up if k.startswith("z.")])
        for j in range(n_up):
            z = torch.from_numpy(up[f"z.{j}"].numpy().copy())
            y = torch.from_numpy(up[f"y.{j}"].numpy().copy())
            self.ledger.up(
                t, pid, "smashed", z.numel() * z.element_size() + (8 * len(y) if self.config.count_labels else 0)
            )
            server_step(self.server, self.server_opt, z, y)
            self.server_steps += 1
            self._after_upload(pid, z, y)

    def _after_upload(self, pid: int, z: torch.Tensor, y: torch.Tensor) -> None:
        pass

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Replay the survivors' uploads in partition order (server steps), then average their client models
        with weights n_i / Σ n over the survivors (Alg. 2). A round in which every sampled client failed raises
        ``RuntimeError`` with each client's reason (e.g. a ClientApp/ServerApp config mismatch)."""
        t = server_round - 1
        ordered = self._split_replies(t, replies)
        steps0 = self.server_steps
        avg = None
        if ordered:
            sds, sizes = [], []
            for pid, msg in ordered:
                self._replay_uploads(t, pid, msg.content)
                sd = _sd(msg.content["client"])
                self.ledger.up(t, pid, "client", nbytes(sd))
                sds.append(sd)
                sizes.append(_int(msg.content["metrics"]["num-examples"]))
                self._on_success(pid)
            weights = [n / sum(sizes) for n in sizes]
            avg = weighted_average(sds, weights)
            self._after_round(t, ordered, weights)
            if t == self.num_rounds - 1:  # the final x̄_c, downloaded by the last round's cohort (as in process)
                for pid in self.cohorts.get(t, []):
                    self.ledger.down(t, pid, "client", nbytes(avg))
        self.round = server_round
        metrics = MetricRecord(
            {
                "server-steps": self.server_steps - steps0,
                "survivors": len(ordered),
                "failures": sum(f["round"] == t for f in self.failures),
                "payload-bytes": self.ledger.total_where(round=t),
                "wire-bytes": self.wire.total_where(round=t),
            }
        )
        return (ArrayRecord(avg) if avg is not None else None), metrics

    def _on_success(self, pid: int) -> None:
        pass

    def _after_round(self, t: int, ordered: list[tuple[int, Message]], weights: list[float]) -> None:
        pass

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No federated evaluation: the S-server evaluates x_s ∘ x̄_c centrally (see :meth:`evaluate_fn`)."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def evaluate_fn(
        self, client_template: nn.Module, data: tuple[torch.Tensor, torch.Tensor]
    ) -> Callable[[int, ArrayRecord], MetricRecord | None]:
        """A centralized ``evaluate_fn`` for ``Strategy.start``: accuracy and NLL of x_s ∘ x̄_c on ``data``."""

        def fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            client = copy.deepcopy(client_template)
            client.load_state_dict(_sd(arrays))
            acc, loss = evaluate(client, self.server, data)
            return MetricRecord({"accuracy": acc, "loss": loss})

        return fn


class FSLSAGEStrategy(_SplitStrategy):
    """FSL-SAGE's S-server (Alg. 3, lazy alignment) and F-server (Alg. 2) as a Flower strategy.

    Args:
        server: the initial server-side model x_s.
        aux: the initial aux model (every client starts from a copy, sent uncounted with its first message).
        config: :class:`FSLConfig` (``mode`` is ignored: Flower is lazy); sent to the clients in every message's
            ``ConfigRecord`` (keys ``fsl.<field>``), and a client whose own config differs refuses the round.
        num_rounds: R (no alignment after the last round).
        num_clients: N, the run's clients: partition ids 0..N − 1 (the SuperNodes' ``--node-config
            "partition-id=i num-partitions=N"``).
        fraction_train, min_train_nodes, min_available_nodes: Flower's sampling rule: each round samples
            max(⌊fraction_train · N⌋, min_train_nodes) of the nodes with a valid partition id, once
            max(min_available_nodes, that) of them are connected (seeded draw; all N at the default 1.0).
        accept_failures: True (Flower's convention): a round proceeds with the replies that arrived; the
            failed clients (error replies, or no reply within ``Strategy.start``'s ``timeout``) are logged and
            kept in ``failures``. False: a failure raises ``RuntimeError`` naming the partitions and reasons.
            Either way a round in which every sampled client failed raises ``RuntimeError`` (nothing would be
            trained, and a deterministic error such as a config mismatch would repeat every round).
        node_timeout: seconds to wait for enough nodes (``TimeoutError`` after that, saying how many are there).
        extra_nodes: a node whose partition id lies outside [0, N): ``"ignore"`` (logged, never sampled) or
            ``"error"``. Two connected nodes with the same partition id are always an error naming both.
    """

    method = "fsl_sage"

    def __init__(
        self, server: nn.Module, aux: nn.Module, config: FSLConfig, num_rounds: int, num_clients: int, **nodes: Any
    ):
        super().__init__(server, aux, config, num_rounds, num_clients, **nodes)
        if config.warm_start_rounds:
            raise ValueError(
                f"warm_start_rounds > 0 is supported in process only (FSLSAGE), got {config.warm_start_rounds}"
            )
        self.auxes = [copy.deepcopy(self.aux_template) for _ in range(num_clients)]
        self.aux_states = [AuxAdamState() for _ in range(num_clients)]
        self.buffers = [RingBuffer(config.buffer_size) for _ in range(num_clients)]
        self.pending = [False] * num_clients
        self.has_aux = [False] * num_clients  # the client holds an aux in its context.state
        self._aux_sent: set[int] = set()  # partitions sent an aligned aux in the current round
        self.align_log: list[dict[str, float]] = []

    def _payload(self, t: int, pid: int, arrays: ArrayRecord) -> RecordDict:
        content = RecordDict({"client": arrays})
        if self.pending[pid]:  # aligned at the end of an earlier round: sent (and counted) now
            content["aux"] = ArrayRecord(self.auxes[pid].state_dict())
            self.ledger.down(t, pid, "aux", nbytes(self.auxes[pid]))
            self.pending[pid] = False
            self._aux_sent.add(pid)
        elif not self.has_aux[pid]:  # the initial aux (built from the shared seed on every side: not counted)
            content["aux"] = ArrayRecord(self.auxes[pid].state_dict())
        return content

    def _on_success(self, pid: int) -> None:
        self.has_aux[pid] = True
        self._aux_sent.discard(pid)

    def _on_failure(self, pid: int) -> None:
        if pid in self._aux_sent:  # a failed ClientApp keeps no state (Flower's engines): send it again
            self.pending[pid] = True
            self._aux_sent.discard(pid)

    def _after_upload(self, pid: int, z: torch.Tensor, y: torch.Tensor) -> None:
        self.buffers[pid].push(z, y)

    def _after_round(self, t: int, ordered: list[tuple[int, Message]], weights: list[float]) -> None:
        if is_alignment_round(t, self.config, lazy=True, rounds=self.num_rounds):
            for pid in range(self.num_clients):
                if len(self.buffers[pid]) == 0:  # never uploaded (not sampled yet, or failed every time)
                    continue
                self.align_log.append(
                    align_client(
                        self.auxes[pid], self.aux_states[pid], self.buffers[pid], self.server, self.config, pid, t
                    )
                )
                self.pending[pid] = True


class CSEFSLStrategy(_SplitStrategy):
    """CSE-FSL as a Flower strategy: server steps on the uploads; client and aux models averaged every round.
    Node handling and arguments as :class:`FSLSAGEStrategy`."""

    method = "cse_fsl"

    def __init__(
        self, server: nn.Module, aux: nn.Module, config: FSLConfig, num_rounds: int, num_clients: int, **nodes: Any
    ):
        super().__init__(server, aux, config, num_rounds, num_clients, **nodes)
        self.aux_global = copy.deepcopy(self.aux_template)

    def _payload(self, t: int, pid: int, arrays: ArrayRecord) -> RecordDict:
        if t > 0:  # x̄_a of round t − 1, charged to that round like x̄_c
            self.ledger.down(t - 1, pid, "aux", nbytes(self.aux_global))
        return RecordDict({"client": arrays, "aux": ArrayRecord(self.aux_global.state_dict())})

    def _after_round(self, t: int, ordered: list[tuple[int, Message]], weights: list[float]) -> None:
        sds = [_sd(msg.content["aux"]) for _, msg in ordered]
        for pid, sd in zip((p for p, _ in ordered), sds):
            self.ledger.up(t, pid, "aux", nbytes(sd))
        avg = weighted_average(sds, weights)
        self.aux_global.load_state_dict(avg)
        if t == self.num_rounds - 1:
            for pid in self.cohorts.get(t, []):
                self.ledger.down(t, pid, "aux", nbytes(avg))


# ---------------------------------------------------------------------------------------------------------------
# apps


def _node_who(context: Context) -> str:
    return f"partition-id {context.node_config.get('partition-id')} (node {context.node_id})"


def client_query(msg: Message, context: Context) -> Message:
    """Handle the strategies' ``query``: report this node's ``partition-id`` and ``num-partitions``."""
    nc = context.node_config
    if "partition-id" not in nc:
        raise ValueError(
            f'node {context.node_id} has no partition-id: start it with --node-config "partition-id=i num-partitions=N"'
        )
    metrics: dict[str, Any] = {
        "partition-id": _int(nc["partition-id"]),
        "num-partitions": _int(nc.get("num-partitions", 0)),
    }
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def client_train(
    msg: Message,
    context: Context,
    model_fn: ModelFn,
    data_fn: DataFn,
    cfg: FSLConfig | None,
    method: str = "fsl_sage",
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device: str | torch.device | None = None,
) -> Message:
    """Handle one ``train`` message on a SuperNode: one local round of ``method`` (see :func:`make_client_app`).

    The run configuration comes from the message (``fsl.<field>`` entries sent by the strategy); a client
    given its own ``cfg`` checks it against the server's and raises naming the fields that differ."""
    who = _node_who(context)
    pid = int(context.node_config["partition-id"])
    n_parts = int(context.node_config["num-partitions"])
    sent = config_from_record(_record(msg.content["config"], ConfigRecord))
    if sent is not None and cfg is not None:
        check_client_config(cfg, sent, who)
    cfg = sent if sent is not None else cfg
    if cfg is None:
        raise ValueError(f"{who}: the server sent no fsl.* configuration and this ClientApp has none")
    data = as_client_data(data_fn(pid, n_parts), transform, f"{who}: data_fn")
    t = _int(msg.content["config"]["server-round"]) - 1
    client, server, aux = model_fn()
    aux = as_aux(aux)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    metrics = MetricRecord({"num-examples": len(data), "partition-id": pid})
    if method == "fedavg":
        model = SplitModel(client, server).to(dev)
        _load_into(model, _sd(msg.content["arrays"]), who, "model")
        opt = make_optimizer(model.parameters(), cfg)
        if "opt" in context.state:
            _load_opt(opt, context.state["opt"]["state"])
        model.train()
        for k, e, idx in local_batches(len(data), cfg, pid, t):
            xb, yb = data.batch(idx, batch_key(cfg.seed, pid, t, e, k), dev)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.nll_loss(model(xb), yb).backward()
            opt.step()
        context.state["opt"] = ConfigRecord({"state": _opt_bytes(opt)})
        out = ArrayRecord({k: v.cpu() for k, v in model.state_dict().items()})
        return Message(RecordDict({"arrays": out, "metrics": metrics}), reply_to=msg)
    client.to(dev)
    aux.to(dev)
    _load_into(client, _sd(msg.content["client"]), who, "client model (is the cut the same?)")
    if "aux" in msg.content:
        _load_into(aux, _sd(msg.content["aux"]), who, "aux model")
    elif "aux" in context.state:
        aux.load_state_dict(_sd(context.state["aux"]))
    else:
        raise ValueError(f"{who}: no aux model in the message or in context.state")
    check_client_data(data, client, server, aux, who)
    params = list(client.parameters()) + (list(aux.parameters()) if method == "cse_fsl" else [])
    opt = make_optimizer(params, cfg)
    if "opt" in context.state:
        _load_opt(opt, context.state["opt"]["state"])
    uploads: list[tuple[torch.Tensor, torch.Tensor]] = []
    run_client_round(method, client, opt, aux, data, cfg, pid, t, lambda k, z, yb: uploads.append((z, yb)), device=dev)
    up: dict[str, torch.Tensor] = {}
    for j, (z, yb) in enumerate(uploads):
        up[f"z.{j}"], up[f"y.{j}"] = z.cpu().contiguous(), yb.cpu().contiguous()
    content = RecordDict({"client": ArrayRecord(_cpu_sd(client)), "smashed": ArrayRecord(up), "metrics": metrics})
    if method == "cse_fsl":
        content["aux"] = ArrayRecord(_cpu_sd(aux))
    # the node's state changes only once the round succeeded (Flower keeps no state of a failed ClientApp)
    context.state["opt"] = ConfigRecord({"state": _opt_bytes(opt)})
    context.state["aux"] = ArrayRecord(_cpu_sd(aux))
    return Message(content, reply_to=msg)


def _cpu_sd(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in m.state_dict().items()}


def _load_into(m: nn.Module, sd: dict[str, torch.Tensor], who: str, what: str) -> None:
    try:
        m.load_state_dict(sd)
    except RuntimeError as e:
        raise ValueError(f"{who}: the server's {what} does not fit this ClientApp's model_fn: {e}") from e


def make_client_app(
    model_fn: ModelFn,
    data_fn: DataFn,
    config: FSLConfig | None = None,
    method: str = "fsl_sage",
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device: str | torch.device | None = None,
) -> ClientApp:
    """A ``ClientApp`` running one client of ``method`` (``fsl_sage``, ``cse_fsl`` or ``fedavg``).

    ``data_fn(partition_id, num_partitions)`` returns the node's data: a pair of tensors (x, y) or any map-style
    ``torch.utils.data.Dataset`` of (input, label) pairs; ``transform`` (e.g. a random crop and flip) is applied
    to each training input, seeded per batch (see :class:`fsl_sage.data.ClientData`). The node's partition comes
    from ``context.node_config["partition-id"]``; its aux model (FSL-SAGE) and optimizer state persist across
    rounds in ``context.state``. The run configuration travels in every message; ``config`` (optional) is this
    client's own, checked against it. The app also answers the strategies' ``query`` for the partition id.
    """
    check_choice("method", method, FLOWER_METHODS)
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return client_train(msg, context, model_fn, data_fn, config, method, transform, device)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return client_query(msg, context)

    return app


def run_server(
    grid: Grid,
    model_fn: ModelFn,
    config: FSLConfig,
    num_rounds: int,
    num_clients: int,
    method: str = "fsl_sage",
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    on_finish: Callable[[Strategy, Any], None] | None = None,
    *,
    timeout: float = 3600.0,
    **nodes: Any,
) -> tuple[Strategy, Any]:
    """The body of the ServerApp: build the strategy for ``method`` and run it; returns (strategy, Result).

    ``timeout``: seconds to wait for a round's replies (``Strategy.start``; a node that does not answer in time
    counts as failed). ``nodes``: the node-handling arguments of :class:`FSLSAGEStrategy` (``fraction_train``,
    ``min_train_nodes``, ``min_available_nodes``, ``accept_failures``, ``node_timeout``, ``extra_nodes``)."""
    client, server, aux = model_fn()
    strategy: Strategy
    if method == "fedavg":
        strategy = FlowerFedAvg(fraction_evaluate=0.0, min_train_nodes=num_clients, min_available_nodes=num_clients)
        initial = ArrayRecord(SplitModel(client, server).state_dict())
        evaluate_fn: Any = None
        if eval_data is not None:
            template = SplitModel(client, server)
            data = eval_data

            def evaluate_split(server_round: int, arrays: ArrayRecord) -> MetricRecord:
                m = copy.deepcopy(template)
                m.load_state_dict(_sd(arrays))
                acc, loss = evaluate(m.client, m.server, data)
                return MetricRecord({"accuracy": acc, "loss": loss})

            evaluate_fn = evaluate_split
    else:
        cls = FSLSAGEStrategy if method == "fsl_sage" else CSEFSLStrategy
        strategy = cls(server, aux, config, num_rounds, num_clients, **nodes)
        initial = ArrayRecord(client.state_dict())
        evaluate_fn = strategy.evaluate_fn(client, eval_data) if eval_data is not None else None
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=num_rounds,
        timeout=timeout,
        train_config=ConfigRecord(config_record(config)),  # the split strategies add it themselves; FedAvg copies
        evaluate_fn=evaluate_fn,
    )
    if on_finish is not None:
        on_finish(strategy, result)
    return strategy, result


def make_server_app(
    model_fn: ModelFn,
    config: FSLConfig,
    num_rounds: int,
    num_clients: int,
    method: str = "fsl_sage",
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    on_finish: Callable[[Strategy, Any], None] | None = None,
    **nodes: Any,
) -> ServerApp:
    """A ``ServerApp`` running ``num_rounds`` of ``method`` (``fsl_sage``, ``cse_fsl`` or ``fedavg`` = Flower's
    built-in FedAvg) over ``num_clients`` SuperNodes. ``on_finish(strategy, result)`` receives the strategy (its
    server model, aux models and ledgers) and Flower's ``Result`` when the run ends; ``nodes`` and ``timeout``
    as :func:`run_server`."""
    check_choice("method", method, FLOWER_METHODS)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_server(grid, model_fn, config, num_rounds, num_clients, method, eval_data, on_finish, **nodes)

    return app


def payload_bytes_per_round(ledger: ByteCounter, rounds: int) -> list[int]:
    """Total payload bytes of each round."""
    per = ledger.by_round()
    return [per.get(t, 0) for t in range(rounds)]
