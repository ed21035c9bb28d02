"""Flower apps for ``flwr run`` (simulation or deployment engine), configured from ``context.run_config``.

``pyproject.toml`` of a Flower app project using them::

    [tool.flwr.app.components]
    serverapp = "fsl_sage.flower.app:server_app"
    clientapp = "fsl_sage.flower.app:client_app"

    [tool.flwr.app.config]
    method = "fsl_sage"          # or "cse_fsl", "fedavg"
    task = "digits"              # "digits", "cifar10" (needs data-path and torchvision) or "module:function"
    data-path = ""               # cifar10: a local folder holding torchvision's cifar-10-batches-py
    num-server-rounds = 20
    num-clients = 3
    alpha = 1.0                  # Dirichlet α of the split; 0 = IID
    batch-size = 32
    server-update-interval = 5
    align-interval = 10
    seed = 0
    fraction-train = 1.0         # node handling (FSLSAGEStrategy): sampled fraction of num-clients per round
    min-available-nodes = 0      # 0: as many as are sampled
    accept-failures = true       # a failed client is logged and the round goes on with the others
    node-timeout = 60.0          # seconds to wait for enough SuperNodes before a clear error
    reply-timeout = 3600.0       # seconds to wait for a round's replies (a late node counts as failed)
    results-path = ""            # optional: where the ServerApp writes its ledgers and failures as JSON

Any other key is refused by name (a misspelt ``server-update-intervall`` would otherwise leave the default 5);
a user task's own settings go in a nested table (``[tool.flwr.app.config.my-task]``, read as ``my-task.key``).

Every SuperNode needs ``--node-config "partition-id=i num-partitions=N"``. Tasks:

* ``digits``: scikit-learn's bundled digits (offline) and the digits split CNN built from ``seed``;
* ``cifar10``: CIFAR-10 from ``data-path`` (never downloaded), the paper's ResNet-18 split and its training
  augmentation, RandomCrop(32, padding 4) + horizontal flip (Sec. 5);
* ``"package.module:function"``: ``function(run_config) -> FlowerTask``, your own models and data.
"""

from __future__ import annotations

import difflib
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fsl_sage.config import FSLConfig
from fsl_sage.data import client_datasets, dirichlet_partition, iid_partition, load_digits_split
from fsl_sage.flower.core import DataFn, ModelFn, client_query, client_train, run_server
from fsl_sage.models import digits_cnn_split, resnet18_split

__all__ = [
    "server_app",
    "client_app",
    "config_from_run_config",
    "check_run_config_keys",
    "FlowerTask",
    "load_task",
]


@dataclass
class FlowerTask:
    """What the apps train: ``model_fn() -> (client, server, aux)`` with the initial weights (identical on every
    side: seed inside it), ``data_fn(partition_id, num_partitions)`` -> (x, y) or a torch ``Dataset``, the
    server's ``eval_data`` (optional) and a per-sample training ``transform`` (optional)."""

    model_fn: ModelFn
    data_fn: DataFn
    eval_data: Any = None
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None


APP_KEYS = frozenset(
    {
        "method", "task", "data-path", "num-server-rounds", "num-clients", "alpha", "fraction-train",
        "min-available-nodes", "accept-failures", "node-timeout", "reply-timeout", "results-path",
    }
)  # fmt: skip
"""The run-config keys the apps read besides :class:`FSLConfig`'s fields (dashes or underscores)."""


