"""The peers of FSL-SAGE we implement in process, on the same model split and byte ledger: CSE-FSL (Mu & Shen
2023), SplitFed-v1 and SplitFed-v2 (Thapa et al. 2022) and FedAvg (McMahan et al. 2017), the methods the paper
compares against.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fsl_sage.aggregate import weighted_average
from fsl_sage.comm import nbytes
from fsl_sage.data import ClientData, batch_key
from fsl_sage.runner import FederatedSplitAlgorithm, local_batches, make_optimizer, server_step
from fsl_sage.sage import run_client_round

__all__ = ["CSEFSL", "SplitFedV1", "SplitFedV2", "FedAvg"]


class CSEFSL(FederatedSplitAlgorithm):
    """CSE-FSL (Mu & Shen 2023): clients train x_c and their aux on the aux's local loss; the server steps on every
    q-th upload; client and aux models are averaged every round."""

    method = "cse_fsl"
    needs_aux = True

    def _setup(self, datasets: Sequence[ClientData]) -> None:
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

    def _run_round(self, t: int, datasets: Sequence[ClientData]) -> int:
        for i in range(len(self.clients)):

            def on_upload(k: int, z: torch.Tensor, y: torch.Tensor, i: int = i) -> None:
                self.ledger.up(t, i, "smashed", self._upload_bytes(z))
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
                self.device,
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
) -> torch.Tensor:
    """One SplitFed iteration: the server steps on the uploaded z and returns the batch-mean cut gradient (to the
    client, which steps). Returns z (detached), the payload of both directions."""
    z = client(xb)
    zs = z.detach().requires_grad_(True)
    s_opt.zero_grad(set_to_none=True)
    F.nll_loss(server(zs), yb).backward()
    s_opt.step()
    c_opt.zero_grad(set_to_none=True)
    z.backward(zs.grad)
    c_opt.step()
    return zs.detach()


class SplitFedV2(FederatedSplitAlgorithm):
    """SplitFed-v2 ("single-server"): one shared server model, clients in turn, true gradient every batch."""

    method = "splitfed_v2"

    def _setup(self, datasets: Sequence[ClientData]) -> None:
        super()._setup(datasets)
        self.server_opt = make_optimizer(self.server.parameters(), self.config)

    def _server_for(self, i: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        return self.server, self.server_opt

    def _run_round(self, t: int, datasets: Sequence[ClientData]) -> int:
        for i, d in enumerate(datasets):
            server, s_opt = self._server_for(i)
            self.clients[i].train()
            server.train()
            for k, e, idx in local_batches(len(d), self.config, i, t):
                xb, yb = d.batch(idx, batch_key(self.config.seed, i, t, e, k), self.device)
                z = _splitfed_step(self.clients[i], self.client_opts[i], server, s_opt, xb, yb)
                self.ledger.up(t, i, "smashed", self._upload_bytes(z))
                self.server_steps += 1
                self.ledger.down(t, i, "gradient", z.numel() * z.element_size())  # ∂ℓ/∂z has z's dtype
            self.ledger.up(t, i, "client", nbytes(self.clients[i]))
        return 0


class SplitFedV1(SplitFedV2):
    """SplitFed-v1 ("multi-server"): one server copy per client, averaged (on the server side) every round."""

    method = "splitfed_v1"

    def _setup(self, datasets: Sequence[ClientData]) -> None:
        FederatedSplitAlgorithm._setup(self, datasets)
        self.servers = [copy.deepcopy(self.server) for _ in datasets]
        self.server_opts = [make_optimizer(s.parameters(), self.config) for s in self.servers]

    def _server_for(self, i: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        return self.servers[i], self.server_opts[i]

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        out = FederatedSplitAlgorithm.optimizers(self)
        out.update({f"server_opt.{i}": o for i, o in enumerate(getattr(self, "server_opts", []))})
        return out

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

    def _setup(self, datasets: Sequence[ClientData]) -> None:
        n = len(datasets)
        self.clients = [copy.deepcopy(self.client_template) for _ in range(n)]
        self.servers = [copy.deepcopy(self.server) for _ in range(n)]
        self.client_opts = [
            make_optimizer(list(c.parameters()) + list(s.parameters()), self.config)
            for c, s in zip(self.clients, self.servers)
        ]

    def _run_round(self, t: int, datasets: Sequence[ClientData]) -> int:
        for i, d in enumerate(datasets):
            c, s, opt = self.clients[i], self.servers[i], self.client_opts[i]
            c.train()
            s.train()
            for k, e, idx in local_batches(len(d), self.config, i, t):
                xb, yb = d.batch(idx, batch_key(self.config.seed, i, t, e, k), self.device)
                opt.zero_grad(set_to_none=True)
                F.nll_loss(s(c(xb)), yb).backward()
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
