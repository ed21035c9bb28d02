"""FSL-SAGE (Alg. 1-3 of the paper) and its baselines as in-process simulations with exact byte accounting.

Every algorithm has the signature ``Algo(client, server, aux=None, config=FSLConfig())`` and
``fit(client_datasets, eval_data) -> History``. All clients start from identical copies of the given modules;
client i trains on ``client_datasets[i] = (x_i, y_i)`` in the batch order :func:`fsl_sage.data.batch_order`.
The five methods share the model split and the :class:`~fsl_sage.comm.ByteCounter`, so bytes compare like for
like (spec §4).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from icml25_shared.progress import track

from .aggregate import sample_weights, weighted_average
from .align import AuxAdamState, RingBuffer, align_aux, alignment_generator, cut_gradients
from .comm import ByteCounter, bytes_to_reach, nbytes
from .config import FSLConfig
from .data import batch_order, check_dataset
from .metrics import gradient_agreement
from .models import GradScalarAux, as_aux, check_split_shapes

__all__ = [
    "History",
    "RoundRecord",
    "FederatedSplitAlgorithm",
    "FSLSAGE",
    "CSEFSL",
    "SplitFedV1",
    "SplitFedV2",
    "FedAvg",
    "make_optimizer",
    "server_step",
    "run_client_round",
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
# shared steps (used by the in-process loops and by the Flower ClientApp / strategies)


def make_optimizer(params: Sequence[nn.Parameter] | Any, config: FSLConfig) -> torch.optim.Adam:
    """Adam(lr, betas, weight_decay) of the client and server models (spec §3.5)."""
    return torch.optim.Adam(params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)


def server_step(server: nn.Module, opt: torch.optim.Optimizer, z: torch.Tensor, y: torch.Tensor) -> float:
    """One optimizer step of x_s on the batch-mean NLL(x_s(z), y); no gradient goes back. Returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss = F.nll_loss(server(z.detach()), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _batches(n: int, config: FSLConfig, client: int, round: int):
    """(k, epoch, indices) of the local iterations of one round; k runs across local epochs."""
    k = 0
    for e in range(config.local_epochs):
        perm = batch_order(n, config.seed, client, round, e)
        for s in range(0, n, config.batch_size):
            yield k, e, perm[s : s + config.batch_size]
            k += 1


def run_client_round(
    method: str,
    client: nn.Module,
    opt: torch.optim.Optimizer,
    aux: GradScalarAux,
    data: Dataset,
    config: FSLConfig,
    client_id: int,
    round: int,
    on_upload: Callable[[int, torch.Tensor, torch.Tensor], None],
) -> int:
    """The client side of one FSL-SAGE (Alg. 1) or CSE-FSL round; returns the number of local iterations.

    ``on_upload(k, z, y)`` is called when k % q == 0 with the detached smashed activations, *before* the
    client's own step (in process: the server steps and, eagerly, aligns; on Flower: the upload is queued).
    FSL-SAGE: ĝ = aux estimate / B, back-propagated through x_c. CSE-FSL: the aux's local NLL, back-propagated
    through aux and x_c (``opt`` then holds both).
    """
    x, y = data
    client.train()
    iters = 0
    for k, _, idx in _batches(len(y), config, client_id, round):
        xb, yb = x[idx], y[idx]
        z = client(xb)
        if k % config.q == 0:
            on_upload(k, z.detach(), yb)
        opt.zero_grad(set_to_none=True)
        if method == "fsl_sage":
            g_hat = aux.estimate(z.detach(), yb) / len(yb)  # per-sample estimate → batch-mean feedback
            z.backward(g_hat)
        elif method == "cse_fsl":
            F.nll_loss(aux(z), yb).backward()
        else:
            raise ValueError(f"run_client_round: method must be 'fsl_sage' or 'cse_fsl', got {method!r}")
        opt.step()
        iters += 1
    return iters


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


# ---------------------------------------------------------------------------------------------------------------
# FSL-SAGE


class FSLSAGE(FederatedSplitAlgorithm):
    """FSL-SAGE: clients train on their aligned aux model's cut-gradient estimate; the server steps on every q-th
    upload and, every l rounds, aligns each client's aux to its true cut gradients (spec §3.3-3.4)."""

    method = "fsl_sage"
    needs_aux = True

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        super()._setup(datasets)
        n = len(datasets)
        assert self.aux_template is not None
        self.auxes: list[GradScalarAux] = [copy.deepcopy(self.aux_template) for _ in range(n)]
        self.aux_states = [AuxAdamState() for _ in range(n)]
        self.buffers = [RingBuffer(self.config.buffer_size) for _ in range(n)]
        self.server_opt = make_optimizer(self.server.parameters(), self.config)
        self.pending = [False] * n
        self.align_log: list[dict[str, float]] = []
        # warm start (CSE-FSL rounds): the aux trains on the client with the client's optimizer
        self._warm_opts = [
            make_optimizer(list(c.parameters()) + list(a.parameters()), self.config)
            for c, a in zip(self.clients, self.auxes)
        ]

    def models(self) -> dict[str, nn.Module]:
        out = super().models()
        out.update({f"aux.{i}": a for i, a in enumerate(getattr(self, "auxes", []))})
        return out

    def _align(self, i: int, t: int) -> None:
        cfg = self.config
        z, y = self.buffers[i].get()
        stats = align_aux(
            self.auxes[i],
            self.aux_states[i],
            z,
            y,
            self.server,
            cfg.align_epochs,
            cfg.align_batch_size,
            cfg.effective_aux_lr,
            cfg.betas,
            generator=alignment_generator(cfg.seed, i, t),
        )
        stats.update(client=i, round=t)
        self.align_log.append(stats)

    def _is_align_round(self, t: int) -> bool:
        s = t - self.config.warm_start_rounds
        return s >= 0 and s % self.config.align_interval == 0

    def _run_round(self, t: int, datasets: Sequence[Dataset]) -> int:
        cfg = self.config
        warm = t < cfg.warm_start_rounds
        n_align = 0
        for i in range(len(self.clients)):
            if self.pending[i]:  # lazy: the aux aligned at the end of round t-1 travels with this round's message
                self.ledger.down(t, i, "aux", nbytes(self.auxes[i]))
                self.pending[i] = False

            def on_upload(k: int, z: torch.Tensor, y: torch.Tensor, i: int = i) -> None:
                nonlocal n_align
                self.ledger.up(t, i, "smashed", self._upload_bytes(len(y)))
                server_step(self.server, self.server_opt, z, y)
                self.server_steps += 1
                self.buffers[i].push(z, y)
                if not warm and cfg.mode == "eager" and k == 0 and self._is_align_round(t):
                    self._align(i, t)
                    n_align += 1
                    self.ledger.down(t, i, "aux", nbytes(self.auxes[i]))

            if warm:
                run_client_round(
                    "cse_fsl", self.clients[i], self._warm_opts[i], self.auxes[i], datasets[i], cfg, i, t, on_upload
                )
                self.ledger.up(t, i, "aux", nbytes(self.auxes[i]))
            else:
                run_client_round(
                    "fsl_sage", self.clients[i], self.client_opts[i], self.auxes[i], datasets[i], cfg, i, t, on_upload
                )
            self.ledger.up(t, i, "client", nbytes(self.clients[i]))
        if not warm and cfg.mode == "lazy" and self._is_align_round(t) and t < cfg.rounds - 1:
            for i in range(len(self.clients)):
                self._align(i, t)
                n_align += 1
                self.pending[i] = True
        return n_align

    def _aggregate(self, t: int) -> None:
        super()._aggregate(t)
        if t < self.config.warm_start_rounds:
            avg = weighted_average([a.state_dict() for a in self.auxes], self.weights)
            for i, a in enumerate(self.auxes):
                a.load_state_dict(avg)
                self.ledger.down(t, i, "aux", nbytes(avg))

    def _estimates(self, z: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [a.estimate(z, y) for a in self.auxes]


class CSEFSL(FederatedSplitAlgorithm):
    """CSE-FSL (Mu & Shen 2023): clients train x_c and their aux on the aux's local loss; the server steps on every
    q-th upload; client and aux models are averaged every round."""

    method = "cse_fsl"
    needs_aux = True

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        n = len(datasets)
        self.clients = [copy.deepcopy(self.client_template) for _ in range(n)]
        assert self.aux_template is not None
        self.auxes = [copy.deepcopy(self.aux_template) for _ in range(n)]
        self.client_opts = [
            make_optimizer(list(c.parameters()) + list(a.parameters()), self.config)
            for c, a in zip(self.clients, self.auxes)
        ]
        self.server_opt = make_optimizer(self.server.parameters(), self.config)

    def models(self) -> dict[str, nn.Module]:
        out = super().models()
        out.update({f"aux.{i}": a for i, a in enumerate(getattr(self, "auxes", []))})
        return out

    def _run_round(self, t: int, datasets: Sequence[Dataset]) -> int:
        for i in range(len(self.clients)):

            def on_upload(k: int, z: torch.Tensor, y: torch.Tensor, i: int = i) -> None:
                self.ledger.up(t, i, "smashed", self._upload_bytes(len(y)))
                server_step(self.server, self.server_opt, z, y)
                self.server_steps += 1

            run_client_round(
                "cse_fsl",
                self.clients[i],
                self.client_opts[i],
                self.auxes[i],
                datasets[i],
                self.config,
                i,
                t,
                on_upload,
            )
            self.ledger.up(t, i, "client", nbytes(self.clients[i]))
            self.ledger.up(t, i, "aux", nbytes(self.auxes[i]))
        return 0

    def _aggregate(self, t: int) -> None:
        super()._aggregate(t)
        avg = weighted_average([a.state_dict() for a in self.auxes], self.weights)
        for i, a in enumerate(self.auxes):
            a.load_state_dict(avg)
            self.ledger.down(t, i, "aux", nbytes(avg))

    def _estimates(self, z: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [self.auxes[0].estimate(z, y)]


# ---------------------------------------------------------------------------------------------------------------
# SplitFed and FedAvg


def _splitfed_step(
    client: nn.Module,
    c_opt: torch.optim.Optimizer,
    server: nn.Module,
    s_opt: torch.optim.Optimizer,
    xb: torch.Tensor,
    yb: torch.Tensor,
) -> None:
    """One SplitFed iteration: the server steps on the uploaded z and returns the batch-mean cut gradient."""
    z = client(xb)
    zs = z.detach().requires_grad_(True)
    s_opt.zero_grad(set_to_none=True)
    F.nll_loss(server(zs), yb).backward()
    s_opt.step()
    c_opt.zero_grad(set_to_none=True)
    z.backward(zs.grad)
    c_opt.step()


class SplitFedV2(FederatedSplitAlgorithm):
    """SplitFed-v2 ("single-server"): one shared server model, clients in turn, true gradient every batch."""

    method = "splitfed_v2"

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        super()._setup(datasets)
        self.server_opt = make_optimizer(self.server.parameters(), self.config)

    def _server_for(self, i: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        return self.server, self.server_opt

    def _run_round(self, t: int, datasets: Sequence[Dataset]) -> int:
        for i, (x, y) in enumerate(datasets):
            server, s_opt = self._server_for(i)
            self.clients[i].train()
            server.train()
            for _, _, idx in _batches(len(y), self.config, i, t):
                b = len(idx)
                self.ledger.up(t, i, "smashed", self._upload_bytes(b))
                _splitfed_step(self.clients[i], self.client_opts[i], server, s_opt, x[idx], y[idx])
                self.server_steps += 1
                self.ledger.down(t, i, "gradient", b * self.smashed_numel * 4)
            self.ledger.up(t, i, "client", nbytes(self.clients[i]))
        return 0


class SplitFedV1(SplitFedV2):
    """SplitFed-v1 ("multi-server"): one server copy per client, averaged (on the server side) every round."""

    method = "splitfed_v1"

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        FederatedSplitAlgorithm._setup(self, datasets)
        self.servers = [copy.deepcopy(self.server) for _ in datasets]
        self.server_opts = [make_optimizer(s.parameters(), self.config) for s in self.servers]

    def _server_for(self, i: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        return self.servers[i], self.server_opts[i]

    def _aggregate(self, t: int) -> None:
        super()._aggregate(t)
        avg = weighted_average([s.state_dict() for s in self.servers], self.weights)
        for s in self.servers:
            s.load_state_dict(avg)
        self.server.load_state_dict(avg)

    def models(self) -> dict[str, nn.Module]:
        out = super().models()
        out.update({f"server.{i}": s for i, s in enumerate(getattr(self, "servers", []))})
        return out


class FedAvg(FederatedSplitAlgorithm):
    """FedAvg (McMahan et al. 2017) of the full model x_c ∘ x_s, trained locally; both halves sent both ways."""

    method = "fedavg"

    def _setup(self, datasets: Sequence[Dataset]) -> None:
        n = len(datasets)
        self.clients = [copy.deepcopy(self.client_template) for _ in range(n)]
        self.servers = [copy.deepcopy(self.server) for _ in range(n)]
        self.client_opts = [
            make_optimizer(list(c.parameters()) + list(s.parameters()), self.config)
            for c, s in zip(self.clients, self.servers)
        ]

    def _run_round(self, t: int, datasets: Sequence[Dataset]) -> int:
        for i, (x, y) in enumerate(datasets):
            c, s, opt = self.clients[i], self.servers[i], self.client_opts[i]
            c.train()
            s.train()
            for _, _, idx in _batches(len(y), self.config, i, t):
                opt.zero_grad(set_to_none=True)
                F.nll_loss(s(c(x[idx])), y[idx]).backward()
                opt.step()
            self.ledger.up(t, i, "client", nbytes(c))
            self.ledger.up(t, i, "server", nbytes(s))
        return 0

    def _aggregate(self, t: int) -> None:
        super()._aggregate(t)
        avg = weighted_average([s.state_dict() for s in self.servers], self.weights)
        size = nbytes(avg)
        for i, s in enumerate(self.servers):
            s.load_state_dict(avg)
            self.ledger.down(t, i, "server", size)
        self.server.load_state_dict(avg)

    def models(self) -> dict[str, nn.Module]:
        out = super().models()
        out.update({f"server.{i}": s for i, s in enumerate(getattr(self, "servers", []))})
        return out


ALGORITHMS: dict[str, type[FederatedSplitAlgorithm]] = {
    "fsl_sage": FSLSAGE,
    "cse_fsl": CSEFSL,
    "splitfed_v1": SplitFedV1,
    "splitfed_v2": SplitFedV2,
    "fedavg": FedAvg,
}
