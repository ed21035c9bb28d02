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
from fsl_sage.models import GradScalarAux, SplitModel, as_aux
from fsl_sage.runner import evaluate, local_batches, make_optimizer, server_step
from fsl_sage.sage import run_client_round
from icml25_shared.validate import check_choice, check_int

__all__ = [
    "FSLSAGEStrategy",
    "CSEFSLStrategy",
    "make_client_app",
    "make_server_app",
    "ModelFn",
    "DataFn",
    "wire_bytes",
    "client_train",
    "run_server",
]

logger = logging.getLogger(__name__)

ModelFn = Callable[[], tuple[nn.Module, nn.Module, nn.Module]]
"""Builds (client, server, aux) with the initial weights (seeded: identical on every side)."""
FLOWER_METHODS = ("fsl_sage", "cse_fsl", "fedavg")
"""The methods with a Flower ClientApp (FedAvg through Flower's built-in strategy)."""
DataFn = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]
"""(partition_id, num_partitions) → the client's (x, y)."""


def wire_bytes(content: RecordDict) -> int:
    """Σ len(Array.data) over the ArrayRecords of a message (.npy bytes: payload plus headers)."""
    return sum(len(arr.data) for rec in content.array_records.values() for arr in rec.values())


def _sd(rec: ArrayRecord) -> dict[str, torch.Tensor]:
    return dict(rec.to_torch_state_dict())


def _opt_bytes(opt: torch.optim.Optimizer) -> bytes:
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    return buf.getvalue()


def _load_opt(opt: torch.optim.Optimizer, data: bytes) -> None:
    opt.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


