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
import os
import time
import warnings
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
from fsl_sage.data import ClientData, as_client_data, batch_order, check_client_data
from fsl_sage.metrics import agreement_from_sums, agreement_sums
from fsl_sage.models import as_aux, check_split_shapes
from icml25_shared.device import torch_threads
from icml25_shared.progress import track
from icml25_shared.training import kept_buffers
from icml25_shared.validate import check_float, check_int

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

Dataset = tuple[torch.Tensor, torch.Tensor] | torch.utils.data.Dataset | ClientData
"""A client's data: a pair of tensors (x, y), any map-style torch ``Dataset`` of (input, label) pairs, or a
:class:`fsl_sage.data.ClientData` (a Dataset with a transform)."""

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
        """Cumulative bytes when test accuracy first reaches ``target``, a fraction in [0, 1] like the recorded
        accuracies (``inf`` if never)."""
        target = check_float("target", target, min=0.0, max=1.0)
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
    """(accuracy, mean NLL) of x_s ∘ x_c on ``data`` (eval mode, no transform, on the client model's device)."""
    batch_size = check_int("batch_size", batch_size, min=1)
    d = as_client_data(data, name="eval_data")
    d = ClientData(d, name="eval_data")
    d.transform = None
    dev = next((p.device for p in client.parameters()), torch.device("cpu"))
    modes = (client.training, server.training)
    client.eval()
    server.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for s in range(0, len(d), batch_size):
            x, y = d.batch(torch.arange(s, min(s + batch_size, len(d))), device=dev)
            out = server(client(x))
            loss += float(F.nll_loss(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
    client.train(modes[0])
    server.train(modes[1])
    return correct / len(d), loss / len(d)


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
        sample_input: a small input batch to check the split's shapes at construction (otherwise every
            client's own first inputs are checked at ``fit``).
        device: where the models, optimizer states, buffers and batches live (``None``: where the given models
            are). The byte ledger does not depend on it.
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
        device: str | torch.device | None = None,
    ) -> None:
        self.config = config if config is not None else FSLConfig()
        if not isinstance(self.config, FSLConfig):
            raise ValueError(f"config must be an FSLConfig, got {type(self.config).__name__}")
        if self.needs_aux and aux is None:
            raise ValueError(f"{type(self).__name__} needs an aux model, got aux=None")
        self.device = torch.device(device) if device is not None else None
        self.client_template = copy.deepcopy(client).to(self.device)
        self.server_template = copy.deepcopy(server).to(self.device)
        self.server = copy.deepcopy(self.server_template)
        self.aux_template = as_aux(copy.deepcopy(aux)).to(self.device) if aux is not None else None
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
        self._data: list[ClientData] = []
        self._loaded_weights = False

    # -- setup
    def _probe(self, sample: torch.Tensor) -> None:
        try:
            self.smashed_shape, self.n_classes = check_split_shapes(
                self.client_template, self.server, self.aux_template, sample[:2].to(self.device)
            )
        except (ValueError, RuntimeError) as e:
            raise ValueError(
                f"sample_input: inputs of shape {tuple(sample.shape[1:])} and dtype {sample.dtype} do not fit the "
                f"split: {e}"
            ) from e

    @property
    def smashed_numel(self) -> int:
        assert self.smashed_shape is not None
        return int(math.prod(self.smashed_shape))

    def _upload_bytes(self, z: torch.Tensor) -> int:
        """Bytes of one upload of smashed activations ``z``: numel · itemsize (float64 and bfloat16 splits count 8
        and 2 bytes a value, as model payloads do), plus the int64 labels with ``count_labels``."""
        return z.numel() * z.element_size() + (8 * len(z) if self.config.count_labels else 0)

    def _setup(self, datasets: Sequence[ClientData]) -> None:
        n = len(datasets)
        self.clients = [copy.deepcopy(self.client_template) for _ in range(n)]
        self.client_opts = [make_optimizer(c.parameters(), self.config) for c in self.clients]

    def _validate(
        self, datasets: Sequence[Dataset], eval_data: Dataset | None, transform: Any = None
    ) -> list[ClientData]:
        """Every client's data as :class:`ClientData`, each client probed through the split with its own inputs
        (shapes) and its labels checked (integers promoted to int64, range), errors naming the client."""
        if datasets is None or isinstance(datasets, (torch.Tensor, torch.utils.data.Dataset)) or len(datasets) == 0:
            raise ValueError("client_datasets must hold at least one client (a list, one data set per client)")
        data = [as_client_data(d, transform, f"client_datasets[{i}]") for i, d in enumerate(datasets)]
        if self.smashed_shape is None:
            self.smashed_shape, self.n_classes = check_client_data(
                data[0], self.client_template, self.server, self.aux_template, "client_datasets[0]"
            )
        for i, d in enumerate(data):
            check_client_data(
                d, self.client_template, self.server, self.aux_template, f"client_datasets[{i}]", self.smashed_shape,
                self.n_classes,
            )  # fmt: skip
        if eval_data is not None:
            ev = as_client_data(eval_data, None, "eval_data")
            check_client_data(
                ev,
                self.client_template,
                self.server,
                self.aux_template,
                "eval_data",
                self.smashed_shape,
                self.n_classes,
            )
        return data

    # -- the loop
    def fit(
        self,
        client_datasets: Sequence[Dataset],
        eval_data: Dataset | None = None,
        *,
        transform: Any = None,
        resume: str | Path | dict[str, Any] | None = None,
        checkpoint: str | Path | None = None,
        callback: Any = None,
        n_threads: int | None = 1,
    ) -> History:
        """Run ``config.rounds`` rounds (or until ``comm_budget_bytes``) and return the :class:`History`.

        Args:
            client_datasets: one data set per client: (x, y) tensors or any torch ``Dataset`` (see
                :class:`fsl_sage.data.ClientData`).
            eval_data: evaluated after every round with x_s ∘ x̄_c (no transform).
            transform: applied to every training input (e.g. random crop + flip), seeded per batch.
            resume: a checkpoint written by :meth:`save_checkpoint` (or ``checkpoint=``): the run continues
                from the round after it, bit-identically to a run that was never interrupted. Without it every
                call starts afresh from the initial models (and a fresh ledger).
            checkpoint: write the full training state here after every round (atomically), for ``resume``.
            callback: ``callback(algorithm, record)`` after every round (after the checkpoint is written).
            n_threads: torch threads during the run (default 1: split models this small only add synchronisation
                with more), the caller's setting restored after; ``None`` keeps torch's setting (large models).
        """
        if n_threads is not None:
            n_threads = check_int("n_threads", n_threads, min=1)
            with torch_threads(n_threads):
                return self.fit(
                    client_datasets, eval_data, transform=transform, resume=resume, checkpoint=checkpoint,
                    callback=callback, n_threads=None,
                )  # fmt: skip
        data = self._validate(client_datasets, eval_data, transform)
        if resume is None:
            if self._loaded_weights:
                warnings.warn(
                    "fit() starts from the initial models, so the weights loaded with load() are not used; to "
                    "continue a run pass fit(..., resume=<file written by save_checkpoint>)",
                    UserWarning,
                    stacklevel=2,
                )
            self.server = copy.deepcopy(self.server_template)
            self.ledger = ByteCounter()
            self.history = History(self.method)
            self.server_steps = 0
            self._setup(data)
            self.weights = sample_weights([len(d) for d in data])
            start = 0
        else:
            self._setup(data)
            self.weights = sample_weights([len(d) for d in data])
            start = self._load_checkpoint(resume, len(data))
            if start < self.config.rounds:
                self._catch_up(start, eval_data)
        self._data = data
        cfg = self.config
        for t in track(range(start, cfg.rounds), f"{self.method}"):
            if cfg.comm_budget_bytes is not None and self.ledger.total >= cfg.comm_budget_bytes:
                break  # a resumed run that had already spent its budget
            t0 = time.perf_counter()
            steps0 = self.server_steps
            self._round = t
            n_align = self._run_round(t, data)
            self._aggregate(t)
            rec = self._record(t, eval_data, time.perf_counter() - t0, self.server_steps - steps0, n_align)
            self.history.records.append(rec)
            self._round = t + 1
            if checkpoint is not None:
                self.save_checkpoint(checkpoint)
            if callback is not None:
                callback(self, rec)
            if cfg.comm_budget_bytes is not None and self.ledger.total >= cfg.comm_budget_bytes:
                logger.info("%s: communication budget reached after round %d", self.method, t)
                break
        return self.history

    def _run_round(self, t: int, datasets: Sequence[ClientData]) -> int:
        raise NotImplementedError

    def _catch_up(self, start: int, eval_data: Dataset | None) -> None:
        """After a resume with more rounds than the checkpointed run had: do what that run left out at its end
        because it was its last round (FSL-SAGE's lazy alignment), so the resumed run equals a straight one."""

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
        acc, loss = math.nan, math.nan
        if eval_data is not None:
            acc, loss = evaluate(self.global_client(), self.global_server(), eval_data)
        nmse, cos = self._agreement(eval_data)
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

    def _agreement(self, eval_data: Dataset | None, batch_size: int = 1024) -> tuple[float, float]:
        """Mean (NMSE, cosine) of the clients' cut-gradient estimates against the true cut gradients on
        ``eval_data`` (NaN without eval data or estimates), over all entries of the data set.

        Batches of ``batch_size`` samples, as :func:`evaluate` (a whole CIFAR test set through a ResNet-18 split at
        once held over a GB); the models' buffers (BatchNorm statistics of the aux models, which estimate in their
        training mode, with each batch's statistics) are left as they were, so evaluation never changes the
        training state."""
        nmse, cos = math.nan, math.nan
        if eval_data is None:
            return nmse, cos
        ev = as_client_data(eval_data, None, "eval_data")
        client, server = self.global_client(), self.global_server()
        modes = (client.training, server.training)
        client.eval()
        server.eval()
        sums: list[torch.Tensor] = []  # per estimate: agreement_sums over the batches
        try:
            with kept_buffers(*self.models().values()):  # e.g. the aux models' BatchNorm statistics
                for s in range(0, len(ev), batch_size):
                    x, y = ev.batch(torch.arange(s, min(s + batch_size, len(ev))), device=self.device)
                    with torch.no_grad():
                        z = client(x)
                    ests = self._estimates(z, y)
                    if not ests:
                        return nmse, cos
                    g = cut_gradients(server, z, y)
                    part = [agreement_sums(e, g) for e in ests]
                    sums = part if not sums else [t + p for t, p in zip(sums, part)]
        finally:
            client.train(modes[0])
            server.train(modes[1])
        if not sums:  # no eval samples
            return nmse, cos
        agree = [agreement_from_sums(t) for t in sums]
        return sum(a[0] for a in agree) / len(agree), sum(a[1] for a in agree) / len(agree)

    # -- persistence
    def models(self) -> dict[str, nn.Module]:
        """Every model the algorithm holds, by a stable name (``client.i``, ``server``, ``aux.i``, ...)."""
        out: dict[str, nn.Module] = {f"client.{i}": c for i, c in enumerate(self.clients)}
        out["server"] = self.server
        return out

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer the algorithm holds, by a stable name (``client_opt.i``, ``server_opt``, ...)."""
        out: dict[str, torch.optim.Optimizer] = {f"client_opt.{i}": o for i, o in enumerate(self.client_opts)}
        server_opt = getattr(self, "server_opt", None)  # the methods with one shared server model
        if server_opt is not None:
            out["server_opt"] = server_opt
        return out

    def _extra_state(self) -> dict[str, Any]:
        """Subclass state beyond models and optimizers (buffers, aux Adam states, pending flags)."""
        return {}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def checkpoint_state(self) -> dict[str, Any]:
        """The full training state after the last completed round: every model and optimizer, the subclass
        state (alignment buffers, aux optimizer states, pending flags), the ledger, the history, the torch RNG
        state and the round number. Plain tensors, dicts, lists and numbers (``torch.load(weights_only=True)``)."""
        return {
            "format": 1,
            "method": self.method,
            "config": self.config.to_dict(),
            "round": self._round,
            "n_clients": len(self.clients),
            "models": {
                n: {k: v.detach().cpu().clone() for k, v in m.state_dict().items()} for n, m in self.models().items()
            },
            "optimizers": {n: copy.deepcopy(o.state_dict()) for n, o in self.optimizers().items()},
            "extra": self._extra_state(),
            "ledger": [[t.round, t.client, t.direction, t.kind, t.bytes] for t in self.ledger.transfers],
            "history": [asdict(r) for r in self.history.records],
            "server_steps": self.server_steps,
            "rng": torch.get_rng_state(),
        }

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write :meth:`checkpoint_state` to ``path`` (atomically: a crash mid-write leaves the old file)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        torch.save(self.checkpoint_state(), tmp)
        os.replace(tmp, p)
        return p

    def _load_checkpoint(self, source: str | Path | dict[str, Any], n_clients: int) -> int:
        ck = source if isinstance(source, dict) else torch.load(str(source), weights_only=True)
        if ck.get("method") != self.method:
            raise ValueError(f"resume: the checkpoint holds a {ck.get('method')!r} run, this is {self.method!r}")
        if ck["n_clients"] != n_clients:
            raise ValueError(f"resume: the checkpoint has {ck['n_clients']} clients, fit got {n_clients} data sets")
        mine, theirs = self.config.to_dict(), dict(ck["config"])
        theirs["betas"] = tuple(theirs["betas"])
        diff = [k for k in mine if k not in ("rounds", "comm_budget_bytes") and mine[k] != theirs[k]]
        if diff:
            raise ValueError(
                "resume: the config differs from the checkpoint's in "
                + ", ".join(f"{k} ({mine[k]!r} here, {theirs[k]!r} there)" for k in diff)
            )
        for name, m in self.models().items():
            m.load_state_dict(ck["models"][name])
        for name, o in self.optimizers().items():
            o.load_state_dict(ck["optimizers"][name])
        self._load_extra_state(ck["extra"])
        self.ledger = ByteCounter()
        for r, c, d, k, b in ck["ledger"]:
            self.ledger.add(r, c, d, k, b)
        self.history = History(self.method, [RoundRecord(**r) for r in ck["history"]])
        self.server_steps = int(ck["server_steps"])
        torch.set_rng_state(ck["rng"])
        self._round = int(ck["round"])
        self._resumed_rounds = int(theirs["rounds"])
        return self._round

    def save(self, path: str | Path) -> Path:
        """Write every model's state_dict to one safetensors file (config and method in its metadata). Weights
        only: to continue training later use :meth:`save_checkpoint` and ``fit(..., resume=path)``."""
        from safetensors.torch import save_file

        tensors = {}
        for name, m in self.models().items():
            for k, v in m.state_dict().items():
                tensors[f"{name}/{k}"] = v.detach().cpu().contiguous().clone()
        meta = {
            "method": self.method,
            "config": json.dumps(self.config.to_dict()),
            "round": str(self._round),
            "n_clients": str(len(self.clients)),
        }
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(p), metadata=meta)
        return p

    def load(self, path: str | Path, n_clients: int | None = None) -> None:
        """Load the weights a :meth:`save` wrote into this algorithm (creating the per-client copies if it was
        not fit yet). The file's client count must equal ``n_clients`` and the clients already held."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("method") != self.method:
            raise ValueError(f"{path} holds a {meta.get('method')!r} checkpoint, this is {self.method!r}")
        tensors = load_file(str(path))
        in_file = len({k.split("/")[0] for k in tensors if k.startswith("client.")})
        for what, n in (("n_clients", n_clients), ("this algorithm's clients", len(self.clients) or None)):
            if n is not None and n != in_file:
                raise ValueError(f"{path} holds {in_file} clients, {what} is {n}")
        if not self.clients:
            self._setup([ClientData((torch.zeros(1), torch.zeros(1, dtype=torch.int64)))] * in_file)
        for name, m in self.models().items():
            prefix = f"{name}/"
            sd = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            m.load_state_dict(sd)
        self._loaded_weights = True
