"""BSLoRA modules: the shared pairs, the per-module samplers/gates, and the wrapped linear layer."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from bslora import functional as bsF
from bslora.config import BSLoRAConfig

__all__ = ["SharedPair", "IntraShare", "InterShare", "KronSampler", "GateVectors", "BSLoRALinear", "BASE_ADAPTER"]

BASE_ADAPTER = "__base__"
"""Row name in a mixed batch that means "no adapter"."""


def _init_A(weight: torch.Tensor, cfg: BSLoRAConfig, rank: int) -> None:
    if cfg.init_lora_weights == "gaussian":
        nn.init.normal_(weight, std=1.0 / (cfg.r_local or rank))
    else:
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))


class SharedPair(nn.Module):
    """One shared low-rank pair ``A (r, n_in)``, ``B (n_out, r)``; ``B`` starts at 0 so ``ΔW = 0`` at step 0.

    It is registered once (in :class:`~bslora.model.BSLoRAModel`) and referenced by every module that uses it, so
    the optimizer, DDP and the checkpoint see each tensor once.
    """

    def __init__(self, rank: int, n_in: int, n_out: int, *, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.rank, self.n_in, self.n_out = rank, n_in, n_out
        self.A = nn.Parameter(torch.empty(rank, n_in, device=device, dtype=dtype))
        self.B = nn.Parameter(torch.zeros(n_out, rank, device=device, dtype=dtype))
        self._cache: tuple | None = None

    def reset_parameters(self, cfg: BSLoRAConfig) -> None:
        """A as configured (kaiming / gaussian), B = 0."""
        with torch.no_grad():
            _init_A(self.A, cfg, self.rank)
            self.B.zero_()

    def project_slice(self, x: torch.Tensor, start: int, reuse: bool) -> torch.Tensor:
        """``x @ A[:, start:start+in].T``; with ``reuse`` the result is kept for the next caller with the same
        ``x`` object and window (q, k and v read the same hidden state: one projection instead of three)."""
        n = x.shape[-1]
        if reuse:
            key = (start, n, torch.is_grad_enabled(), self.A._version, x.dtype)
            c = self._cache
            if c is not None and c[0] is x and c[1] == key:
                return c[2]
        out = x @ self.A[:, start : start + n].t()
        self._cache = (x, key, out) if reuse else None
        return out

    @staticmethod
    def project_slices(pairs: list[SharedPair], x: torch.Tensor, start: int, reuse: bool) -> torch.Tensor:
        """``x @ [A_1; A_2; ...][:, start:start+in].T`` for pairs of equal ``n_in`` (the intra and inter pairs of
        slice mode): one matmul for both shared branches, kept on the first pair for the next caller with the same
        ``x`` object and window when ``reuse`` (q, k and v read the same hidden state)."""
        if len(pairs) == 1:
            return pairs[0].project_slice(x, start, reuse)
        head = pairs[0]
        n = x.shape[-1]
        if reuse:
            key = (start, n, torch.is_grad_enabled(), x.dtype, tuple((id(p), p.A._version) for p in pairs))
            c = head._cache
            if c is not None and c[0] is x and c[1] == key:
                return c[2]
        A = torch.cat([p.A[:, start : start + n] for p in pairs], 0)
        out = x @ A.t()
        head._cache = (x, key, out) if reuse else None
        return out

    def clear_cache(self) -> None:
        """Drop the kept projection (called after every model forward)."""
        self._cache = None

    def extra_repr(self) -> str:
        return f"rank={self.rank}, n_in={self.n_in}, n_out={self.n_out}"


class IntraShare(SharedPair):
    """The pair shared by every target of one decoder layer."""


class InterShare(SharedPair):
    """The pair shared by every target of the whole model."""


class KronSampler(nn.Module):
    """KE samplers of one module for one shared branch: ``a (1, in/S)``, ``b (out/S, 1)``; ``A_eff = a ⊗ A``."""

    def __init__(self, in_features: int, out_features: int, S: int, *, device: Any = None, dtype: Any = None):
        super().__init__()
        self.a = nn.Parameter(torch.empty(1, in_features // S, device=device, dtype=dtype))
        self.b = nn.Parameter(torch.empty(out_features // S, 1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``kaiming_uniform_(a=sqrt(5))`` on the weight shapes: a ~ U(±1/sqrt(in/S)), b ~ U(±1)."""
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.b, a=math.sqrt(5))


