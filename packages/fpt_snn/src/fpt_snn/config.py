"""Hyper-parameters of an FPT LIF neuron, validated in one place.

:class:`FPTConfig` is shared by the pure-torch :func:`fpt_snn.functional.fpt_lif` and the spikingjelly module
:class:`fpt_snn.FPTLIFNode`, so that a bad value is rejected with the same message wherever it comes in.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from icml25_shared.validate import check_bool, check_choice, check_float, check_int

__all__ = [
    "FPTConfig",
    "OFFICIAL_ALPHAS",
    "MODES",
    "OUTPUTS",
    "PATHS",
    "IMPLS",
    "SURROGATES",
    "decay_from_tau",
    "tau_from_decay",
]

MODES = ("soft", "hard")
OUTPUTS = ("bernoulli", "heaviside", "soft")
PATHS = ("auto", "dense", "chunked", "scan")
IMPLS = ("auto", "torch", "triton")
SURROGATES = ("flat_sigmoid", "sigmoid")

Mode = Literal["soft", "hard"]
Output = Literal["bernoulli", "heaviside", "soft"]
LambdaPath = Literal["auto", "dense", "chunked", "scan"]
Impl = Literal["auto", "torch", "triton"]
Surrogate = Literal["flat_sigmoid", "sigmoid"]


DENSE_MAX_T = 32
DENSE_MAX_T_CUDA = 256
SCAN_MIN_COLUMNS = 16384
SCAN_MIN_T = 256
"""On CPU, ``path="auto"`` runs the sweeps as one pass over time (the "scan" path: K running states, one block of
columns at a time) for at least ``SCAN_MIN_COLUMNS`` columns or T ≥ ``SCAN_MIN_T``; below, the blocked GEMMs
(chunked) or the T×T GEMM (dense, T ≤ 32) are faster. Measured fwd+bwd of one layer, 1 thread, ratio to
spikingjelly's LIFNode (benchmarks/results/bench_fpt_snn.json): N = 4,096, T = 128: chunked 0.88×, scan 1.28×;
T = 512: chunked 1.24×, scan 1.08×; T = 2,048: chunked 3.5×, scan 1.34×; N = 65,536, T = 128: chunked 12.7×,
scan 4.0×."""
SCAN_MAX_T_DENSE = 16
"""Up to this T the T×T GEMM is as fast as anything else and ``"auto"`` keeps it."""


def auto_chunk_size(T: int) -> int:
    """B ≈ √T rounded to a power of 2 and clipped to [16, 64]: balances the T·B work inside blocks against the
    (T/B)² work of the carries."""
    return int(min(64, max(16, 2 ** round(math.log2(max(T, 1)) / 2))))


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def validate_tau(tau: object) -> float:
    """Return ``tau`` as a float; it must be a finite number > 1 (spikingjelly's rule, λ = 1 − 1/τ ∈ (0, 1))."""
    return check_float("tau", tau, min=1.0, min_open=True)  # type: ignore[return-value]


def validate_decay(decay: object) -> float:
    """Return ``decay`` as a float; it must lie in (0, 1] (λ = 1 is the IF neuron)."""
    return check_float("decay", decay, min=0.0, max=1.0, min_open=True)  # type: ignore[return-value]


def decay_from_tau(tau: float) -> float:
    """λ = 1 − 1/τ, spikingjelly's LIF leak for a membrane time constant ``tau`` > 1."""
    return 1.0 - 1.0 / validate_tau(tau)


def tau_from_decay(decay: float) -> float:
    """τ = 1/(1 − λ); ``inf`` for λ = 1 (the IF neuron)."""
    decay = validate_decay(decay)
    return math.inf if decay == 1.0 else 1.0 / (1.0 - decay)


def validate_K(K: object) -> int | Literal["auto"]:
    """``K`` must be a positive int or the string ``"auto"``."""
    if isinstance(K, str) and K == "auto":
        return "auto"
    try:
        return check_int("K", K, min=1)  # type: ignore[return-value]
    except ValueError as err:  # the shared message, with the "auto" alternative named
        raise type(err)(f"K must be a positive int or 'auto', got {K!r}") from None


OFFICIAL_ALPHAS = (2.0, 6.0, 12.0)


def validate_alpha_schedule(alpha_schedule: object, K: int | Literal["auto"]) -> tuple[float, ...]:
    """A non-empty tuple of positive, finite sigmoid slopes; one slope is broadcast to every iteration.

    ``None`` means the official ImageNet schedule (2, 6, 12), cut to K entries when K < 3 (the last slope repeats
    for K > 3). With an int ``K`` an explicit schedule must have 1 or ``K`` entries. With ``K="auto"`` any length
    works: the last slope is used for every iteration past the end of the schedule.
    """
    if alpha_schedule is None:
        return OFFICIAL_ALPHAS[: K if isinstance(K, int) else None]
    if _is_real(alpha_schedule):
        alpha_schedule = (alpha_schedule,)
    try:
        alphas = tuple(alpha_schedule)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"alpha_schedule must be a sequence of positive numbers, got {alpha_schedule!r}") from None
    if len(alphas) == 0:
        raise ValueError("alpha_schedule must not be empty, got ()")
    alphas = tuple(check_float(f"alpha_schedule[{i}]", a, min=0.0, min_open=True) for i, a in enumerate(alphas))
    if isinstance(K, int) and len(alphas) not in (1, K):
        raise ValueError(f"alpha_schedule must have 1 or K={K} entries, got {len(alphas)}: {alphas!r}")
    return alphas  # type: ignore[return-value]


