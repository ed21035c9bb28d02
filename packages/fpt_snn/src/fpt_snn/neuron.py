"""``FPTLIFNode``: the spikingjelly neuron that trains a soft-reset LIF layer with K fixed-point sweeps.

A drop-in for ``neuron.LIFNode(tau, decay_input, v_threshold, v_reset=None, surrogate_function, detach_reset,
step_mode="m", store_v_seq)``: the same leading arguments in the same order, input ``[T, N, *]``, output spikes of the
same shape. By default it is stateless across calls (all T steps are solved at once, starting from v = 0);
``stateful=True`` carries the membrane from one call to the next as ``LIFNode`` does (a sequence fed in chunks gives
the spikes of the whole sequence, exactly so in hard mode with K = T) until ``functional.reset_net``. It is
multi-step only and a ``MemoryModule`` (memories ``v_seq`` and ``v_state``), so ``functional.reset_net`` /
``detach_net`` work on networks that contain it; ``functional.set_step_mode(net, "s")`` switches every layer (this
one included, so the network is never left half switched) and the forward then raises a clear error pointing to
:meth:`FPTLIFNode.to_lif` for streaming.
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
    X' = X/τ when ``decay_input`` (spikingjelly's convention; else X' = X).

    Args (spikingjelly's ``LIFNode`` first, in its order):
        tau: membrane time constant τ > 1 (a float, as spikingjelly asserts); leak λ = 1 - 1/τ.
        decay_input: scale the input by 1/τ (spikingjelly's default ``True``).
        v_threshold: threshold θ > 0.
        v_reset: must be ``None``: FPT models the soft reset (subtract θ) only.
        surrogate_function: any spikingjelly surrogate: the spike function of the hard sweeps (``mode="hard"``) and
            of the Heaviside output, forward its spike, backward its gradient.
        detach_reset: no gradient through the reset term.
        step_mode: only ``"m"``.
        store_v_seq: keep the membrane after reset of the last sweep, ``v_seq`` = H^K - θS ``[T, N, *]`` (without
            gradient), after every forward (``v`` is its last step).
        stateful (keyword): carry the membrane after the last step into the next call (``v``, without gradient),
            as ``LIFNode`` does, until ``functional.reset_net``; default ``False``: every call starts from v = 0.

    FPT's own arguments (keyword only):
        backend: only ``"torch"`` (keyword only, as spikingjelly 2's ``LIFNode`` has no such argument; the CUDA scan
            kernel is chosen by ``impl``).
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
            constant -θ by a learnable bias b [T, 1] (initialised to -θ): pre-activation W(X' - θS) + θS + b, with
            X' = X/τ under ``decay_input`` (the default) and X' = X without. With K = 1 (S⁰ = 0) it is
            spikingjelly's ``PSN`` with weight tril(W)/τ (``decay_input=True``) or tril(W) (``False``) and bias b.
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
        store_v_seq: bool = False,
        *,
        backend: Literal["torch"] = "torch",
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
        stateful: bool = False,
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
        if step_mode != "m":
            raise ValueError(
                f"FPTLIFNode solves all T steps at once and supports only step_mode='m', got {step_mode!r}; for "
                "single-step streaming inference convert it with .to_lif() or convert_fpt_to_lif(net)"
            )
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
        self.stateful = check_bool("stateful", stateful)
        if self.stateful and learnable_kernel:
            raise ValueError("stateful=True carries a LIF membrane; a learnable kernel is not a LIF neuron")
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
        self.register_memory("v_state", None)
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
    def K(self) -> int | Literal["auto"]:
        return self.cfg.K

    @property
    def v(self) -> Tensor | None:
        """The membrane after the last step: the carried state when ``stateful``, ``v_seq[-1]`` when
        ``store_v_seq``, else ``None``."""
        if self.stateful:
            return self.v_state
        v_seq = self.v_seq
        return None if v_seq is None else v_seq[-1]

    @property
    def step_mode(self) -> str:  # type: ignore[override]
        return self._step_mode

    @step_mode.setter
    def step_mode(self, value: str) -> None:
        # "s" is accepted here so that functional.set_step_mode(net, "s") switches every layer or none; the forward
        # refuses it (raising here would leave the layers before this one switched and the rest not)
        self._step_mode = check_choice("step_mode", value, ("m", "s"))

    def supported_step_mode(self) -> tuple[str]:
        return ("m",)

    # --- forward ---------------------------------------------------------------------------------------------
    def forward(self, x_seq: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Spikes ``[T, N, *]`` for the input current ``x_seq`` ``[T, N, *]``.

        In training the output is ``output`` (default the deterministic Heaviside of the last sweep); in ``eval()``
        it is ``eval_output``. A Bernoulli output draws from ``generator`` when given, else from the global RNG, or
        under torch.distributed from :func:`rank_generator` (one stream per rank).
        """
        if self._step_mode != "m":
            raise ValueError(
                "FPTLIFNode solves all T steps at once and supports only step_mode='m', got 's' (e.g. from "
                "functional.set_step_mode(net, 's')); switch back with set_step_mode(net, 'm'), or for single-step "
                "streaming inference convert it with .to_lif() or convert_fpt_to_lif(net)"
            )
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
        x2d = x_seq.reshape(T, -1)
        if self.stateful and self.v_state is not None:
            if self.v_state.shape != x_seq.shape[1:]:
                raise ValueError(
                    f"stateful FPTLIFNode: x_seq has neurons of shape {tuple(x_seq.shape[1:])} but the carried "
                    f"membrane has {tuple(self.v_state.shape)}; call functional.reset_net(net) between sequences"
                )
            # h[0] = λ v + x'[0]: the carried membrane enters as extra input at the first step (x' = scale·x)
            lam = decay if decay is not None else self.cfg.leak
            scale = (1.0 - lam) if (decay is not None and self.cfg.decay_input) else self.cfg.input_scale
            first = x2d[:1] + lam * self.v_state.reshape(1, -1).to(x2d.dtype) / scale
            x2d = torch.cat([first, x2d[1:]])
        spikes, info = fpt_iterate(
            x2d,
            self.cfg,
            decay=decay,
            kernel=kernel,
            bias=bias,
            output=out,
            generator=generator,
            need_info=self.store_v_seq or self.stateful,
        )
        if info is not None:
            v_seq = info.v_seq.detach().view(x_seq.shape)
            if self.store_v_seq:
                self.v_seq = v_seq
            if self.stateful:
                self.v_state = v_seq[-1]
        return spikes.view(x_seq.shape)

    def extra_repr(self) -> str:
        c = self.cfg
        s = (
            f"tau={self.tau:.6g}, decay_input={c.decay_input}, v_threshold={c.v_threshold}, v_reset=None, "
            f"detach_reset={c.detach_reset}, step_mode={self.step_mode}, store_v_seq={self.store_v_seq}, "
            f"stateful={self.stateful}, "
            f"T={self.T}, K={c.K}, alpha_schedule={c.alpha_schedule}, mode={c.mode!r}, output={c.output!r}, "
            f"eval_output={self.eval_output!r}, path={c.path!r}"
        )
        if self.learnable_kernel:
            s += ", learnable_kernel=True"
        if self.learnable_decay:
            s += ", learnable_decay=True"
        return s

    # --- deployment ------------------------------------------------------------------------------------------
    def to_psn(self) -> neuron.PSN:
        """spikingjelly's ``PSN`` this node is, for ``learnable_kernel=True`` and K = 1: weight tril(W)·s with s =
        1/τ under ``decay_input`` (the kernel sees X/τ) and 1 without, bias b, a copy of the surrogate. Its spikes
        equal this node's Heaviside spikes (up to the rounding of the product by 1/τ; exact for τ = 2)."""
        if not self.learnable_kernel or self.cfg.K != 1:
            raise ValueError(
                f"only a learnable-kernel FPTLIFNode with K=1 is a PSN (got learnable_kernel={self.learnable_kernel},"
                f" K={self.cfg.K!r})"
            )
        psn = neuron.PSN(self.T, surrogate_function=copy.deepcopy(self.surrogate_function))  # type: ignore[arg-type]
        with torch.no_grad():
            psn.weight.copy_(torch.tril(self.weight) * self.cfg.input_scale)
            psn.bias.copy_(self.bias)
        return psn.to(self.weight.device)

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
