"""``FPTLIFNode``: the spikingjelly neuron that trains a soft-reset LIF layer with K fixed-point sweeps.

A drop-in for ``neuron.LIFNode(tau, decay_input=False, v_reset=None, step_mode="m")``: input ``[T, N, *]``, output
spikes of the same shape. It is stateless across calls (all T steps are solved at once), multi-step only, and a
``MemoryModule`` without memories, so ``functional.reset_net`` / ``detach_net`` work on networks that contain it and
``functional.set_step_mode(net, "s")`` raises a clear error (use :meth:`FPTLIFNode.to_lif` for streaming).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from spikingjelly.activation_based import base, neuron, surrogate
from torch import Tensor, nn

from fpt_snn.config import FPTConfig, LambdaPath, Mode, Output, Surrogate, validate_decay, validate_tau
from fpt_snn.functional import check_input, fpt_iterate, lambda_matrix
from icml25_shared.validate import check_bool, check_choice, check_int

__all__ = ["FPTLIFNode"]


class FPTLIFNode(base.MemoryModule, base.MultiStepModule):
    """Soft-reset LIF neuron trained with fixed-point parallel iterations (FPT, Feng et al., ICML 2025).

    Args:
        T: number of time steps of the input (rows of Λ).
        tau: membrane time constant τ > 1; leak λ = 1 - 1/τ (spikingjelly's ``LIFNode(tau=...)``).
        decay_input: scale the input by 1/τ, like spikingjelly's ``decay_input=True``.
        v_threshold: threshold θ > 0; the reset subtracts θ (``v_reset=None``).
        K: fixed-point iterations (default 3), or ``"auto"`` with ``mode="hard"`` (iterate until the spikes stop
            changing: exactly the LIF, at most T sweeps).
        alpha_schedule: sigmoid slopes of the soft iterates; ``None`` is the official (2, 6, 12).
        surrogate_backward: ``"flat_sigmoid"`` (official: derivative of a sigmoid of slope max(1, α/3)) or
            ``"sigmoid"`` (exact derivative of σ(α z)).
        mode: ``"soft"`` (sigmoid iterates, official training rule) or ``"hard"`` (Heaviside iterates, prefix-exact).
        output: training output: ``"bernoulli"`` (official: sample with straight-through gradient), ``"heaviside"``
            or ``"soft"``. Hard mode needs ``"heaviside"``.
        eval_output: output in ``eval()``; ``"heaviside"`` (deterministic, the default) or ``"bernoulli"`` (the
            official code's stochastic evaluation) or ``"soft"``.
        learnable_kernel: replace Λ by a learnable causal T×T kernel W (used as tril(W), initialised to Λ) and the
            constant -θ by a learnable bias [T, 1] (initialised to -θ). With K = 1 this is spikingjelly's ``PSN``
            restricted to a causal weight.
        learnable_decay: learn λ = sigmoid(w) ∈ (0, 1), initialised to 1 - 1/τ.
        detach_reset: no gradient through the reset term.
        dynamic_T: accept inputs of any length T (only with a fixed kernel).
        path: ``"auto"``, ``"dense"`` (T×T GEMM) or ``"chunked"`` (blocked scan, O(T·chunk_size) work).
        chunk_size: block length of the chunked scan (``None``: B ≈ √T, a power of 2 in [16, 64]).
        step_mode: only ``"m"`` (accepted for signature compatibility with spikingjelly neurons).
    """

    def __init__(
        self,
        T: int,
        tau: float = 2.0,
        decay_input: bool = False,
        v_threshold: float = 1.0,
        K: int | Literal["auto"] = 3,
        alpha_schedule: float | tuple[float, ...] | None = None,
        surrogate_backward: Surrogate = "flat_sigmoid",
        mode: Mode = "soft",
        output: Output = "bernoulli",
        eval_output: Output = "heaviside",
        learnable_kernel: bool = False,
        learnable_decay: bool = False,
        detach_reset: bool = False,
        dynamic_T: bool = False,
        path: LambdaPath = "auto",
        chunk_size: int | None = None,
        step_mode: Literal["m"] = "m",
    ) -> None:
        super().__init__()
        T = check_int("T", T, min=1)  # type: ignore[assignment]
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
        )
        check_choice("eval_output", eval_output, ("heaviside", "bernoulli", "soft"))
        if mode == "hard" and eval_output != "heaviside":
            raise ValueError(
                f"mode='hard' emits Heaviside spikes and needs eval_output='heaviside', got {eval_output!r}"
            )
        learnable_kernel = check_bool("learnable_kernel", learnable_kernel)
        learnable_decay = check_bool("learnable_decay", learnable_decay)
        dynamic_T = check_bool("dynamic_T", dynamic_T)
        if learnable_kernel and learnable_decay:
            raise ValueError("learnable_kernel and learnable_decay are exclusive: a learnable kernel already learns Λ")
        if learnable_kernel and dynamic_T:
            raise ValueError(f"dynamic_T needs a fixed kernel; a learnable kernel has a fixed T={T}")
        self.T = T
        self.eval_output = eval_output
        self.learnable_kernel = learnable_kernel
        self.learnable_decay = learnable_decay
        self.dynamic_T = dynamic_T
        self.step_mode = step_mode
        if learnable_kernel:
            self.weight = nn.Parameter(lambda_matrix(T, self.cfg.leak, torch.float32))
            self.bias = nn.Parameter(torch.full((T, 1), -self.cfg.v_threshold))
        if learnable_decay:
            lam = self.cfg.leak
            self.decay_logit = nn.Parameter(torch.tensor(math.log(lam / (1.0 - lam))))

    # --- properties mirroring spikingjelly's LIFNode ---------------------------------------------------------
    @property
    def tau(self) -> float:
        """τ = 1/(1 - λ) of the current leak (learned when ``learnable_decay``)."""
        lam = self.decay
        return 1.0 / (1.0 - (float(lam.detach()) if isinstance(lam, Tensor) else lam))

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

        In training the output is ``output`` (default Bernoulli straight-through); in ``eval()`` it is
        ``eval_output`` (default the deterministic Heaviside of the last iterate).
        """
        x_seq = check_input(x_seq, finite=False)
        T = x_seq.shape[0]
        if T != self.T and not self.dynamic_T:
            raise ValueError(
                f"x_seq has T={T} time steps but this FPTLIFNode was built for T={self.T} "
                "(pass dynamic_T=True to accept any T with the fixed leak kernel)"
            )
        out = self.cfg.output if self.training else self.eval_output
        kernel = self.weight.to(x_seq.dtype) if self.learnable_kernel else None
        bias = self.bias.to(x_seq.dtype) if self.learnable_kernel else None
        decay = self.decay_logit.sigmoid() if self.learnable_decay else None
        spikes, _ = fpt_iterate(
            x_seq.reshape(T, -1), self.cfg, decay=decay, kernel=kernel, bias=bias, output=out, generator=generator
        )
        return spikes.view(x_seq.shape)

    def extra_repr(self) -> str:
        c = self.cfg
        s = (
            f"T={self.T}, tau={self.tau:.4g}, decay_input={c.decay_input}, v_threshold={c.v_threshold}, K={c.K}, "
            f"alpha_schedule={c.alpha_schedule}, mode={c.mode!r}, output={c.output!r}, "
            f"eval_output={self.eval_output!r}, path={c.path!r}, step_mode={self.step_mode}"
        )
        if self.learnable_kernel:
            s += ", learnable_kernel=True"
        if self.learnable_decay:
            s += ", learnable_decay=True"
        if c.detach_reset:
            s += ", detach_reset=True"
        if self.dynamic_T:
            s += ", dynamic_T=True"
        return s

    # --- deployment ------------------------------------------------------------------------------------------
    def to_lif(self, surrogate_function: surrogate.SurrogateFunctionBase | None = None) -> neuron.LIFNode:
        """The sequential spikingjelly ``LIFNode`` with the same τ, θ, input decay and soft reset (multi-step).

        Refused for a learnable kernel, which is no longer a LIF. The LIF runs the exact dynamics that hard-mode
        FPT with K = T reproduces; it can be switched to ``step_mode='s'`` for streaming inference.
        """
        if self.learnable_kernel:
            raise ValueError("an FPTLIFNode with learnable_kernel=True is not a LIF neuron and cannot be converted")
        tau = validate_tau(float(self.tau))
        validate_decay(1.0 - 1.0 / tau)
        lif = neuron.LIFNode(
            tau=tau,
            decay_input=self.cfg.decay_input,
            v_threshold=self.cfg.v_threshold,
            v_reset=None,
            surrogate_function=surrogate_function if surrogate_function is not None else surrogate.Sigmoid(),
            detach_reset=self.cfg.detach_reset,
            step_mode="m",
        )
        return lif.to(next(iter(self.parameters()), torch.empty(0)).device)
