"""``FPTLIFNode``: the spikingjelly neuron that trains a soft-reset LIF layer with K fixed-point sweeps.

A drop-in for ``neuron.LIFNode(tau, decay_input, v_threshold, v_reset=None, surrogate_function, detach_reset,
step_mode="m", store_v_seq)``: the same leading arguments in the same order, input ``[T, N, *]``, output spikes of the
same shape. It is stateless across calls (all T steps are solved at once, starting from v = 0), multi-step only, and
a ``MemoryModule`` whose only memory is ``v_seq``, so ``functional.reset_net`` / ``detach_net`` work on networks that
contain it and ``functional.set_step_mode(net, "s")`` raises a clear error (use :meth:`FPTLIFNode.to_lif` for
streaming).
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import torch
from spikingjelly.activation_based import base, neuron, surrogate
from torch import Tensor, nn

from fpt_snn.config import FPTConfig, Impl, LambdaPath, Mode, Output, Surrogate, validate_decay, validate_tau
from fpt_snn.functional import check_input, fpt_iterate, lambda_matrix
from icml25_shared.validate import check_bool, check_choice, check_int

__all__ = ["FPTLIFNode"]

_RANK_STRIDE = 1_000_003
_DEFAULT_SURROGATE = surrogate.Sigmoid()
"""spikingjelly's default surrogate (``Sigmoid(alpha=4)``); each node gets its own copy."""


