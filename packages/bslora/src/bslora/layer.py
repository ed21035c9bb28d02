"""BSLoRA modules: the shared pairs, the per-module samplers/gates, and the wrapped linear layer."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn

from bslora import functional as bsF
from bslora.config import BSLoRAConfig

__all__ = [
    "SharedPair",
    "IntraShare",
    "InterShare",
    "KronSampler",
    "GateVectors",
    "BSLoRALinear",
    "BASE_ADAPTER",
    "MixedBatch",
    "RowPlan",
]

BASE_ADAPTER = "__base__"
"""Row name in a mixed batch that means "no adapter"."""


class RowPlan:
    """Rows of a mixed batch served by one family of adapters ``names`` (equal factor shapes).

    ``group``: ``(rows,)`` slot of each row in ``names`` or -1 (the segmented matmul's ids); ``sel``: the indices of
    the family's rows (``None`` when it serves every row); ``slots``: the slot of each selected row."""

    def __init__(self, rows: list[str], names: tuple[str, ...], device: torch.device) -> None:
        slot = {n: i for i, n in enumerate(names)}
        ids = [slot.get(r, -1) for r in rows]
        sel = [i for i, g in enumerate(ids) if g >= 0]
        self.slots = [ids[i] for i in sel]
        self.group = torch.tensor(ids, device=device)
        self.sel = None if len(sel) == len(rows) else torch.tensor(sel, device=device)
        self._slots = torch.tensor(self.slots, device=device)

    def per_row(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """``(selected rows, *shape)``: each selected row's tensor (one per adapter of the family), gathered."""
        if len(self.slots) <= len(tensors):
            return torch.stack([tensors[g] for g in self.slots])
        return torch.stack(tensors).index_select(0, self._slots)


class MixedBatch:
    """State of one mixed-adapter forward (``forward(adapter_names=...)``), shared by every wrapped module and
    dropped when the forward returns: the row plans, and the per-forward stacks and shared projections (at most one
    of each kind alive at a time: a new layer or input replaces the previous one)."""

    def __init__(self, rows: list[str]) -> None:
        self.rows = rows
        self.unique = tuple(dict.fromkeys(rows))
        self._plans: dict[tuple, RowPlan] = {}
        self._kept: dict[tuple, tuple[Any, Any, torch.Tensor]] = {}
        self._refs: dict[tuple, Any] = {}  # references to existing parameters only (no new tensor memory)

    def plan(self, names: tuple[str, ...], device: torch.device) -> RowPlan:
        key = (names, device)
        if key not in self._plans:
            self._plans[key] = RowPlan(self.rows, names, device)
        return self._plans[key]

    def reuse(self, key: tuple, x: Any, layer: Any, fn: Any) -> torch.Tensor:
        """``fn()``, or the value kept under ``key`` when it was computed for the same input object and layer."""
        hit = self._kept.get(key)
        if hit is not None and hit[0] is x and hit[1] == layer:
            return hit[2]
        out = fn()
        self._kept[key] = (x, layer, out)
        return out

    def refs(self, key: tuple, build: Any) -> Any:
        """``build()`` once per call (one forward, or a whole ``generate``): lists of references to the adapters'
        own parameters, looked up by name once instead of at every module call of every decoding step."""
        out = self._refs.get(key)
        if out is None:
            out = self._refs[key] = build()
        return out

    def nbytes(self) -> int:
        """Bytes of the tensors kept right now (the per-forward stacks and projections)."""
        return sum(v[2].numel() * v[2].element_size() for v in self._kept.values())


def _linear(m: nn.Module) -> nn.Linear:
    """``m`` as the ``nn.Linear`` it is (a ``ModuleDict`` entry of ``lora_A`` / ``lora_B``)."""
    assert isinstance(m, nn.Linear)
    return m


def _pair(p: SharedPair | None) -> SharedPair:
    """A shared pair known to exist (the family has the branch)."""
    assert p is not None
    return p


def _kron(m: nn.Module | None) -> KronSampler:
    """The KE samplers of a module's branch."""
    assert isinstance(m, KronSampler)
    return m


def _gate(m: nn.Module | None) -> GateVectors:
    """The GT gates of a module's branch."""
    assert isinstance(m, GateVectors)
    return m


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
        self.in_features: int
        self.out_features: int
        if isinstance(base_layer, nn.Linear):
            self.in_features, self.out_features = base_layer.in_features, base_layer.out_features
        else:  # transformers Conv1D: weight (in, out)
            w = cast(torch.Tensor, base_layer.weight)
            self.in_features, self.out_features = int(w.shape[0]), int(w.shape[1])
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
        self._mixed: MixedBatch | None = None  # set by BSLoRAModel.forward(adapter_names=...) for one forward
        self._family_memo: dict[tuple[str, ...], list[tuple[str, ...]]] = {}  # names -> families (no tensors)
        self.kernel_impl: str = "auto"  # mixed batches: see BSLoRAModel.set_kernel_impl

    # ------------------------------------------------------------------ adapters
    @property
    def weight(self) -> torch.Tensor:
        return cast(torch.Tensor, self.base_layer.weight)

    @property
    def bias(self) -> torch.Tensor | None:
        return getattr(self.base_layer, "bias", None)

    @property
    def merged(self) -> bool:
        return bool(self.merged_adapters)

    def update_layer(
        self,
        adapter_name: str,
        cfg: BSLoRAConfig,
        intra: SharedPair | None,
        inter: SharedPair | None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """Add adapter ``adapter_name``: local factors, dropout, samplers/gates, and references to the shared pairs.

        ``dtype``: of the adapter's tensors (default: the base weight's floating dtype, else float32)."""
        w = self.weight
        if dtype is None:
            dtype = w.dtype if w.dtype.is_floating_point else torch.float32
        kw = {"device": w.device, "dtype": dtype}
        if cfg.r_local > 0:
            lora_A = nn.Linear(self.in_features, cfg.r_local, bias=False, **kw)
            lora_B = nn.Linear(cfg.r_local, self.out_features, bias=False, **kw)
            with torch.no_grad():
                _init_A(lora_A.weight, cfg, cfg.r_local)
                lora_B.weight.zero_()
            self.lora_A[adapter_name], self.lora_B[adapter_name] = lora_A, lora_B
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
        self._family_memo.clear()
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
        self._family_memo.clear()
        if self.active_adapter == adapter_name:
            self.active_adapter = next(iter(self.configs), None)

    # ------------------------------------------------------------------ the math
    def _branches(self, adapter_name: str) -> Iterator[tuple[SharedPair, nn.Module | None]]:
        """Yield ``(pair, sampler_or_gates)`` for the intra and inter branches that exist."""
        intra, inter = self._shared[adapter_name]
        if intra is not None:
            yield intra, self.intra_adapt[adapter_name] if adapter_name in self.intra_adapt else None  # noqa: SIM401
        if inter is not None:
            yield inter, self.inter_adapt[adapter_name] if adapter_name in self.inter_adapt else None  # noqa: SIM401

    def get_delta_weight(self, adapter_name: str) -> torch.Tensor:
        """The scaled ``out x in`` update ``s (B_loc A_loc + T_m(intra) + T_m(inter))`` (:mod:`bslora.functional`)."""
        cfg = self.configs[adapter_name]
        dt = self._adapter_dtype(adapter_name)
        delta = torch.zeros(self.out_features, self.in_features, device=self.weight.device, dtype=dt)
        if cfg.r_local > 0:
            delta = delta + _linear(self.lora_B[adapter_name]).weight @ _linear(self.lora_A[adapter_name]).weight
        for pair, extra in self._branches(adapter_name):
            if cfg.share_mode == "slice":
                delta = delta + bsF.slice_delta(pair.A, pair.B, self.in_features, self.out_features, cfg.slice_align)
            elif cfg.share_mode == "kron":
                delta = delta + bsF.kron_delta(pair.A, pair.B, _kron(extra).a, _kron(extra).b)
            else:
                delta = delta + bsF.gate_delta(pair.A, pair.B, *_gate(extra).tensors())
        return cfg.scale * delta

    def effective_factors(self, adapter_name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A_eff (R, in), B_eff (out, R))`` with ``s B_eff A_eff = get_delta_weight``: the exact plain-LoRA form.

        ``R = r_local + r_intra + r_inter`` (slice, kron) or ``r_local + 2`` (gate). The scale is folded into B.
        """
        cfg = self.configs[adapter_name]
        As: list[torch.Tensor] = []
        Bs: list[torch.Tensor] = []
        if cfg.r_local > 0:
            As.append(_linear(self.lora_A[adapter_name]).weight)
            Bs.append(_linear(self.lora_B[adapter_name]).weight)
        for pair, extra in self._branches(adapter_name):
            if cfg.share_mode == "slice":
                a, b = bsF.slice_factors(pair.A, pair.B, self.in_features, self.out_features, cfg.slice_align)
            elif cfg.share_mode == "kron":
                a, b = bsF.kron_factors(pair.A, pair.B, _kron(extra).a, _kron(extra).b)
            else:
                a, b = bsF.gate_factors(pair.A, pair.B, *_gate(extra).tensors())
            As.append(a)
            Bs.append(b)
        return torch.cat(As, 0), cfg.scale * torch.cat(Bs, 1)

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
                add(
                    bsF.kron_apply(xd if cfg.kron_shared_dropout else x, pair.A, pair.B, _kron(extra).a, _kron(extra).b)
                )
            else:
                add(bsF.gate_apply(xd, pair.A, pair.B, *_gate(extra).tensors()))
        assert out is not None
        return cfg.scale * out

    # ------------------------------------------------------------------ mixed batches
    def _family_key(self, name: str) -> tuple:
        """Adapters with equal keys have equal factor shapes here and are served together (one stack per tensor)."""
        cfg = self.configs[name]
        pairs = tuple(None if p is None else (p.rank, p.n_in, p.n_out) for p in self._shared[name])
        return (cfg.share_mode, cfg.r_local, pairs, cfg.slice_align, cfg.scale, self._adapter_dtype(name))

    def _families(self, present: tuple[str, ...]) -> list[tuple[str, ...]]:
        """``present`` split into families (kept per set of names; adding or deleting an adapter drops them)."""
        fams = self._family_memo.get(present)
        if fams is None or any(self._adapter_dtype(f[0]) != self._adapter_dtype(n) for f in fams for n in f[1:2]):
            groups: dict[tuple, list[str]] = {}
            for n in present:
                groups.setdefault(self._family_key(n), []).append(n)
            fams = [tuple(g) for g in groups.values()]
            self._family_memo[present] = fams
        return fams

    def _adapter_dtype(self, name: str) -> torch.dtype:
        if name in self.lora_A:
            return _linear(self.lora_A[name]).weight.dtype
        return next(p for p in self._shared[name] if p is not None).A.dtype

    def _mixed_forward(self, x: torch.Tensor, y: torch.Tensor, batch: MixedBatch) -> torch.Tensor:
        """Each row of the batch with its own adapter (``"__base__"`` and adapters this module lacks: the base alone).

        Rows are grouped by adapter; adapters with equal factor shapes form one family whose per-adapter tensors are
        stacked for this forward only (nothing is kept after it). In slice mode the shared A-projection of a family
        is computed once per (layer, input) and reused by every module that reads the same input (q, k, v), as the
        single-adapter path does (Sec. 3: intra and inter pairs shared by the targets of a layer)."""
        rows = batch.rows
        if x.shape[0] != len(rows):
            raise ValueError(
                f"adapter_names has {len(rows)} entries but the batch at {self.module_name} has {x.shape[0]} rows"
            )
        present: tuple[str, ...] = batch.refs(
            (id(self), "present"), lambda: tuple(n for n in batch.unique if n in self.configs)
        )
        if not present:
            return y
        x3 = x.reshape(x.shape[0], -1, self.in_features)
        kernel = self.kernel_impl != "auto" or x.is_cuda
        for names in self._families(present):
            plan = batch.plan(names, x.device)
            cfg = self.configs[names[0]]
            xf = x3.to(self._adapter_dtype(names[0]))
            if cfg.share_mode == "slice" and kernel:
                d = self._slice_grouped(xf, x, names, plan, batch)  # every row; rows of other adapters are 0
                y = y + d.reshape(y.shape).to(y.dtype)
                continue
            xs = xf if plan.sel is None else xf.index_select(0, plan.sel)
            if cfg.share_mode == "slice" and plan.sel is None and y.dtype == xf.dtype and y.is_contiguous():
                # every row in this family: accumulate s * (z B^T) into y in place (no temporaries of y's size)
                self._slice_gathered(xs, x, names, plan, batch, into=y.view(x3.shape[0], -1, self.out_features))
                continue
            if cfg.share_mode == "slice":
                d = self._slice_gathered(xs, x, names, plan, batch)
            else:
                d = self._local_gathered(xs, names, plan, batch)
                for branch, store in ((0, self.intra_adapt), (1, self.inter_adapt)):
                    if self._shared[names[0]][branch] is None:
                        continue
                    pairs = [_pair(self._shared[n][branch]) for n in names]
                    A, B = plan.per_row([p.A for p in pairs]), plan.per_row([p.B for p in pairs])
                    if cfg.share_mode == "kron":
                        a, b = (plan.per_row([getattr(_kron(store[n]), v) for n in names]) for v in ("a", "b"))
                        extra = bsF.kron_apply_rows(xs, A, B, a, b)
                    else:
                        gates = [
                            plan.per_row([t[i] for t in (_gate(store[n]).tensors() for n in names)]) for i in range(4)
                        ]
                        extra = bsF.gate_apply_rows(xs, A, B, *gates)
                    d = extra if d is None else d + extra
                assert d is not None
            if plan.sel is None:
                y = y.add_(d.reshape(y.shape).to(y.dtype), alpha=cfg.scale)
            else:  # y is this forward's own base output: updated in place
                y = y.index_add_(0, plan.sel, d.reshape(d.shape[0], *y.shape[1:]).to(y.dtype), alpha=cfg.scale)
        return y

    def _local_weights(
        self, names: tuple[str, ...], batch: MixedBatch | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The local ``lora_A`` / ``lora_B`` weights of ``names`` (looked up once per mixed call with ``batch``)."""

        def build() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
            return ([_linear(self.lora_A[n]).weight for n in names], [_linear(self.lora_B[n]).weight for n in names])

        return build() if batch is None else batch.refs((id(self), "local", names), build)

    def _local_gathered(
        self,
        xs: torch.Tensor,
        names: tuple[str, ...],
        plan: RowPlan,
        batch: MixedBatch | None = None,
        into: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """Per-row local LoRA ``B_loc A_loc x`` by a gathered ``bmm`` pair (``None`` when ``r_local = 0``); with
        ``into`` (``(rows, tokens, out)``), ``into += s B_loc A_loc x`` in place instead and ``into`` is returned."""
        if self.configs[names[0]].r_local == 0:
            return None
        As, Bs = self._local_weights(names, batch)
        A = plan.per_row(As)  # (rows, r, in)
        B = plan.per_row(Bs)  # (rows, out, r)
        z = torch.bmm(xs, A.transpose(1, 2))
        if into is not None:
            return into.baddbmm_(z, B.transpose(1, 2), alpha=self.configs[names[0]].scale)
        return torch.bmm(z, B.transpose(1, 2))

    def _slice_offsets(self, names: tuple[str, ...]) -> tuple[int, int] | None:
        """``(c, c')``: the module's window in the family's shared pairs (``None`` without shared branches)."""
        pair = next((p for p in self._shared[names[0]] if p is not None), None)
        if pair is None:
            return None
        align = self.configs[names[0]].slice_align
        return (bsF.slice_offset(pair.n_in, self.in_features, align),
                bsF.slice_offset(pair.n_out, self.out_features, align))  # fmt: skip

    def _shared_stack(self, names: tuple[str, ...], which: str, stack: Any, batch: MixedBatch) -> torch.Tensor:
        """``[A_intra; A_inter]`` (``which="A"``: ``(., R, n_in)``) or ``[B_intra, B_inter]`` (``"B"``:
        ``(., n_out, R)``) of every adapter, through ``stack`` (per row, or per adapter); the inter part is built
        once per forward, the intra part once per layer, their concatenation once per layer."""
        dim = 1 if which == "A" else 2
        parts = []
        for branch in (0, 1):
            if self._shared[names[0]][branch] is None:
                continue
            layer = self.layer_idx if branch == 0 else None

            def build(b: int = branch) -> torch.Tensor:
                key = (id(self), "shared", which, b, names)
                return stack(batch.refs(key, lambda: [getattr(self._shared[n][b], which) for n in names]))

            parts.append(batch.reuse((which, branch, names, stack), None, layer, build))
        if len(parts) == 1:
            return parts[0]
        return batch.reuse((which, "cat", names, stack), None, self.layer_idx, lambda: torch.cat(parts, dim))

    def _slice_gathered(
        self,
        xs: torch.Tensor,
        x_key: torch.Tensor,
        names: tuple[str, ...],
        plan: RowPlan,
        batch: MixedBatch,
        into: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Slice mode on the CPU path: gathered ``bmm`` per row; the shared projection ``x @ [A_intra; A_inter]^T``
        (window ``c:c+in``) once per (family, layer, input). Returns the unscaled update, or with ``into``
        (``(rows, tokens, out)``, every row in the family) adds the scaled update to ``into`` in place (``baddbmm_``:
        no temporary of the output's size) and returns it."""
        d = self._local_gathered(xs, names, plan, batch, into)
        offsets = self._slice_offsets(names)
        if offsets is not None:
            c, co = offsets
            n_in = self.in_features

            def project() -> torch.Tensor:
                A = self._shared_stack(names, "A", plan.per_row, batch)  # (rows, R, n_in)
                return torch.bmm(xs, A[:, :, c : c + n_in].transpose(1, 2))  # (rows, tokens, R)

            z = batch.reuse(("z", names, c, n_in), x_key, self.layer_idx, project)
            B = self._shared_stack(names, "B", plan.per_row, batch)  # (rows, n_out, R)
            Bw = B[:, co : co + self.out_features].transpose(1, 2)
            if into is not None:
                return into.baddbmm_(z, Bw, alpha=self.configs[names[0]].scale)
            s = torch.bmm(z, Bw)
            d = s if d is None else d.add_(s)
        assert d is not None
        return d

    def _slice_grouped(
        self, xf: torch.Tensor, x_key: torch.Tensor, names: tuple[str, ...], plan: RowPlan, batch: MixedBatch
    ) -> torch.Tensor:
        """Slice mode through the shared segmented matmul (``icml25_shared.kernels``: Triton on CUDA): rows of
        other adapters get group -1 (a zero term); the per-adapter tensors are stacked for this forward only."""
        from icml25_shared.kernels import grouped_lora, grouped_matmul

        cfg = self.configs[names[0]]
        kw = {"impl": self.kernel_impl, "check_ids": False}
        d: torch.Tensor | None = None
        if cfg.r_local > 0:
            As, Bs = self._local_weights(names, batch)
            A = torch.stack(As)  # (G, r, in)
            B = torch.stack(Bs)  # (G, out, r)
            d = grouped_lora(xf, A.transpose(1, 2), B.transpose(1, 2), plan.group, **kw)
        offsets = self._slice_offsets(names)
        if offsets is not None:
            c, co = offsets
            n_in = self.in_features

            def project() -> torch.Tensor:
                A = self._shared_stack(names, "A", torch.stack, batch)  # (G, R, n_in)
                return grouped_matmul(xf, A[:, :, c : c + n_in].transpose(1, 2), plan.group, **kw)

            z = batch.reuse(("zg", names, c, n_in), x_key, self.layer_idx, project)
            B = self._shared_stack(names, "B", torch.stack, batch)  # (G, n_out, R)
            s = grouped_matmul(z, B[:, co : co + self.out_features].transpose(1, 2), plan.group, **kw)
            d = s if d is None else d + s
        assert d is not None
        return cfg.scale * d

    def _base_forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        base = self.base_layer
        # a plain nn.Linear without hooks: call the kernel directly (merged inference costs exactly the base's)
        if type(base) is nn.Linear and not (args or kwargs or base._forward_hooks or base._forward_pre_hooks):
            return torch.nn.functional.linear(x, base.weight, base.bias)
        return base(x, *args, **kwargs)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.disable_adapters or self.merged_adapters:
            if self._mixed is not None and self.merged_adapters:
                raise ValueError("forward with adapter_names is not possible while an adapter is merged; unmerge first")
            return self._base_forward(x, *args, **kwargs)
        y = self._base_forward(x, *args, **kwargs)
        if self._mixed is not None:
            return self._mixed_forward(x, y, self._mixed)
        name = self.active_adapter
        if name is None or name not in self.configs:
            return y
        d = self.adapter_delta(x.to(self._adapter_dtype(name)), name)
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