def check_run_config_keys(rc: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming every run-config key the apps would not read (a misspelt key would otherwise
    leave its setting at the default without a word). Keys holding a dot (a nested table such as
    ``[tool.flwr.app.config.my-task]``) are left to a user task."""
    known = APP_KEYS | {f.name.replace("_", "-") for f in fields(FSLConfig)}
    bad = [k for k in rc if "." not in k and k.replace("_", "-") not in known]
    if bad:
        hints = []
        for k in bad:
            close = difflib.get_close_matches(k.replace("_", "-"), sorted(known), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(
            "run_config: unknown key(s) "
            + ", ".join(hints)
            + "; expected keys among "
            + ", ".join(sorted(known))
            + ' (a user task\'s own settings go in a nested table, read as "table.key")'
        )


def config_from_run_config(rc: dict[str, Any]) -> FSLConfig:
    """FSLConfig from a Flower run config (``num-server-rounds`` → rounds; dashes → underscores). Unknown keys
    raise ``ValueError`` naming them (see :func:`check_run_config_keys`)."""
    check_run_config_keys(rc)
    d = dict(rc)
    if "num-server-rounds" in d:
        d["rounds"] = int(d["num-server-rounds"])
    d.setdefault("mode", "lazy")
    return FSLConfig.from_dict(d)


def _seeded(fn: Callable[[], Any], seed: int) -> ModelFn:
    def model_fn():
        torch.manual_seed(seed)
        return fn()

    return model_fn


def _digits_task(rc: dict[str, Any]) -> FlowerTask:
    alpha = float(rc.get("alpha", 1.0)) or None
    seed = int(rc.get("seed", 0))

    def data_fn(pid: int, n: int):
        xtr, ytr, _, _ = load_digits_split(0)
        return client_datasets(xtr, ytr, n, alpha=alpha, seed=seed)[pid]

    _, _, xte, yte = load_digits_split(0)
    return FlowerTask(_seeded(digits_cnn_split, seed), data_fn, (xte, yte))


def _cifar10_task(rc: dict[str, Any]) -> FlowerTask:
    path = str(rc.get("data-path", ""))
    if not path:
        raise ValueError('task "cifar10" needs data-path: a folder holding cifar-10-batches-py (not downloaded)')
    try:
        from torchvision import datasets, transforms
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError('task "cifar10" needs torchvision (pip install "icml25-fsl-sage[vision]")') from e
    alpha = float(rc.get("alpha", 1.0)) or None
    seed = int(rc.get("seed", 0))
    to_tensor = transforms.ToTensor()

    def data_fn(pid: int, n: int):
        train = datasets.CIFAR10(path, train=True, download=False, transform=to_tensor)
        labels = list(train.targets)
        parts = iid_partition(len(labels), n, seed) if alpha is None else dirichlet_partition(labels, n, alpha, seed)
        return torch.utils.data.Subset(train, parts[pid].tolist())

    augment = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()])
    test = datasets.CIFAR10(path, train=False, download=False, transform=to_tensor)
    return FlowerTask(_seeded(resnet18_split, seed), data_fn, test, augment)


def load_task(rc: dict[str, Any]) -> FlowerTask:
    """The task named by ``run_config["task"]`` (default ``digits``)."""
    name = str(rc.get("task", "digits"))
    if name == "digits":
        return _digits_task(rc)
    if name == "cifar10":
        return _cifar10_task(rc)
    if ":" not in name:
        raise ValueError(f'task must be "digits", "cifar10" or "package.module:function", got {name!r}')
    mod, fn = name.split(":", 1)
    task = getattr(importlib.import_module(mod), fn)(rc)
    if not isinstance(task, FlowerTask):
        raise ValueError(f"task {name!r} must return a fsl_sage.flower.app.FlowerTask, got {type(task).__name__}")
    return task


client_app = ClientApp()


@client_app.train()
def _train(msg: Message, context: Context) -> Message:
    rc = dict(context.run_config)
    task = load_task(rc)
    cfg = config_from_run_config(rc)
    method = str(rc.get("method", "fsl_sage"))
    return client_train(msg, context, task.model_fn, task.data_fn, cfg, method, task.transform)


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    return client_query(msg, context)


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    cfg = config_from_run_config(rc)
    task = load_task(rc)
    method = str(rc.get("method", "fsl_sage"))
    nodes: dict[str, Any] = {}
    if method != "fedavg":
        nodes = {
            "fraction_train": float(rc.get("fraction-train", 1.0)),
            "min_available_nodes": int(rc.get("min-available-nodes", 0)) or None,
            "accept_failures": bool(rc.get("accept-failures", True)),
            "node_timeout": float(rc.get("node-timeout", 60.0)),
        }
    strategy, result = run_server(
        grid,
        task.model_fn,
        cfg,
        cfg.rounds,
        int(rc.get("num-clients", 3)),
        method,
        eval_data=task.eval_data,
        timeout=float(rc.get("reply-timeout", 3600.0)),
        **nodes,
    )
    path = str(rc.get("results-path", ""))
    if path:
        ledger = getattr(strategy, "ledger", None)
        wire = getattr(strategy, "wire", None)
        out = {
            "payload_per_round": [ledger.total_where(round=t) for t in range(cfg.rounds)] if ledger else None,
            "wire_per_round": [wire.total_where(round=t) for t in range(cfg.rounds)] if wire else None,
            "accuracy": {int(k): float(v["accuracy"]) for k, v in result.evaluate_metrics_serverapp.items()},
            "failures": getattr(strategy, "failures", []),
        }
        Path(path).write_text(json.dumps(out, indent=2))