class GateVectors(nn.Module):
    """GT gates of one module for one shared branch: ``u_in (1, in)``, ``v_in (G, 1)``, ``u_out (1, G)``,
    ``v_out (out, 1)`` (the official bias-free linear maps' weights)."""

    def __init__(self, in_features: int, out_features: int, G: int, *, device: Any = None, dtype: Any = None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.u_in = nn.Parameter(torch.empty(1, in_features, **kw))
        self.v_in = nn.Parameter(torch.empty(G, 1, **kw))
        self.u_out = nn.Parameter(torch.empty(1, G, **kw))
        self.v_out = nn.Parameter(torch.empty(out_features, 1, **kw))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``kaiming_uniform_(a=sqrt(5))`` on each weight shape."""
        for p in (self.u_in, self.v_in, self.u_out, self.v_out):
            nn.init.kaiming_uniform_(p, a=math.sqrt(5))

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.u_in, self.v_in, self.u_out, self.v_out


class BSLoRALinear(nn.Module):
    """A frozen ``nn.Linear`` (or transformers ``Conv1D`` with ``fan_in_fan_out``) plus BSLoRA branches per adapter.

    ``y = base(x) + s * (B_loc A_loc x + T_m(intra) x + T_m(inter) x)``. The local factors live here (``lora_A``,
    ``lora_B``, peft's layout); the shared pairs are referenced, not owned; KE samplers / GT gates live here.
    """

    def __init__(self, base_layer: nn.Module, name: str = "", layer_idx: int | None = None) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.module_name = name
        self.layer_idx = layer_idx
        self.fan_in_fan_out = not isinstance(base_layer, nn.Linear)
        w = base_layer.weight
        if self.fan_in_fan_out:
            self.in_features, self.out_features = w.shape[0], w.shape[1]
        else:
            self.in_features, self.out_features = base_layer.in_features, base_layer.out_features
        self.lora_A = nn.ModuleDict()
        self.lora_B = nn.ModuleDict()
        self.lora_dropout = nn.ModuleDict()
        self.intra_adapt = nn.ModuleDict()  # KronSampler / GateVectors for the intra branch
        self.inter_adapt = nn.ModuleDict()
        self.configs: dict[str, BSLoRAConfig] = {}
        self._shared: dict[str, tuple[SharedPair | None, SharedPair | None]] = {}
        self.active_adapter: str | None = None
        self.disable_adapters = False
        self.merged_adapters: list[str] = []
        self._mixed_rows: list[str] | None = None  # set by BSLoRAModel.forward(adapter_names=...)
        self._stack_cache: tuple | None = None  # (key, (A_stack, B_stack)) of the last no-grad mixed batch
        self.kernel_impl: str = "auto"  # mixed batches: see BSLoRAModel.set_kernel_impl

    # ------------------------------------------------------------------ adapters
    @property
    def weight(self) -> torch.Tensor:
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return getattr(self.base_layer, "bias", None)

    @property
    def merged(self) -> bool:
        return bool(self.merged_adapters)

    def update_layer(
        self, adapter_name: str, cfg: BSLoRAConfig, intra: SharedPair | None, inter: SharedPair | None
    ) -> None:
        """Add adapter ``adapter_name``: local factors, dropout, samplers/gates, and references to the shared pairs."""
        w = self.base_layer.weight
        kw = {"device": w.device, "dtype": w.dtype if w.dtype.is_floating_point else torch.float32}
        if cfg.r_local > 0:
            self.lora_A[adapter_name] = nn.Linear(self.in_features, cfg.r_local, bias=False, **kw)
            self.lora_B[adapter_name] = nn.Linear(cfg.r_local, self.out_features, bias=False, **kw)
            with torch.no_grad():
                _init_A(self.lora_A[adapter_name].weight, cfg, cfg.r_local)
                self.lora_B[adapter_name].weight.zero_()
        self.lora_dropout[adapter_name] = nn.Dropout(cfg.lora_dropout) if cfg.lora_dropout > 0 else nn.Identity()
        for pair, store in ((intra, self.intra_adapt), (inter, self.inter_adapt)):
            if pair is None:
                continue
            if cfg.share_mode == "kron":
                store[adapter_name] = KronSampler(self.in_features, self.out_features, cfg.kron_share_size, **kw)
            elif cfg.share_mode == "gate":
                store[adapter_name] = GateVectors(self.in_features, self.out_features, cfg.gate_share_size, **kw)
        self.configs[adapter_name] = cfg
        self._shared[adapter_name] = (intra, inter)
        self._stack_cache = None
        if self.active_adapter is None:
            self.active_adapter = adapter_name

    def delete_adapter(self, adapter_name: str) -> None:
        """Remove every tensor of ``adapter_name`` from this layer."""
        if adapter_name in self.merged_adapters:
            raise ValueError(f"adapter {adapter_name!r} is merged into {self.module_name}; unmerge it first")
        for store in (self.lora_A, self.lora_B, self.lora_dropout, self.intra_adapt, self.inter_adapt):
            if adapter_name in store:
                del store[adapter_name]
        self.configs.pop(adapter_name, None)
        self._shared.pop(adapter_name, None)
        self._stack_cache = None
        if self.active_adapter == adapter_name:
            self.active_adapter = next(iter(self.configs), None)

    # ------------------------------------------------------------------ the math
    def _branches(self, adapter_name: str):
        """Yield ``(pair, sampler_or_gates)`` for the intra and inter branches that exist."""
        intra, inter = self._shared[adapter_name]
        if intra is not None:
            yield intra, self.intra_adapt[adapter_name] if adapter_name in self.intra_adapt else None  # noqa: SIM401
        if inter is not None:
            yield inter, self.inter_adapt[adapter_name] if adapter_name in self.inter_adapt else None  # noqa: SIM401

    def get_delta_weight(self, adapter_name: str) -> torch.Tensor:
        """The scaled ``out x in`` update ``s (B_loc A_loc + T_m(intra) + T_m(inter))`` (:mod:`bslora.functional`)."""
        cfg = self.configs[adapter_name]
        delta = torch.zeros(self.out_features, self.in_features, device=self.weight.device, dtype=self._dtype())
        if cfg.r_local > 0:
            delta = delta + self.lora_B[adapter_name].weight @ self.lora_A[adapter_name].weight
        for pair, extra in self._branches(adapter_name):
            if cfg.share_mode == "slice":
                delta = delta + bsF.slice_delta(pair.A, pair.B, self.in_features, self.out_features, cfg.slice_align)
            elif cfg.share_mode == "kron":
                delta = delta + bsF.kron_delta(pair.A, pair.B, extra.a, extra.b)
            else:
                delta = delta + bsF.gate_delta(pair.A, pair.B, *extra.tensors())
        return cfg.scale * delta

    def effective_factors(self, adapter_name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A_eff (R, in), B_eff (out, R))`` with ``s B_eff A_eff = get_delta_weight``: the exact plain-LoRA form.

        ``R = r_local + r_intra + r_inter`` (slice, kron) or ``r_local + 2`` (gate). The scale is folded into B.
        """
        cfg = self.configs[adapter_name]
        As: list[torch.Tensor] = []
        Bs: list[torch.Tensor] = []
        if cfg.r_local > 0:
            As.append(self.lora_A[adapter_name].weight)
            Bs.append(self.lora_B[adapter_name].weight)
        for pair, extra in self._branches(adapter_name):
            if cfg.share_mode == "slice":
                a, b = bsF.slice_factors(pair.A, pair.B, self.in_features, self.out_features, cfg.slice_align)
            elif cfg.share_mode == "kron":
                a, b = bsF.kron_factors(pair.A, pair.B, extra.a, extra.b)
            else:
                a, b = bsF.gate_factors(pair.A, pair.B, *extra.tensors())
            As.append(a)
            Bs.append(b)
        return torch.cat(As, 0), cfg.scale * torch.cat(Bs, 1)

    def _dtype(self) -> torch.dtype:
        for name in self.configs:
            for store in (self.lora_A, self.intra_adapt, self.inter_adapt):
                if name in store:
                    return next(store[name].parameters()).dtype
            pair = next((p for p in self._shared[name] if p is not None), None)
            if pair is not None:
                return pair.A.dtype
        return self.weight.dtype

    def adapter_delta(self, x: torch.Tensor, adapter_name: str) -> torch.Tensor:
        """The scaled adapter output for input ``x`` (``(..., in)`` -> ``(..., out)``), never forming ``out x in``."""
        cfg = self.configs[adapter_name]
        drop = self.lora_dropout[adapter_name]
        dropping = self.training and cfg.lora_dropout > 0
        xd = drop(x)
        out: torch.Tensor | None = None

        def add(t: torch.Tensor) -> None:
            nonlocal out
            out = t if out is None else out + t

        if cfg.r_local > 0:
            add(self.lora_B[adapter_name](self.lora_A[adapter_name](xd)))
        if cfg.share_mode == "slice":
            pairs = [p for p in self._shared[adapter_name] if p is not None]
            if pairs:  # intra and inter have the same (n_out, n_in) here: one A-matmul and one B-matmul for both
                c = bsF.slice_offset(pairs[0].n_in, self.in_features, cfg.slice_align)
                co = bsF.slice_offset(pairs[0].n_out, self.out_features, cfg.slice_align)
                # without dropout every module reading the same x shares one A-projection (q/k/v read the same x)
                z = SharedPair.project_slices(pairs, xd, c, reuse=not dropping)
                bs = [p.B[co : co + self.out_features] for p in pairs]
                add(z @ (bs[0] if len(bs) == 1 else torch.cat(bs, 1)).t())
            assert out is not None
            return cfg.scale * out
        for pair, extra in self._branches(adapter_name):
            if cfg.share_mode == "kron":
                add(bsF.kron_apply(xd if cfg.kron_shared_dropout else x, pair.A, pair.B, extra.a, extra.b))
            else:
                add(bsF.gate_apply(xd, pair.A, pair.B, *extra.tensors()))
        assert out is not None
        return cfg.scale * out

    def _adapter_tensors(self, adapter_name: str) -> list[torch.Tensor]:
        ts = [p for store in (self.lora_A, self.lora_B, self.intra_adapt, self.inter_adapt) if adapter_name in store
              for p in store[adapter_name].parameters()]  # fmt: skip
        for pair in self._shared[adapter_name]:
            if pair is not None:
                ts += [pair.A, pair.B]
        return ts

    def _stacked_factors(self, names: list[str], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact factors of ``names`` zero-padded to one rank and stacked (slot ``len(names)`` = ``"__base__"``).

        Under ``no_grad`` (serving) the stacks are kept until a tensor of those adapters changes (in-place updates
        bump ``_version``), so repeated mixed batches do not rebuild them."""
        key = None
        if not torch.is_grad_enabled():
            key = (tuple(names), x.device, tuple((id(t), t._version) for n in names for t in self._adapter_tensors(n)))
            if self._stack_cache is not None and self._stack_cache[0] == key:
                return self._stack_cache[1]
        factors = [self.effective_factors(n) for n in names]
        R = max(a.shape[0] for a, _ in factors)
        dt = factors[0][0].dtype
        A_stack = x.new_zeros(len(names) + 1, R, self.in_features, dtype=dt)
        B_stack = x.new_zeros(len(names) + 1, self.out_features, R, dtype=dt)
        for i, (a, b) in enumerate(factors):
            A_stack[i, : a.shape[0]] = a
            B_stack[i, :, : b.shape[1]] = b
        self._stack_cache = (key, (A_stack, B_stack)) if key is not None else None
        return A_stack, B_stack

    def _mixed_forward(self, x: torch.Tensor, y: torch.Tensor, rows: list[str]) -> torch.Tensor:
        """Each row of the batch with its own adapter: one gathered ``bmm`` pair over the stacked exact factors."""
        if x.shape[0] != len(rows):
            raise ValueError(
                f"adapter_names has {len(rows)} entries but the batch at {self.module_name} has {x.shape[0]} rows"
            )
        names = [n for n in dict.fromkeys(rows) if n != BASE_ADAPTER]
        if not names:
            return y
        A_stack, B_stack = self._stacked_factors(names, x)
        dt = A_stack.dtype
        slot = {n: i for i, n in enumerate(names)}
        idx = torch.tensor([slot.get(n, len(names)) for n in rows], device=x.device)
        x3 = x.reshape(x.shape[0], -1, self.in_features).to(dt)
        if self.kernel_impl != "auto" or x.is_cuda:
            # the shared segmented-matmul kernel: one shrink and one expand pass over the token rows grouped by
            # adapter, no (batch, R, in) gather of the stacks; base rows get group -1 (no adapter term)
            from icml25_shared.kernels import grouped_lora

            group = torch.where(idx == len(names), -1, idx).repeat_interleave(x3.shape[1])
            d = grouped_lora(
                x3.reshape(-1, self.in_features),
                A_stack.transpose(1, 2),
                B_stack.transpose(1, 2),
                group,
                impl=self.kernel_impl,
            )
            return y + d.reshape(y.shape).to(y.dtype)
        z = torch.bmm(x3, A_stack[idx].transpose(1, 2))  # (batch, tokens, R)
        d = torch.bmm(z, B_stack[idx].transpose(1, 2))  # (batch, tokens, out)
        return y + d.reshape(y.shape).to(y.dtype)

    def _base_forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        base = self.base_layer
        # a plain nn.Linear without hooks: call the kernel directly (merged inference costs exactly the base's)
        if type(base) is nn.Linear and not (args or kwargs or base._forward_hooks or base._forward_pre_hooks):
            return torch.nn.functional.linear(x, base.weight, base.bias)
        return base(x, *args, **kwargs)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.disable_adapters or self.merged_adapters:
            if self._mixed_rows is not None and self.merged_adapters:
                raise ValueError("forward with adapter_names is not possible while an adapter is merged; unmerge first")
            return self._base_forward(x, *args, **kwargs)
        y = self._base_forward(x, *args, **kwargs)
        if self._mixed_rows is not None:
            return self._mixed_forward(x, y, self._mixed_rows)
        name = self.active_adapter
        if name is None or name not in self.configs:
            return y
        d = self.adapter_delta(x.to(self._dtype()), name)
        return y + d.to(y.dtype)

    # ------------------------------------------------------------------ merge
    @torch.no_grad()
    def merge(self, adapter_name: str) -> None:
        """``W <- W0 + s ΔW`` for ``adapter_name`` (idempotent per adapter)."""
        if adapter_name in self.merged_adapters:
            return
        delta = self.get_delta_weight(adapter_name).to(self.weight.dtype)
        self.weight.data += delta.t() if self.fan_in_fan_out else delta
        self.merged_adapters.append(adapter_name)

    @torch.no_grad()
    def unmerge(self) -> None:
        """Subtract every merged adapter's update, last merged first."""
        while self.merged_adapters:
            name = self.merged_adapters.pop()
            delta = self.get_delta_weight(name).to(self.weight.dtype)
            self.weight.data -= delta.t() if self.fan_in_fan_out else delta

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, layer_idx={self.layer_idx}"
