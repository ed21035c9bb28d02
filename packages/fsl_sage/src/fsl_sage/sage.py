"""FSL-SAGE itself: the client's local round (Alg. 1) and the in-process algorithm whose S-server steps on every
q-th upload and aligns the aux models on the schedule of :func:`fsl_sage.align.is_alignment_round` (Alg. 3).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fsl_sage.aggregate import weighted_average
from fsl_sage.align import AuxAdamState, RingBuffer, align_client, is_alignment_round
from fsl_sage.comm import nbytes
from fsl_sage.config import FSLConfig
from fsl_sage.data import ClientData, as_client_data, batch_key
from fsl_sage.models import GradScalarAux
from fsl_sage.runner import Dataset, FederatedSplitAlgorithm, local_batches, make_optimizer, server_step

__all__ = ["FSLSAGE", "run_client_round"]


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
    device: torch.device | None = None,
) -> int:
    """The client side of one FSL-SAGE (Alg. 1) or CSE-FSL round; returns the number of local iterations.

    ``on_upload(k, z, y)`` is called when k % q == 0 with the detached smashed activations, *before* the
    client's own step (in process: the server steps and, eagerly, aligns; on Flower: the upload is queued).
    FSL-SAGE: ĝ = aux estimate / B, back-propagated through x_c. CSE-FSL: the aux's local NLL, back-propagated
    through aux and x_c (``opt`` then holds both).
    """
    data = as_client_data(data, name=f"client {client_id}")
    client.train()
    iters = 0
    for k, e, idx in local_batches(len(data), config, client_id, round):
        xb, yb = data.batch(idx, batch_key(config.seed, client_id, round, e, k), device)
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


class FSLSAGE(FederatedSplitAlgorithm):
    """FSL-SAGE: clients train on their aligned aux model's cut-gradient estimate; the server steps on every q-th
    upload and, every l rounds, aligns each client's aux to its true cut gradients (Alg. 1-3).

    ``mode="eager"`` (the official code) aligns client i at k = 0 of an alignment round, right after that
    iteration's server step; ``mode="lazy"`` aligns every client at the end of the round and sends the aux with
    the next round's message, as the Flower strategy must."""

    method = "fsl_sage"
    needs_aux = True

    def _setup(self, datasets: Sequence[ClientData]) -> None:
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

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        out = super().optimizers()
        out.update({f"warm_opt.{i}": o for i, o in enumerate(getattr(self, "_warm_opts", []))})
        return out

    def _extra_state(self) -> dict:
        return {
            "buffers": [b.state_dict() for b in self.buffers],
            "aux_states": [s.state_dict() for s in self.aux_states],
            "pending": list(self.pending),
            "align_log": [dict(a) for a in self.align_log],
        }

    def _load_extra_state(self, state: dict) -> None:
        for b, sd in zip(self.buffers, state["buffers"], strict=True):
            b.load_state_dict(sd)
        for s, sd in zip(self.aux_states, state["aux_states"], strict=True):
            s.load_state_dict(sd)
        self.pending = [bool(p) for p in state["pending"]]
        self.align_log = [dict(a) for a in state["align_log"]]

    def _align(self, i: int, t: int) -> None:
        self.align_log.append(
            align_client(self.auxes[i], self.aux_states[i], self.buffers[i], self.server, self.config, i, t)
        )

    def _run_round(self, t: int, datasets: Sequence[ClientData]) -> int:
        cfg = self.config
        warm = t < cfg.warm_start_rounds
        n_align = 0
        for i in range(len(self.clients)):
            if self.pending[i]:  # lazy: the aux aligned at the end of round t-1 travels with this round's message
                self.ledger.down(t, i, "aux", nbytes(self.auxes[i]))
                self.pending[i] = False

            def on_upload(k: int, z: torch.Tensor, y: torch.Tensor, i: int = i) -> None:
                nonlocal n_align
                self.ledger.up(t, i, "smashed", self._upload_bytes(z))
                server_step(self.server, self.server_opt, z, y)
                self.server_steps += 1
                self.buffers[i].push(z, y)
                if cfg.mode == "eager" and k == 0 and is_alignment_round(t, cfg, lazy=False):
                    self._align(i, t)
                    n_align += 1
                    self.ledger.down(t, i, "aux", nbytes(self.auxes[i]))

            if warm:
                run_client_round(
                    "cse_fsl", self.clients[i], self._warm_opts[i], self.auxes[i], datasets[i], cfg, i, t, on_upload,
                    self.device,
                )  # fmt: skip
                self.ledger.up(t, i, "aux", nbytes(self.auxes[i]))
            else:
                run_client_round(
                    "fsl_sage", self.clients[i], self.client_opts[i], self.auxes[i], datasets[i], cfg, i, t, on_upload,
                    self.device,
                )  # fmt: skip
            self.ledger.up(t, i, "client", nbytes(self.clients[i]))
        if cfg.mode == "lazy" and is_alignment_round(t, cfg, lazy=True):
            for i in range(len(self.clients)):
                self._align(i, t)
                n_align += 1
                self.pending[i] = True
        return n_align

    def _catch_up(self, start: int, eval_data: Dataset | None) -> None:
        # lazy: the checkpointed run skipped the end-of-round alignment of its last round (nothing followed it);
        # with more rounds now, that round is no longer the last. Eager aligns inside rounds: nothing to do.
        t, cfg = start - 1, self.config
        if cfg.mode != "lazy" or t < 0:
            return
        if not is_alignment_round(t, cfg, lazy=True) or is_alignment_round(
            t, cfg, lazy=True, rounds=self._resumed_rounds
        ):
            return
        for i in range(len(self.clients)):  # as at the end of round t (aggregation leaves aux, buffer, server)
            self._align(i, t)
            self.pending[i] = True
        if self.history.records and self.history.records[-1].round == t:
            rec = self.history.records[-1]
            rec.alignments += len(self.clients)
            rec.grad_nmse, rec.grad_cosine = self._agreement(eval_data)

    def _aggregate(self, t: int) -> None:
        super()._aggregate(t)
        if t < self.config.warm_start_rounds:
            avg = weighted_average([a.state_dict() for a in self.auxes], self.weights)
            for i, a in enumerate(self.auxes):
                a.load_state_dict(avg)
                self.ledger.down(t, i, "aux", nbytes(avg))

    def _estimates(self, z: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [a.estimate(z, y) for a in self.auxes]
