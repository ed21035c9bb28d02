"""The shared runner of FSL-SAGE and its baselines: per-round records, the common optimizer and server step,
the local batch schedule, evaluation, and :class:`FederatedSplitAlgorithm` (per-client copies, the byte ledger,
the F-server's averaging of Alg. 2, save/load).

Every algorithm has the signature ``Algo(client, server, aux=None, config=FSLConfig())`` and
``fit(client_datasets, eval_data) -> History``. All clients start from identical copies of the given modules;
client i trains on ``client_datasets[i] = (x_i, y_i)`` in the batch order :func:`fsl_sage.data.batch_order`.
FSL-SAGE (:mod:`fsl_sage.sage`) and the baselines (:mod:`fsl_sage.baselines`) share the model split and the
:class:`~fsl_sage.comm.ByteCounter`, so their bytes compare like for like.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fsl_sage.aggregate import sample_weights, weighted_average
from fsl_sage.align import cut_gradients
from fsl_sage.comm import ByteCounter, bytes_to_reach, nbytes
from fsl_sage.config import FSLConfig
from fsl_sage.data import batch_order, check_dataset
from fsl_sage.metrics import gradient_agreement
from fsl_sage.models import as_aux, check_split_shapes
from icml25_shared.progress import track

__all__ = [
    "Dataset",
    "History",
    "RoundRecord",
    "FederatedSplitAlgorithm",
    "make_optimizer",
    "server_step",
    "local_batches",
    "evaluate",
]

logger = logging.getLogger(__name__)

Dataset = tuple[torch.Tensor, torch.Tensor]

# ---------------------------------------------------------------------------------------------------------------
# records


@dataclass
class RoundRecord:
    """What one round cost and achieved (evaluation of x_s ∘ x̄_c on ``eval_data`` after averaging)."""

    round: int
    accuracy: float
    loss: float
    bytes_up: int
    bytes_down: int
    bytes_round: int
    cumulative_bytes: int
    bytes_by_kind: dict[str, int]
    grad_nmse: float = math.nan
    grad_cosine: float = math.nan
    server_steps: int = 0
    alignments: int = 0
    wall_s: float = 0.0


@dataclass
class History:
    """Per-round records of one ``fit``."""

    method: str
    records: list[RoundRecord] = field(default_factory=list)

    @property
    def accuracies(self) -> list[float]:
        return [r.accuracy for r in self.records]

    @property
    def cumulative_bytes(self) -> list[int]:
        return [r.cumulative_bytes for r in self.records]

    @property
    def bytes_per_round(self) -> list[int]:
        return [r.bytes_round for r in self.records]

    @property
    def grad_cosines(self) -> list[float]:
        return [r.grad_cosine for r in self.records]

    def bytes_to_accuracy(self, target: float) -> float:
        """Cumulative bytes when test accuracy first reaches ``target`` (``inf`` if never)."""
        return bytes_to_reach(self.accuracies, self.cumulative_bytes, target)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "records": [asdict(r) for r in self.records]}


# ---------------------------------------------------------------------------------------------------------------
# shared steps (used by the in-process loops and by the Flower ClientApp and strategies)


def make_optimizer(params: Sequence[nn.Parameter] | Any, config: FSLConfig) -> torch.optim.Adam:
    """Adam(lr, betas, weight_decay) of the client and server models (the paper's optimizer, lr 1e-3, wd 1e-4)."""
    return torch.optim.Adam(params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)


def server_step(server: nn.Module, opt: torch.optim.Optimizer, z: torch.Tensor, y: torch.Tensor) -> float:
    """One optimizer step of x_s on the batch-mean NLL(x_s(z), y); no gradient goes back. Returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss = F.nll_loss(server(z.detach()), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def local_batches(n: int, config: FSLConfig, client: int, round: int) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(k, epoch, indices) of the local iterations of one round; k runs across local epochs."""
    k = 0
    for e in range(config.local_epochs):
        perm = batch_order(n, config.seed, client, round, e)
        for s in range(0, n, config.batch_size):
            yield k, e, perm[s : s + config.batch_size]
            k += 1


def evaluate(client: nn.Module, server: nn.Module, data: Dataset, batch_size: int = 1024) -> tuple[float, float]:
    """(accuracy, mean NLL) of x_s ∘ x_c on ``data`` (eval mode)."""
    x, y = data
    modes = (client.training, server.training)
    client.eval()
    server.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for s in range(0, len(y), batch_size):
            out = server(client(x[s : s + batch_size]))
            loss += float(F.nll_loss(out, y[s : s + batch_size], reduction="sum"))
            correct += int((out.argmax(1) == y[s : s + batch_size]).sum())
    client.train(modes[0])
    server.train(modes[1])
    return correct / len(y), loss / len(y)


# ---------------------------------------------------------------------------------------------------------------
# base


class FederatedSplitAlgorithm:
    """Common machinery: per-client copies, the ledger, F-server averaging, evaluation, save/load.

    Args:
        client: the client-side model x_c (copied for every client).
        server: the server-side model x_s, ending in ``LogSoftmax``.
        aux: the auxiliary model (a :class:`GradScalarAux` or a head ending in ``LogSoftmax``); needed by
            FSL-SAGE and CSE-FSL.
        config: :class:`FSLConfig`.
        sample_input: a small input batch to check the split's shapes at construction (otherwise checked on the
            first client's data at ``fit``).
    """

    method = "base"
    needs_aux = False

    def __init__(
        self,
        client: nn.Module,
        server: nn.Module,
        aux: nn.Module | None = None,
        config: FSLConfig | None = None,
        sample_input: torch.Tensor | None = None,
    ) -> None:
        self.config = config if config is not None else FSLConfig()
        if not isinstance(self.config, FSLConfig):
            raise ValueError(f"config must be an FSLConfig, got {type(self.config).__name__}")
        if self.needs_aux and aux is None:
            raise ValueError(f"{type(self).__name__} needs an aux model, got aux=None")
        self.client_template = copy.deepcopy(client)
        self.server_template = copy.deepcopy(server)
        self.server = copy.deepcopy(server)
        self.aux_template = as_aux(copy.deepcopy(aux)) if aux is not None else None
        self.n_classes: int | None = None
        self.smashed_shape: torch.Size | None = None
        if sample_input is not None:
            self._probe(sample_input)
        self.ledger = ByteCounter()
        self.history = History(self.method)
        self.clients: list[nn.Module] = []
        self.client_opts: list[torch.optim.Optimizer] = []
        self.server_steps = 0
        self._round = 0

    # -- setup
    def _probe(self, sample: torch.Tensor) -> None:
        self.smashed_shape, self.n_classes = check_split_shapes(
            self.client_template, self.server, self.aux_template, sample[:2]
        )

    @property
    def smashed_numel(self) -> int:
        assert self.smashed_shape is not None
        return int(math.prod(self.smashed_shape))

    def _upload_bytes(self, b: int) -> int:
        return b * self.smashed_numel * 4 + (8 * b if self.config.count_labels else 0)

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        n = len(datasets)
        self.clients = [copy.deepcopy(self.client_template) for _ in range(n)]
        self.client_opts = [make_optimizer(c.parameters(), self.config) for c in self.clients]

    def _validate(self, datasets: Sequence[Dataset], eval_data: Dataset | None) -> None:
        if datasets is None or len(datasets) == 0:
            raise ValueError("client_datasets must hold at least one client, got none")
        for i, d in enumerate(datasets):
            if not isinstance(d, (tuple, list)) or len(d) != 2:
                raise ValueError(f"client_datasets[{i}] must be a pair (x, y) of tensors")
            check_dataset(d[0], d[1], None, f"client_datasets[{i}]")
        if self.smashed_shape is None:
            self._probe(datasets[0][0])
        for i, d in enumerate(datasets):
            check_dataset(d[0], d[1], self.n_classes, f"client_datasets[{i}]")
        if eval_data is not None:
            check_dataset(eval_data[0], eval_data[1], self.n_classes, "eval_data")

    # -- the loop
    def fit(self, client_datasets: Sequence[Dataset], eval_data: Dataset | None = None) -> History:
        """Run ``config.rounds`` rounds (or until ``comm_budget_bytes``) and return the :class:`History`.

        Every call starts afresh from the initial models (and a fresh ledger)."""
        self._validate(client_datasets, eval_data)
        self.server = copy.deepcopy(self.server_template)
        self.ledger = ByteCounter()
        self.history = History(self.method)
        self.server_steps = 0
        self._setup(client_datasets)
        self.weights = sample_weights([len(d[1]) for d in client_datasets])
        cfg = self.config
        for t in track(range(cfg.rounds), f"{self.method}"):
            t0 = time.perf_counter()
            steps0 = self.server_steps
            self._round = t
            n_align = self._run_round(t, client_datasets)
            self._aggregate(t)
            rec = self._record(t, eval_data, time.perf_counter() - t0, self.server_steps - steps0, n_align)
            self.history.records.append(rec)
            if cfg.comm_budget_bytes is not None and self.ledger.total >= cfg.comm_budget_bytes:
                logger.info("%s: communication budget reached after round %d", self.method, t)
                break
        return self.history

    def _run_round(self, t: int, datasets: Sequence[Dataset]) -> int:
        raise NotImplementedError

    def _aggregate(self, t: int) -> None:
        avg = weighted_average([c.state_dict() for c in self.clients], self.weights)
        size = nbytes(avg)
        for i, c in enumerate(self.clients):
            c.load_state_dict(avg)
            self.ledger.down(t, i, "client", size)

    def global_client(self) -> nn.Module:
        """x̄_c (all clients hold it after averaging)."""
        return self.clients[0]

    def global_server(self) -> nn.Module:
        return self.server

    def _estimates(self, z: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return []

    def _record(self, t: int, eval_data: Dataset | None, wall: float, steps: int, n_align: int) -> RoundRecord:
        acc, loss, nmse, cos = math.nan, math.nan, math.nan, math.nan
        if eval_data is not None:
            acc, loss = evaluate(self.global_client(), self.global_server(), eval_data)
            x, y = eval_data
            client = self.global_client()
            was = client.training
            client.eval()
            with torch.no_grad():
                z = client(x)
            client.train(was)
            ests = self._estimates(z, y)
            if ests:
                server = self.global_server()
                sw = server.training
                server.eval()
                g = cut_gradients(server, z, y)
                server.train(sw)
                agree = [gradient_agreement(e, g) for e in ests]
                nmse = sum(a[0] for a in agree) / len(agree)
                cos = sum(a[1] for a in agree) / len(agree)
        up = self.ledger.total_where(round=t, direction="up")
        down = self.ledger.total_where(round=t, direction="down")
        return RoundRecord(
            round=t,
            accuracy=acc,
            loss=loss,
            bytes_up=up,
            bytes_down=down,
            bytes_round=up + down,
            cumulative_bytes=self.ledger.total,
            bytes_by_kind=self.ledger.by_kind(t),
            grad_nmse=nmse,
            grad_cosine=cos,
            server_steps=steps,
            alignments=n_align,
            wall_s=wall,
        )

    # -- persistence
    def models(self) -> dict[str, nn.Module]:
        """Every model the algorithm holds, by a stable name (``client.i``, ``server``, ``aux.i``, ...)."""
        out: dict[str, nn.Module] = {f"client.{i}": c for i, c in enumerate(self.clients)}
        out["server"] = self.server
        return out

    def save(self, path: str | Path) -> Path:
        """Write every model's state_dict to one safetensors file (config and method in its metadata)."""
        from safetensors.torch import save_file

        tensors = {}
        for name, m in self.models().items():
            for k, v in m.state_dict().items():
                tensors[f"{name}/{k}"] = v.detach().contiguous().clone()
        meta = {"method": self.method, "config": json.dumps(self.config.to_dict()), "round": str(self._round)}
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(p), metadata=meta)
        return p

    def load(self, path: str | Path, n_clients: int | None = None) -> None:
        """Load a file written by :meth:`save` into this algorithm (creating ``n_clients`` copies if not fit)."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("method") != self.method:
            raise ValueError(f"{path} holds a {meta.get('method')!r} checkpoint, this is {self.method!r}")
        tensors = load_file(str(path))
        if not self.clients:
            n = n_clients or len({k.split("/")[0] for k in tensors if k.startswith("client.")})
            self._setup([(torch.empty(0), torch.empty(0))] * n)
        for name, m in self.models().items():
            prefix = f"{name}/"
            sd = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            m.load_state_dict(sd)
