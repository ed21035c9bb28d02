"""Federated runs on one machine.

- :func:`run_federated`: the plain in-process loop over :mod:`eagles.client` and :class:`eagles.server.EaglesServer`
  (no Flower), the reference.
- :func:`run_inprocess`: the Flower apps (:mod:`eagles.flower`) on a loopback ``Grid`` in this process, no Ray:
  real ``Message``/``Context`` objects, per-node ``context.state``, random node ids, replies in shuffled order.
  Equal to :func:`run_federated` bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor
from torch_geometric.data import Data

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.client import (
    ClientGraph,
    evaluate,
    graph_dims,
    initial_model,
    load_state,
    local_train,
    make_optimizer,
    prepare_client,
    state_of,
)
from eagles.config import EaglesConfig
from eagles.flower import LocalGrid, make_client_app, run_server
from eagles.server import ClientReply, EaglesServer
from icml25_shared.validate import check_choice, check_int

__all__ = ["FederatedRun", "graph_dims", "initial_model", "run_federated", "run_inprocess"]


@dataclass
class FederatedRun:
    """A finished run: the server (history, personalised states, bands, meters) and the rounds run."""

    server: EaglesServer
    rounds: int

    @property
    def history(self) -> list[dict[str, float]]:
        return self.server.history

    @property
    def failures(self) -> list[tuple[int, int, str | None]]:
        """(round, node id, reason) of each failed client reply (Flower engines; the plain loop has none)."""
        return self.server.failures

    def best(self, key: str = "eval-test-acc", select: str = "eval-val-acc") -> tuple[int, float]:
        """(round, value of ``key``) at the round of best ``select`` (first such round)."""
        h = [r for r in self.history if select in r]
        best = max(h, key=lambda r: (r[select], -r["round"]))
        return int(best["round"]), float(best[key])


def run_federated(
    clients: Sequence[Data | ClientGraph],
    config: EaglesConfig,
    num_rounds: int,
    *,
    fixed_mask: Mapping[str, Tensor] | None = None,
    stop_band: float | None = None,
    evaluate_rounds: bool = True,
) -> FederatedRun:
    """EAGLES (or FedAvg, ``config.aggregation="fedavg"``) for ``num_rounds`` rounds, in process.

    Args:
        clients: one graph per client (``eagles.partition``), with train/val/test masks.
        config: method configuration (model sizes, sparsifiers, server rule).
        num_rounds: at most this many rounds.
        fixed_mask: re-train with this consensus mask fixed in every masked layer (thresholds frozen).
        stop_band: pre-train until this density band's mask is stored.
        evaluate_rounds: evaluate each client's personalised model after aggregation (``eval-*-acc``).
    """
    num_rounds = check_int("num_rounds", num_rounds, min=1)
    graphs = [prepare_client(c) for c in clients]
    f, k = graph_dims(graphs)
    models = [initial_model(f, k, config, fixed_mask) for _ in graphs]
    opts = [make_optimizer(m, config) for m in models]
    server = EaglesServer(config, state_of(models[0]), len(graphs), fixed_mask=fixed_mask, stop_band=stop_band)
    r = 0
    for r in range(1, num_rounds + 1):
        replies = []
        for pid, (g, model, opt) in enumerate(zip(graphs, models, opts, strict=True)):
            sent = server.state_for(pid)
            server.count_down(r, pid, sent)
            load_state(model, sent)
            metrics = local_train(model, opt, g, config, pid, r)
            replies.append(ClientReply(pid, state_of(model), model.masks(), metrics))
        server.aggregate_train(r, replies)
        if evaluate_rounds:
            evals = []
            for pid, (g, model) in enumerate(zip(graphs, models, strict=True)):
                load_state(model, server.state_for(pid))
                evals.append(evaluate(model, g))
            server.record_evaluate(r, evals)
        if server.stopped:
            break
    return FederatedRun(server, r)


def run_inprocess(
    clients: Sequence[Data | ClientGraph],
    config: EaglesConfig,
    num_rounds: int,
    *,
    fixed_mask: Mapping[str, Tensor] | None = None,
    stop_band: float | None = None,
    strategy: str = "eagles",
    seed: int = 0,
) -> FederatedRun:
    """The same run through the Flower apps on a loopback grid (:class:`eagles.flower.LocalGrid`).

    ``strategy="eagles"`` drives :class:`eagles.flower.EaglesStrategy`; ``"fedavg"`` drives Flower's own
    ``FedAvg`` (size-weighted) over the same ClientApp, with the server's records rebuilt from its replies.
    """
    strategy = check_choice("strategy", strategy, ("eagles", "fedavg"))
    num_rounds = check_int("num_rounds", num_rounds, min=1)
    graphs = [prepare_client(c) for c in clients]
    grid = LocalGrid(make_client_app(graphs, config, fixed_mask=fixed_mask), len(graphs), seed=seed)
    f, k = graph_dims(graphs)
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(max(level, logging.WARNING))  # Flower logs every round at INFO
    try:
        server = run_server(
            grid, config, f, k, len(graphs), num_rounds, fixed_mask=fixed_mask, stop_band=stop_band, strategy=strategy
        )
    finally:
        flwr_log.setLevel(level)
    return FederatedRun(server, len(server.history))