def rank_generator(device: torch.device) -> torch.Generator | None:
    """Under ``torch.distributed`` with more than one rank: a generator seeded by one draw of the global RNG and the
    rank, so every rank samples its own Bernoulli spikes while the global RNG streams stay in step across ranks
    (each rank draws the same one number). ``None`` otherwise (the global RNG is used)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    draw = int(torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=device).manual_seed((draw * _RANK_STRIDE + dist.get_rank()) % 2**63)


class FPTLIFNode(base.MemoryModule, base.MultiStepModule):
    """Soft-reset LIF neuron trained with fixed-point parallel iterations (FPT, Feng et al., ICML 2025).

    .. math::

        H = \\Lambda X' - \\theta (\\Lambda - I) S,\\qquad S = \\Theta(H - \\theta),\\qquad
        \\Lambda_{ij} = \\lambda^{i-j}\\ (i \\ge j),\\ \\lambda = 1 - 1/\\tau

    solved by K parallel sweeps S^k = f_k(H^k - θ) over all T steps (the paper's fixed-point iteration), with
    X' = X/τ when ``decay_input`` (spikingjelly's convention).

    Args (spikingjelly's ``LIFNode`` first, in its order):
        tau: membrane time constant τ > 1 (a float, as spikingjelly asserts); leak λ = 1 - 1/τ.
        decay_input: scale the input by 1/τ (spikingjelly's default ``True``).
        v_threshold: threshold θ > 0.
        v_reset: must be ``None``: FPT models the soft reset (subtract θ) only.
        surrogate_function: any spikingjelly surrogate: the spike function of the hard sweeps (``mode="hard"``) and
            of the Heaviside output, forward its spike, backward its gradient.
        detach_reset: no gradient through the reset term.
        step_mode: only ``"m"``.
        backend: only ``"torch"`` (the CUDA scan kernel is chosen by ``impl``).
        store_v_seq: keep the membrane after reset of the last sweep, ``v_seq`` = H^K - θS ``[T, N, *]`` (without
            gradient), after every forward (``v`` is its last step).

    FPT's own arguments (keyword only):
        T: time steps, or ``None`` (default) for any length. Needed by ``learnable_kernel``; when given, inputs of
            another length are refused unless ``dynamic_T``.
        K: fixed-point sweeps (default 3), or ``"auto"`` with ``mode="hard"`` (until the spikes stop changing: exactly
            the LIF, at most T sweeps).
        alpha_schedule: sigmoid slopes of the soft sweeps; ``None`` is the official (2, 6, 12).
        surrogate_backward: backward of the soft sweeps: ``"flat_sigmoid"`` (official: slope max(1, α/3)) or
            ``"sigmoid"`` (exact derivative of σ(α z)).
        mode: ``"soft"`` (sigmoid sweeps, the official training rule) or ``"hard"`` (``surrogate_function`` sweeps,
            prefix-exact; K = T is exactly ``LIFNode``).
        output: training output: ``"heaviside"`` (default, deterministic, as in :func:`fpt_snn.functional.fpt_lif`),
            ``"bernoulli"`` (the official code's: a sample with straight-through gradient; under torch.distributed
            each rank draws its own, see :func:`rank_generator`) or ``"soft"``. Hard mode needs ``"heaviside"``.
        eval_output: output in ``eval()``: ``"heaviside"`` (default) or ``"bernoulli"`` (the official code samples
            at evaluation too) or ``"soft"``.
        learnable_kernel: replace Λ by a learnable causal T×T kernel W (used as tril(W), initialised to Λ) and the
            constant -θ by a learnable bias [T, 1] (initialised to -θ). With K = 1 this is spikingjelly's ``PSN``
            restricted to a causal weight.
        learnable_decay: learn λ = sigmoid(w) ∈ (0, 1), initialised to 1 - 1/τ (what a converted
            ``ParametricLIFNode`` becomes: w = -its ``w``).
        dynamic_T: with ``T`` given, accept inputs of any length anyway (only with a fixed kernel).
        path: ``"auto"``, ``"dense"`` (T×T GEMM), ``"chunked"`` (blocked GEMMs) or ``"scan"`` (step by step).
        chunk_size: block length of the chunked path (``None``: B ≈ √T, a power of 2 in [16, 64]).
        impl: kernel of the scan path on CUDA (``"auto"``: the shared Triton ``linear_scan``).
    """

    def __init__(
        self,
        tau: float = 2.0,
        decay_input: bool = True,
        v_threshold: float = 1.0,
        v_reset: float | None = None,
        surrogate_function: surrogate.SurrogateFunctionBase = _DEFAULT_SURROGATE,
        detach_reset: bool = False,
        step_mode: Literal["m"] = "m",
        backend: Literal["torch"] = "torch",
        store_v_seq: bool = False,
        *,
        T: int | None = None,
        K: int | Literal["auto"] = 3,
        alpha_schedule: float | tuple[float, ...] | None = None,
        surrogate_backward: Surrogate = "flat_sigmoid",
        mode: Mode = "soft",
        output: Output = "heaviside",
        eval_output: Output = "heaviside",
        learnable_kernel: bool = False,
        learnable_decay: bool = False,
        dynamic_T: bool = False,
        path: LambdaPath = "auto",
        chunk_size: int | None = None,
        impl: Impl = "auto",
    ) -> None:
        super().__init__()
        if isinstance(tau, int) and not isinstance(tau, bool):
            raise ValueError(
                f"tau must be a float > 1 (spikingjelly's LIFNode rule), got the int {tau!r}; the number of time "
                "steps, if you meant it, is the keyword argument T=..."
            )
        if v_reset is not None:
            raise ValueError(f"FPT models only the soft reset: v_reset must be None, got {v_reset!r}")
        check_choice("backend", backend, ("torch",))
        if not callable(surrogate_function):
            raise ValueError(f"surrogate_function must be a spikingjelly surrogate module, got {surrogate_function!r}")
        T = check_int("T", T, min=1, allow_none=True)  # type: ignore[assignment]
        self.cfg = FPTConfig(
            tau=tau,
            decay_input=decay_input,
            v_threshold=v_threshold,
            K=K,
            alpha_schedule=alpha_schedule,  # type: ignore[arg-type]
            mode=mode,
            output=output,
            surrogate_backward=surrogate_backward,
            detach_reset=detach_reset,
            path=path,
            chunk_size=chunk_size,
            impl=impl,
        )
        check_choice("eval_output", eval_output, ("heaviside", "bernoulli", "soft"))
        if mode == "hard" and eval_output != "heaviside":
            raise ValueError(
                f"mode='hard' emits Heaviside spikes and needs eval_output='heaviside', got {eval_output!r}"
            )
        learnable_kernel = check_bool("learnable_kernel", learnable_kernel)
        learnable_decay = check_bool("learnable_decay", learnable_decay)
        dynamic_T = check_bool("dynamic_T", dynamic_T)
        self.store_v_seq = check_bool("store_v_seq", store_v_seq)
        if learnable_kernel and learnable_decay:
            raise ValueError("learnable_kernel and learnable_decay are exclusive: a learnable kernel already learns Λ")
        if learnable_kernel and (dynamic_T or T is None):
            raise ValueError(f"a learnable kernel needs a fixed T (got T={T}, dynamic_T={dynamic_T})")
        self.T = T
        if surrogate_function is _DEFAULT_SURROGATE:
            surrogate_function = copy.deepcopy(surrogate_function)
        self.surrogate_function = surrogate_function
        self.eval_output = eval_output
        self.learnable_kernel = learnable_kernel
        self.learnable_decay = learnable_decay
        self.dynamic_T = dynamic_T or T is None
        self.step_mode = step_mode
        self.backend = backend
        self.register_memory("v_seq", None)
        if learnable_kernel:
            self.weight = nn.Parameter(lambda_matrix(T, self.cfg.leak, torch.float32))  # type: ignore[arg-type]
            self.bias = nn.Parameter(torch.full((T, 1), -self.cfg.v_threshold))  # type: ignore[arg-type]
        if learnable_decay:
            lam = self.cfg.leak
            self.decay_logit = nn.Parameter(torch.tensor(math.log(lam / (1.0 - lam))))

    # --- properties mirroring spikingjelly's LIFNode ---------------------------------------------------------
    @property
    def tau(self) -> float:
        """τ: the constructor's value exactly, or 1/(1 - λ) of the learned leak when ``learnable_decay``."""
        if not self.learnable_decay:
            return self.cfg.tau
        return 1.0 / (1.0 - float(self.decay.detach()))  # type: ignore[union-attr]

    @property
    def decay(self) -> float | Tensor:
        """The leak λ: a float, or a 0-d tensor when learnable."""
        if self.learnable_decay:
            return torch.sigmoid(self.decay_logit)
        return self.cfg.leak

    @property
    def decay_input(self) -> bool:
        return self.cfg.decay_input

    @property
    def v_threshold(self) -> float:
        return self.cfg.v_threshold

    @property
    def v_reset(self) -> None:
        """Always ``None``: FPT models the soft reset (subtract θ) only."""
        return None

    @property
    def detach_reset(self) -> bool:
        return self.cfg.detach_reset

    @property
    def K(self) -> int | str:
        return self.cfg.K

    @property
    def v(self) -> Tensor | None:
        """The membrane after the last step (``v_seq[-1]``) when ``store_v_seq``, else ``None``."""
        v_seq = self.v_seq
        return None if v_seq is None else v_seq[-1]

    @property
    def step_mode(self) -> str:  # type: ignore[override]
        return self._step_mode

    @step_mode.setter
    def step_mode(self, value: str) -> None:
        if value != "m":
            raise ValueError(
                f"FPTLIFNode solves all T steps at once and supports only step_mode='m', got {value!r}; "
                "for single-step streaming inference convert it with .to_lif() or convert_fpt_to_lif(net)"
            )
        self._step_mode = value

    def supported_step_mode(self) -> tuple[str]:
        return ("m",)

    # --- forward ---------------------------------------------------------------------------------------------
    def forward(self, x_seq: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Spikes ``[T, N, *]`` for the input current ``x_seq`` ``[T, N, *]``.

        In training the output is ``output`` (default the deterministic Heaviside of the last sweep); in ``eval()``
        it is ``eval_output``. A Bernoulli output draws from ``generator`` when given, else from the global RNG, or
        under torch.distributed from :func:`rank_generator` (one stream per rank).
        """
        x_seq = check_input(x_seq, finite=False)
        T = x_seq.shape[0]
        if not self.dynamic_T and T != self.T:
            raise ValueError(
                f"x_seq has T={T} time steps but this FPTLIFNode was built for T={self.T} "
                "(pass dynamic_T=True, or leave T=None, to accept any T with the fixed leak kernel)"
            )
        out = self.cfg.output if self.training else self.eval_output
        if out == "bernoulli" and generator is None:
            generator = rank_generator(x_seq.device)
        kernel = self.weight.to(x_seq.dtype) if self.learnable_kernel else None
        bias = self.bias.to(x_seq.dtype) if self.learnable_kernel else None
        decay = self.decay_logit.sigmoid().to(x_seq.dtype) if self.learnable_decay else None
        self.cfg.surrogate_function = self.surrogate_function
        spikes, info = fpt_iterate(
            x_seq.reshape(T, -1),
            self.cfg,
            decay=decay,
            kernel=kernel,
            bias=bias,
            output=out,
            generator=generator,
            need_info=self.store_v_seq,
        )
        if info is not None:
            self.v_seq = info.v_seq.detach().view(x_seq.shape)
        return spikes.view(x_seq.shape)

    def extra_repr(self) -> str:
        c = self.cfg
        s = (
            f"tau={self.tau:.6g}, decay_input={c.decay_input}, v_threshold={c.v_threshold}, v_reset=None, "
            f"detach_reset={c.detach_reset}, step_mode={self.step_mode}, store_v_seq={self.store_v_seq}, "
            f"T={self.T}, K={c.K}, alpha_schedule={c.alpha_schedule}, mode={c.mode!r}, output={c.output!r}, "
            f"eval_output={self.eval_output!r}, path={c.path!r}"
        )
        if self.learnable_kernel:
            s += ", learnable_kernel=True"
        if self.learnable_decay:
            s += ", learnable_decay=True"
        return s

    # --- deployment ------------------------------------------------------------------------------------------
    def to_lif(
        self, surrogate_function: surrogate.SurrogateFunctionBase | None = None
    ) -> neuron.LIFNode | neuron.ParametricLIFNode:
        """The sequential spikingjelly neuron this one approximates (multi-step): a ``LIFNode`` with the same τ (the
        constructor's float, bit for bit), θ, input decay, soft reset, ``detach_reset``, ``store_v_seq`` and a copy
        of the surrogate (or ``surrogate_function``); a ``ParametricLIFNode`` with ``w = -decay_logit`` for a
        learnable leak. Refused for a learnable kernel, which is no longer a LIF. The LIF runs the exact dynamics
        that hard-mode FPT with K = T reproduces; it can be switched to ``step_mode='s'`` for streaming inference.
        """
        if self.learnable_kernel:
            raise ValueError("an FPTLIFNode with learnable_kernel=True is not a LIF neuron and cannot be converted")
        sg = copy.deepcopy(self.surrogate_function if surrogate_function is None else surrogate_function)
        common = {
            "decay_input": self.cfg.decay_input,
            "v_threshold": self.cfg.v_threshold,
            "v_reset": None,
            "surrogate_function": sg,
            "detach_reset": self.cfg.detach_reset,
            "step_mode": "m",
            "store_v_seq": self.store_v_seq,
        }
        if self.learnable_decay:
            plif = neuron.ParametricLIFNode(init_tau=2.0, **common)
            plif.w = nn.Parameter(-self.decay_logit.detach().clone(), requires_grad=self.decay_logit.requires_grad)
            return plif
        tau = validate_tau(float(self.tau))
        validate_decay(1.0 - 1.0 / tau)
        return neuron.LIFNode(tau=tau, **common)