@dataclass
class FPTConfig:
    """Every hyper-parameter of the FPT iteration: the fixed-point sweeps, their spike functions and the output.

    Shared by :func:`fpt_snn.functional.fpt_lif` and :class:`fpt_snn.FPTLIFNode`, so a bad value is refused with the
    same message wherever it comes in.
    """

    tau: float = 2.0
    """Membrane time constant τ > 1; the leak is λ = 1 − 1/τ (spikingjelly's ``LIFNode(tau=...)``)."""
    decay: float | None = None
    """The leak λ ∈ (0, 1] given directly (overrides ``tau``; λ = 1 is the IF neuron)."""
    decay_input: bool = False
    """Scale the input by 1/τ (spikingjelly's ``decay_input=True``)."""
    v_threshold: float = 1.0
    """Firing threshold θ > 0; the reset subtracts θ (soft reset, ``v_reset=None``)."""
    K: int | Literal["auto"] = 3
    """Number of fixed-point iterations, or ``"auto"``: iterate hard spikes until they stop changing (then exactly
    the LIF solution), at most T times, and differentiate the fixed point implicitly (the gradient is the LIF's
    BPTT gradient with the same surrogate, whatever the number of sweeps run). ``"auto"`` needs ``mode="hard"``."""
    alpha_schedule: tuple[float, ...] | None = None
    """Sigmoid slopes α_k of the soft iterates, one per iteration (or one for all). ``None``: the official ImageNet
    schedule (2, 6, 12), cut to K < 3 entries, its last slope repeated for K > 3."""
    mode: Mode = "soft"
    """``"soft"`` (sigmoid iterates, the official training rule) or ``"hard"`` (Heaviside iterates with a surrogate
    gradient; prefix-exact: after k iterations the first k steps equal the sequential LIF)."""
    output: Output = "heaviside"
    """What the neuron emits from the last iterate: ``"heaviside"`` (Θ of the last pre-activation, deterministic;
    its gradient is ``surrogate_function``'s when one is given, else the straight-through gradient of the soft
    probability; the default of :func:`fpt_snn.functional.fpt_lif` and :class:`fpt_snn.FPTLIFNode` alike),
    ``"bernoulli"`` (a sample of the soft probability with a straight-through gradient; the official training
    output) or ``"soft"`` (the probability). ``mode="hard"`` emits Heaviside spikes and so needs
    ``output="heaviside"``."""
    surrogate_backward: Surrogate = "flat_sigmoid"
    """Backward of each iterate: ``"flat_sigmoid"`` (official: the derivative of a sigmoid of slope max(1, α/3)) or
    ``"sigmoid"`` (the exact derivative of σ(α z))."""
    detach_reset: bool = False
    """Stop the gradient through the reset term A·S."""
    surrogate_function: Callable[[Any], Any] | None = None
    """A spikingjelly surrogate (any ``spikingjelly.activation_based.surrogate`` module, or a callable with a
    Heaviside forward and a surrogate backward). When given it is the spike function of every hard iterate and of
    the ``"heaviside"`` output: forward its spike, backward its gradient. ``None``: a sigmoid surrogate of slope
    max(1, α_k/3) (``surrogate_backward="flat_sigmoid"``) or α_k (``"sigmoid"``)."""
    path: LambdaPath = "auto"
    """How Λ·Y is computed: ``"dense"`` (one T×T GEMM), ``"chunked"`` (blocked GEMMs, O(T·B) work), ``"scan"``
    (the recurrence step by step: one pass over time with K running states on CPU, the shared Triton
    ``linear_scan`` kernel per sweep on CUDA) or ``"auto"``: on CPU dense for T ≤ 16, scan for ≥ 16,384 columns or
    T ≥ 256, otherwise dense for T ≤ 32 and chunked above; on CUDA dense for T ≤ 64, then the Triton scan when
    triton is installed (chunked otherwise)."""
    impl: Impl = "auto"
    """Kernel of the ``"scan"`` path on CUDA: ``"auto"`` (Triton for CUDA float32/float16/bfloat16, torch
    otherwise), ``"torch"`` or ``"triton"`` (see ``icml25_shared.kernels.linear_scan``). CPU runs are unaffected."""
    chunk_size: int | None = None
    """The block length B of the chunked scan; ``None`` picks B ≈ √T, a power of 2 in [16, 64] (measured best on
    CPU)."""

    def __post_init__(self) -> None:
        if self.decay is None:
            self.tau = validate_tau(self.tau)
        else:
            self.decay = validate_decay(self.decay)
            if self.decay_input and self.decay == 1.0:
                raise ValueError("decay_input=True scales the input by 1 - decay, which is 0 for decay=1.0")
        self.decay_input = check_bool("decay_input", self.decay_input)
        self.v_threshold = check_float("v_threshold", self.v_threshold, min=0.0, min_open=True)  # type: ignore[assignment]
        self.K = validate_K(self.K)
        self.mode = check_choice("mode", self.mode, MODES)
        self.output = check_choice("output", self.output, OUTPUTS)
        self.surrogate_backward = check_choice("surrogate_backward", self.surrogate_backward, SURROGATES)
        self.path = check_choice("path", self.path, PATHS)
        self.impl = check_choice("impl", self.impl, IMPLS)
        if self.surrogate_function is not None and not callable(self.surrogate_function):
            raise ValueError(
                "surrogate_function must be a callable (a spikingjelly surrogate module), "
                f"got {self.surrogate_function!r}"
            )
        self.alpha_schedule = validate_alpha_schedule(self.alpha_schedule, self.K)
        if self.K == "auto" and self.mode != "hard":
            raise ValueError(
                f"K='auto' iterates hard spikes to their fixed point and needs mode='hard', got {self.mode!r}"
            )
        if self.mode == "hard" and self.output != "heaviside":
            raise ValueError(f"mode='hard' emits Heaviside spikes and needs output='heaviside', got {self.output!r}")
        self.detach_reset = check_bool("detach_reset", self.detach_reset)
        self.chunk_size = check_int("chunk_size", self.chunk_size, min=1, allow_none=True)

    @property
    def leak(self) -> float:
        """λ, from ``decay`` when given, otherwise 1 − 1/τ."""
        return self.decay if self.decay is not None else 1.0 - 1.0 / self.tau

    @property
    def input_scale(self) -> float:
        """1/τ = 1 − λ when ``decay_input`` (spikingjelly's input decay), else 1."""
        if not self.decay_input:
            return 1.0
        return 1.0 / self.tau if self.decay is None else 1.0 - self.decay

    def use_dense(self, T: int, device: object = None) -> bool:
        """Whether the ``path`` setting means the dense T×T GEMM for a sequence of length T on ``device`` (the
        autograd path of learnable leaks and kernels, which has no scan)."""
        if self.path != "auto":
            return self.path == "dense"
        return T <= DENSE_MAX_T or (getattr(device, "type", None) == "cuda" and T <= DENSE_MAX_T_CUDA)

    def resolve_path(self, T: int, M: int, device: object = None) -> str:
        """The concrete Λ·Y path (``"dense"``, ``"chunked"`` or ``"scan"``) for a [T, M] input on ``device``."""
        if self.path != "auto":
            return self.path
        if getattr(device, "type", None) == "cuda":
            if T <= 64:
                return "dense"
            from icml25_shared.kernels import triton_available

            return "scan" if triton_available() else ("dense" if T <= DENSE_MAX_T_CUDA else "chunked")
        if T <= SCAN_MAX_T_DENSE:
            return "dense"
        if M >= SCAN_MIN_COLUMNS or T >= SCAN_MIN_T:
            return "scan"
        return "dense" if T <= DENSE_MAX_T else "chunked"

    def block(self, T: int) -> int:
        """The chunk length B used for length T."""
        return self.chunk_size if self.chunk_size is not None else auto_chunk_size(T)

    def alpha(self, k: int) -> float:
        """The slope of iteration ``k`` (0-based); the last slope repeats past the schedule's end."""
        schedule = self.alpha_schedule
        assert schedule is not None  # __post_init__ fills it
        return schedule[min(k, len(schedule) - 1)]
