"""Flower apps for ``flwr run`` (simulation or deployment engine), configured from ``context.run_config``.

``pyproject.toml`` of a Flower app project using them::

    [tool.flwr.app.components]
    serverapp = "fsl_sage.flower.app:server_app"
    clientapp = "fsl_sage.flower.app:client_app"

    [tool.flwr.app.config]
    method = "fsl_sage"          # or "cse_fsl", "fedavg"
    num-server-rounds = 20
    num-clients = 3
    alpha = 1.0                  # Dirichlet α of the digits split; 0 = IID
    batch-size = 32
    server-update-interval = 5
    align-interval = 10
    seed = 0
    results-path = ""            # optional: where the ServerApp writes its ledgers as JSON

Every SuperNode needs ``--node-config "partition-id=i num-partitions=N"``. The data is sklearn's bundled digits
(offline); the models are the digits split CNN built from ``seed``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fsl_sage.config import FSLConfig
from fsl_sage.data import client_datasets, load_digits_split
from fsl_sage.flower.core import client_train, run_server
from fsl_sage.models import digits_cnn_split

__all__ = ["server_app", "client_app", "config_from_run_config"]


def config_from_run_config(rc: dict[str, Any]) -> FSLConfig:
    """FSLConfig from a Flower run config (``num-server-rounds`` → rounds; dashes → underscores)."""
    d = dict(rc)
    if "num-server-rounds" in d:
        d["rounds"] = int(d["num-server-rounds"])
    d.setdefault("mode", "lazy")
    return FSLConfig.from_dict(d)


def _model_fn(seed: int):
    def fn():
        torch.manual_seed(seed)
        return digits_cnn_split()

    return fn


def _data_fn(rc: dict[str, Any]):
    alpha = float(rc.get("alpha", 1.0)) or None
    seed = int(rc.get("seed", 0))

    def fn(pid: int, n: int):
        xtr, ytr, _, _ = load_digits_split(0)
        return client_datasets(xtr, ytr, n, alpha=alpha, seed=seed)[pid]

    return fn


client_app = ClientApp()


@client_app.train()
def _train(msg: Message, context: Context) -> Message:
    rc = dict(context.run_config)
    cfg = config_from_run_config(rc)
    return client_train(msg, context, _model_fn(cfg.seed), _data_fn(rc), cfg, str(rc.get("method", "fsl_sage")))


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    cfg = config_from_run_config(rc)
    _, _, xte, yte = load_digits_split(0)
    strategy, result = run_server(
        grid,
        _model_fn(cfg.seed),
        cfg,
        cfg.rounds,
        int(rc.get("num-clients", 3)),
        str(rc.get("method", "fsl_sage")),
        eval_data=(xte, yte),
    )
    path = str(rc.get("results-path", ""))
    if path:
        ledger = getattr(strategy, "ledger", None)
        wire = getattr(strategy, "wire", None)
        out = {
            "payload_per_round": [ledger.total_where(round=t) for t in range(cfg.rounds)] if ledger else None,
            "wire_per_round": [wire.total_where(round=t) for t in range(cfg.rounds)] if wire else None,
            "accuracy": {int(k): float(v["accuracy"]) for k, v in result.evaluate_metrics_serverapp.items()},
        }
        Path(path).write_text(json.dumps(out, indent=2))