class _SplitStrategy(Strategy):
    """Shared machinery of the split-learning strategies: the S-server's model, optimizer and ledgers."""

    method = "base"

    def __init__(
        self,
        server: nn.Module,
        aux: nn.Module,
        config: FSLConfig,
        num_rounds: int,
        num_clients: int,
    ) -> None:
        self.config = config
        self.num_rounds = check_int("num_rounds", num_rounds, min=1)
        self.num_clients = check_int("num_clients", num_clients, min=1)
        self.server = copy.deepcopy(server)
        self.server_opt = make_optimizer(self.server.parameters(), config)
        self.aux_template: GradScalarAux = as_aux(copy.deepcopy(aux))
        self.ledger = ByteCounter()
        self.wire = ByteCounter()
        self.node_to_pid: dict[int, int] = {}
        self.server_steps = 0

    def summary(self) -> None:
        logger.info(
            "%s: %d clients, %d rounds, config %s", type(self).__name__, self.num_clients, self.num_rounds, self.config
        )

    def _node_ids(self, grid: Grid) -> list[int]:
        import time

        while len(ids := list(grid.get_node_ids())) < self.num_clients:
            time.sleep(0.2)
        return sorted(ids)

    def _payload(self, t: int, pid: int | None, arrays: ArrayRecord) -> RecordDict:
        raise NotImplementedError

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per node: the averaged client model, the run config and (per node) its aux."""
        t = server_round - 1
        msgs = []
        for node in self._node_ids(grid):
            pid = self.node_to_pid.get(node)
            if t > 0 and pid is None:
                raise RuntimeError(f"node {node} did not take part in round 1; its partition is unknown")
            content = self._payload(t, pid, arrays)
            cfg = ConfigRecord(dict(config))
            cfg["server-round"] = server_round
            content["config"] = cfg
            self.wire.down(t, -1 if pid is None else pid, "wire", wire_bytes(content))
            msgs.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node))
        return msgs

    def _sorted_replies(self, t: int, replies: Iterable[Message]) -> list[tuple[int, Message]]:
        out = []
        for msg in replies:
            if msg.has_error():
                raise RuntimeError(f"node {msg.metadata.src_node_id} failed in round {t + 1}: {msg.error.reason}")
            pid = int(msg.content["metrics"]["partition-id"])
            self.node_to_pid[msg.metadata.src_node_id] = pid
            self.wire.up(t, pid, "wire", wire_bytes(msg.content))
            out.append((pid, msg))
        out.sort(key=lambda p: p[0])
        if len(out) != self.num_clients:
            raise RuntimeError(f"round {t + 1}: expected {self.num_clients} replies, got {len(out)}")
        return out

    def _replay_uploads(self, t: int, pid: int, content: RecordDict) -> None:
        up = content["smashed"]
        n_up = len([k for k in up if k.startswith("z.")])
        for j in range(n_up):
            z = torch.from_numpy(up[f"z.{j}"].numpy().copy())
            y = torch.from_numpy(up[f"y.{j}"].numpy().copy())
            self.ledger.up(t, pid, "smashed", z.numel() * 4 + (8 * len(y) if self.config.count_labels else 0))
            server_step(self.server, self.server_opt, z, y)
            self.server_steps += 1
            self._after_upload(pid, z, y)

    def _after_upload(self, pid: int, z: torch.Tensor, y: torch.Tensor) -> None:
        pass

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Replay uploads in partition order (server steps), then average the client models."""
        t = server_round - 1
        ordered = self._sorted_replies(t, replies)
        steps0 = self.server_steps
        sds, sizes = [], []
        for pid, msg in ordered:
            self._replay_uploads(t, pid, msg.content)
            sd = _sd(msg.content["client"])
            self.ledger.up(t, pid, "client", nbytes(sd))
            sds.append(sd)
            sizes.append(int(msg.content["metrics"]["num-examples"]))
        weights = [n / sum(sizes) for n in sizes]
        avg = weighted_average(sds, weights)
        for pid, _ in ordered:
            self.ledger.down(t, pid, "client", nbytes(avg))
        self._after_round(t, ordered, weights)
        metrics = MetricRecord(
            {
                "server-steps": self.server_steps - steps0,
                "payload-bytes": self.ledger.total_where(round=t),
                "wire-bytes": self.wire.total_where(round=t),
            }
        )
        return ArrayRecord(avg), metrics

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
        aux: the initial aux model (every client starts from a copy; sent once, uncounted, in round 1).
        config: :class:`FSLConfig` (``mode`` is ignored: Flower is lazy).
        num_rounds: R (no alignment after the last round).
        num_clients: number of SuperNodes expected.
    """

    method = "fsl_sage"

    def __init__(self, server: nn.Module, aux: nn.Module, config: FSLConfig, num_rounds: int, num_clients: int):
        super().__init__(server, aux, config, num_rounds, num_clients)
        if config.warm_start_rounds:
            raise ValueError(
                f"warm_start_rounds > 0 is supported in process only (FSLSAGE), got {config.warm_start_rounds}"
            )
        self.auxes = [copy.deepcopy(self.aux_template) for _ in range(num_clients)]
        self.aux_states = [AuxAdamState() for _ in range(num_clients)]
        self.buffers = [RingBuffer(config.buffer_size) for _ in range(num_clients)]
        self.pending = [False] * num_clients
        self.align_log: list[dict[str, float]] = []

    def _payload(self, t: int, pid: int | None, arrays: ArrayRecord) -> RecordDict:
        content = RecordDict({"client": arrays})
        if t == 0:  # the initial aux (built from the shared seed on every side: not counted)
            content["aux"] = ArrayRecord(self.aux_template.state_dict())
        elif pid is not None and self.pending[pid]:
            content["aux"] = ArrayRecord(self.auxes[pid].state_dict())
            self.ledger.down(t, pid, "aux", nbytes(self.auxes[pid]))
            self.pending[pid] = False
        return content

    def _after_upload(self, pid: int, z: torch.Tensor, y: torch.Tensor) -> None:
        self.buffers[pid].push(z, y)

    def _after_round(self, t: int, ordered: list[tuple[int, Message]], weights: list[float]) -> None:
        if is_alignment_round(t, self.config, lazy=True, rounds=self.num_rounds):
            for pid in range(self.num_clients):
                self.align_log.append(
                    align_client(
                        self.auxes[pid], self.aux_states[pid], self.buffers[pid], self.server, self.config, pid, t
                    )
                )
                self.pending[pid] = True


class CSEFSLStrategy(_SplitStrategy):
    """CSE-FSL as a Flower strategy: server steps on the uploads; client and aux models averaged every round."""

    method = "cse_fsl"

    def __init__(self, server: nn.Module, aux: nn.Module, config: FSLConfig, num_rounds: int, num_clients: int):
        super().__init__(server, aux, config, num_rounds, num_clients)
        self.aux_global = copy.deepcopy(self.aux_template)

    def _payload(self, t: int, pid: int | None, arrays: ArrayRecord) -> RecordDict:
        return RecordDict({"client": arrays, "aux": ArrayRecord(self.aux_global.state_dict())})

    def _after_round(self, t: int, ordered: list[tuple[int, Message]], weights: list[float]) -> None:
        sds = [_sd(msg.content["aux"]) for _, msg in ordered]
        for pid, sd in zip((p for p, _ in ordered), sds):
            self.ledger.up(t, pid, "aux", nbytes(sd))
        avg = weighted_average(sds, weights)
        self.aux_global.load_state_dict(avg)
        for pid, _ in ordered:
            self.ledger.down(t, pid, "aux", nbytes(avg))


# ---------------------------------------------------------------------------------------------------------------
# apps


def client_train(
    msg: Message, context: Context, model_fn: ModelFn, data_fn: DataFn, cfg: FSLConfig, method: str = "fsl_sage"
) -> Message:
    """Handle one ``train`` message on a SuperNode: one local round of ``method`` (see :func:`make_client_app`)."""
    pid = int(context.node_config["partition-id"])
    n_parts = int(context.node_config["num-partitions"])
    x, y = data_fn(pid, n_parts)
    t = int(msg.content["config"]["server-round"]) - 1
    client, server, aux = model_fn()
    aux = as_aux(aux)
    metrics = MetricRecord({"num-examples": len(y), "partition-id": pid})
    if method == "fedavg":
        model = SplitModel(client, server)
        model.load_state_dict(_sd(msg.content["arrays"]))
        opt = make_optimizer(model.parameters(), cfg)
        if "opt" in context.state:
            _load_opt(opt, context.state["opt"]["state"])
        model.train()
        for _, _, idx in local_batches(len(y), cfg, pid, t):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.nll_loss(model(x[idx]), y[idx]).backward()
            opt.step()
        context.state["opt"] = ConfigRecord({"state": _opt_bytes(opt)})
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)
    client.load_state_dict(_sd(msg.content["client"]))
    if "aux" in msg.content:
        aux.load_state_dict(_sd(msg.content["aux"]))
    elif "aux" in context.state:
        aux.load_state_dict(_sd(context.state["aux"]))
    params = list(client.parameters()) + (list(aux.parameters()) if method == "cse_fsl" else [])
    opt = make_optimizer(params, cfg)
    if "opt" in context.state:
        _load_opt(opt, context.state["opt"]["state"])
    uploads: list[tuple[torch.Tensor, torch.Tensor]] = []
    run_client_round(method, client, opt, aux, (x, y), cfg, pid, t, lambda k, z, yb: uploads.append((z, yb)))
    context.state["opt"] = ConfigRecord({"state": _opt_bytes(opt)})
    context.state["aux"] = ArrayRecord(aux.state_dict())
    up: dict[str, torch.Tensor] = {}
    for j, (z, yb) in enumerate(uploads):
        up[f"z.{j}"], up[f"y.{j}"] = z.contiguous(), yb.contiguous()
    smashed = ArrayRecord(up)
    content = RecordDict({"client": ArrayRecord(client.state_dict()), "smashed": smashed, "metrics": metrics})
    if method == "cse_fsl":
        content["aux"] = ArrayRecord(aux.state_dict())
    return Message(content, reply_to=msg)


def make_client_app(
    model_fn: ModelFn,
    data_fn: DataFn,
    config: FSLConfig | None = None,
    method: str = "fsl_sage",
) -> ClientApp:
    """A ``ClientApp`` running one client of ``method`` (``fsl_sage``, ``cse_fsl`` or ``fedavg``).

    The node's partition comes from ``context.node_config["partition-id"]``; its aux model (FSL-SAGE) and its
    optimizer state persist across rounds in ``context.state``. ``config=None`` reads ``context.run_config``.
    """
    check_choice("method", method, FLOWER_METHODS)
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg = config if config is not None else FSLConfig.from_dict(dict(context.run_config))
        return client_train(msg, context, model_fn, data_fn, cfg, method)

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
) -> tuple[Strategy, Any]:
    """The body of the ServerApp: build the strategy for ``method`` and run it; returns (strategy, Result)."""
    client, server, aux = model_fn()
    strategy: Strategy
    if method == "fedavg":
        strategy = FlowerFedAvg(fraction_evaluate=0.0, min_train_nodes=num_clients, min_available_nodes=num_clients)
        initial = ArrayRecord(SplitModel(client, server).state_dict())
        evaluate_fn = None
        if eval_data is not None:
            template = SplitModel(client, server)

            def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
                m = copy.deepcopy(template)
                m.load_state_dict(_sd(arrays))
                acc, loss = evaluate(m.client, m.server, eval_data)
                return MetricRecord({"accuracy": acc, "loss": loss})
    else:
        cls = FSLSAGEStrategy if method == "fsl_sage" else CSEFSLStrategy
        strategy = cls(server, aux, config, num_rounds, num_clients)
        initial = ArrayRecord(client.state_dict())
        evaluate_fn = strategy.evaluate_fn(client, eval_data) if eval_data is not None else None
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=num_rounds, evaluate_fn=evaluate_fn)
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
) -> ServerApp:
    """A ``ServerApp`` running ``num_rounds`` of ``method`` (``fsl_sage``, ``cse_fsl`` or ``fedavg`` = Flower's
    built-in FedAvg) over ``num_clients`` SuperNodes. ``on_finish(strategy, result)`` receives the strategy (its
    server model, aux models and ledgers) and Flower's ``Result`` when the run ends."""
    check_choice("method", method, FLOWER_METHODS)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_server(grid, model_fn, config, num_rounds, num_clients, method, eval_data, on_finish)

    return app


def payload_bytes_per_round(ledger: ByteCounter, rounds: int) -> list[int]:
    """Total payload bytes of each round."""
    per = ledger.by_round()
    return [per.get(t, 0) for t in range(rounds)]
