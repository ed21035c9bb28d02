"""Flower apps configured entirely from ``context.run_config``: what ``flwr run`` submits to a SuperLink (the
Deployment Engine) or to the Simulation Engine. ``examples/flwr_app/pyproject.toml`` names them as the app's
components (``eagles.app:serverapp``, ``eagles.app:clientapp``) and lists every key with its default.

Run-config keys (TOML scalars; lists as comma-separated strings):

- ``num-rounds`` (int), ``strategy`` (``"eagles"`` or ``"fedavg"``);
- data: ``dataset`` (``"synthetic"`` or a Planetoid name such as ``"Cora"``, read through the bundled data),
  ``num-nodes``, ``num-features``, ``num-classes``, ``graph-seed`` (the synthetic graph), ``split``
  (``"louvain"``, ``"random"``, ``"metis"``), ``num-clients``, ``split-seed``;
- ``eagles.<field>``: any :class:`~eagles.config.EaglesConfig` field, dashes for underscores
  (``eagles.hidden-channels = 64``, ``eagles.keep-ratios = "0.95,0.9"``);
- ``result-file``: where the ServerApp saves ``{"history", "personal"}`` with ``torch.save`` (empty: nowhere).

Every process (ServerApp, each ClientApp) builds the same client graphs from these keys: this is a simulated
federation on one machine. The ServerApp uses them only for the number of features and classes; each ClientApp
trains the partition ``context.node_config["partition-id"]``. Results equal :func:`eagles.sim.run_inprocess` on
the same graphs and configuration (tested, in process and on a SuperLink with two SuperNodes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from torch_geometric.data import Data

import eagles._pyg  # noqa: F401  (before torch_geometric)
from eagles.config import EaglesConfig
from eagles.partition import make_clients
from icml25_shared.validate import check_choice, check_int

__all__ = [
    "RUN_CONFIG_DEFAULTS",
    "clientapp",
    "clients_from_run_config",
    "config_from_run_config",
    "serverapp",
    "synthetic_graph",
]

log = logging.getLogger(__name__)

RUN_CONFIG_DEFAULTS: dict[str, Any] = {
    "num-rounds": 3,
    "strategy": "eagles",
    "dataset": "synthetic",
    "num-nodes": 120,
    "num-features": 16,
    "num-classes": 3,
    "graph-seed": 0,
    "split": "random",
    "num-clients": 2,
    "split-seed": 0,
    "result-file": "",
}
"""The keys read besides ``eagles.*``, with the values used when a key is absent."""

_LIST_FIELDS = ("keep_ratios", "bands")


def _get(run_config: Mapping[str, Any], key: str) -> Any:
    return run_config.get(key, RUN_CONFIG_DEFAULTS[key])


def config_from_run_config(run_config: Mapping[str, Any]) -> EaglesConfig:
    """The :class:`EaglesConfig` of the ``eagles.*`` keys (other fields keep their defaults)."""
    kw: dict[str, Any] = {}
    for key, value in run_config.items():
        if not key.startswith("eagles."):
            continue
        name = key[len("eagles.") :].replace("-", "_")
        if name in _LIST_FIELDS and isinstance(value, str):
            value = [float(v) for v in value.split(",") if v.strip()]
        kw[name] = value
    return EaglesConfig.from_dict(kw)


def synthetic_graph(num_nodes: int, num_features: int, num_classes: int, seed: int = 0) -> Data:
    """A seeded homophilous random graph: class-dependent Gaussian features, symmetric edges mostly within a
    class (p = 0.1 within, 0.01 across), no self-loops."""
    n = check_int("num_nodes", num_nodes, min=2)
    f = check_int("num_features", num_features, min=1)
    k = check_int("num_classes", num_classes, min=2)
    g = torch.Generator().manual_seed(check_int("seed", seed, min=0))
    y = torch.randint(0, k, (n,), generator=g)
    centers = torch.randn(k, f, generator=g)
    x = centers[y] + torch.randn(n, f, generator=g)
    p = torch.where(y[:, None] == y[None, :], 0.1, 0.01)
    adj = torch.rand(n, n, generator=g) < p
    adj = torch.triu(adj, diagonal=1)
    adj = adj | adj.t()
    return Data(x=x, edge_index=adj.nonzero().t().contiguous(), y=y)


def clients_from_run_config(run_config: Mapping[str, Any], *, download: bool = False) -> list[Data]:
    """The client graphs the run config describes (the same in every process)."""
    dataset = str(_get(run_config, "dataset"))
    if dataset == "synthetic":
        data = synthetic_graph(
            _get(run_config, "num-nodes"),
            _get(run_config, "num-features"),
            _get(run_config, "num-classes"),
            _get(run_config, "graph-seed"),
        )
    else:
        from eagles.experiments import load_planetoid

        data = load_planetoid(check_choice("dataset", dataset, ("synthetic", "Cora", "CiteSeer")), download=download)
    return make_clients(
        data, _get(run_config, "num-clients"), _get(run_config, "split"), _get(run_config, "split-seed")
    )


serverapp = ServerApp()


@serverapp.main()
def _server_main(grid: Grid, context: Context) -> None:
    from eagles.client import graph_dims
    from eagles.flower import run_server

    rc = context.run_config
    config = config_from_run_config(rc)
    f, k = graph_dims(clients_from_run_config(rc))
    server = run_server(
        grid,
        config,
        f,
        k,
        check_int("num-clients", _get(rc, "num-clients"), min=1),
        check_int("num-rounds", _get(rc, "num-rounds"), min=1),
        strategy=str(_get(rc, "strategy")),
    )
    out = str(_get(rc, "result-file"))
    if out:
        torch.save({"history": server.history, "personal": server.personal}, Path(out))
        log.info("EAGLES: %d rounds, results in %s", len(server.history), out)


_client_apps: dict[tuple, ClientApp] = {}


def _client_app(run_config: Mapping[str, Any]) -> ClientApp:
    """The :func:`eagles.flower.make_client_app` of this run config, built once per process."""
    from eagles.flower import make_client_app

    key = tuple(sorted((k, v) for k, v in run_config.items() if k != "result-file"))
    if key not in _client_apps:
        _client_apps[key] = make_client_app(clients_from_run_config(run_config), config_from_run_config(run_config))
    return _client_apps[key]


clientapp = ClientApp()


@clientapp.train()
def _train(msg: Message, context: Context) -> Message:
    return _client_app(context.run_config)(msg, context)


@clientapp.evaluate()
def _evaluate(msg: Message, context: Context) -> Message:
    return _client_app(context.run_config)(msg, context)


@clientapp.query()
def _query(msg: Message, context: Context) -> Message:
    return _client_app(context.run_config)(msg, context)
