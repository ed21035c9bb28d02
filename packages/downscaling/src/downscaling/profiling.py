"""Cost of serving a model: parameters, FLOPs per token (FlopCounterMode), weight bytes, latency, throughput and
energy per token, measured or estimated, with operational CO2e (:mod:`downscaling.carbon`).

Energy is **measured** when a hardware counter can be read, tried in this order: zeus's ``ZeusMonitor`` (NVML on
GPUs, RAPL on CPUs; when installed), codecarbon's ``OfflineEmissionsTracker`` (offline: no network; both in
``icml25-downscaling[energy]``) when it reads its CPU or GPU from a counter, and the Linux RAPL counter
``/sys/class/powercap/intel-rapl:0/energy_uj``. codecarbon without a counter only *models* power (TDP x CPU load,
RAM from its size); that is an estimate, so it is not reported as a measurement. Otherwise energy is **estimated**
as E = P · t with P an assumed power (``power_w``; default 15 W per CPU thread in use or 300 W for a CUDA device).
``Profile.measured`` says which; an energy that could not be read is never reported as 0.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

import torch
from torch import nn

from downscaling.carbon import co2e, joules_to_kwh
from downscaling.flops import _forward, check_token_ids, count_flops, count_train_flops, param_counts
from icml25_shared.validate import check_choice, check_float, check_int, check_tensor

__all__ = [
    "CODECARBON_COUNTER_MODES",
    "Profile",
    "codecarbon_reads_counter",
    "linear_weight_bytes",
    "profile",
    "read_energy_counter",
    "weight_bytes",
]

WATTS_PER_CPU_THREAD = 15.0
"""Assumed power per busy CPU thread for estimates (about a 200 W, 14-core server part per core)."""
WATTS_CUDA = 300.0
"""Assumed board power of a busy datacenter GPU for estimates."""
PER_TENSOR_QPARAMS_BYTES = 16
"""A per-tensor quantized weight's scale (float64) and zero point (int64)."""
RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")


@dataclass
class Profile:
    """What one ``profile`` call measured (per token values are over the whole batch of ``batch x seq_len``)."""

    params: int
    params_nonembed: int
    flops_per_token_fwd: float
    flops_per_token_train: float | None
    weight_bytes: int
    latency_ms: float
    tokens_per_s: float
    joules_per_token: float
    co2e_g_per_token: float
    measured: bool
    energy_source: str
    threads: int
    batch_shape: tuple[int, ...]

    @property
    def co2e_g(self) -> float:
        """Grams CO2e per token (alias)."""
        return self.co2e_g_per_token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tensor_bytes(t: torch.Tensor) -> int:
    names = getattr(t, "tensor_data_names", None)
    if names:  # torchao tensor subclasses (Int8Tensor: qdata + scale)
        return sum(_tensor_bytes(getattr(t, n)) for n in names if getattr(t, n, None) is not None)
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        # other tensor subclasses (optimum-quanto's WeightQBytesTensor: int8 data + scale; its int4 tensors: packed
        # uint8 data + scale + shift): the bytes of the inner tensors they store
        flat: Any = t  # the subclass protocol method is not in torch.Tensor's stub
        inner, _ = flat.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in inner if getattr(t, n, None) is not None)
    if t.is_quantized:
        per_tensor = t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric)
        extra = PER_TENSOR_QPARAMS_BYTES if per_tensor else 0
        if not extra:
            extra = t.q_per_channel_scales().nbytes + t.q_per_channel_zero_points().nbytes
        return t.numel() * t.element_size() + extra
    return t.numel() * t.element_size()


def _module_weights(m: nn.Module) -> list[torch.Tensor]:
    # the module's own dicts, not parameters()/getattr: this runs for every module on every quantize/profile call
    out: list[torch.Tensor] = [t for t in m._parameters.values() if t is not None]
    out += [b for b in m._buffers.values() if b is not None]
    if "weight_orig" in m._parameters and isinstance(m._buffers.get("weight_mask"), torch.Tensor):
        # torch.nn.utils.prune masks: count the deployable (finalized) weight, not weight_orig + weight_mask
        skip = {id(m.weight_orig), id(m.weight_mask)}
        out = [t for t in out if id(t) not in skip] + [cast(torch.Tensor, m.weight)]
    unpack = getattr(m, "_weight_bias", None) if hasattr(type(m), "_weight_bias") else None
    if callable(unpack) and callable(getattr(m, "weight", None)) and not isinstance(m.weight, torch.Tensor):
        try:  # torch.ao quantized Linear: unpack weight and bias from the packed params once
            w, b = cast(tuple[Any, Any], unpack())  # torch.ao: _weight_bias() returns (weight, bias or None)
            out.extend(t for t in (w, b) if t is not None)
        except (RuntimeError, TypeError):
            pass
    return out


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer (tied tensors once), quantized weights at their stored size (int8 data
    plus scales and zero points).

    Args:
        model: any ``torch.nn.Module``, quantized or not.

    Returns:
        The byte count.
    """
    seen: set[int] = set()
    total = 0
    for m in model.modules():
        for t in _module_weights(m):
            if not t.is_quantized:  # unpacked quantized weights are fresh tensors: never shared, never deduplicated
                key = t.data_ptr() or id(t)
                if key in seen:
                    continue
                seen.add(key)
            total += _tensor_bytes(t)
    return total


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights (and biases) of every linear layer -- ``nn.Linear`` and its quantized replacements --
    the part quantization shrinks.

    Args:
        model: any ``torch.nn.Module``, quantized or not.

    Returns:
        The byte count.
    """
    return sum(_linear_layer_bytes(m) for m in model.modules() if _is_linear_layer(m))


def _is_linear_layer(m: nn.Module) -> bool:
    """``nn.Linear`` or a quantized replacement of it (torch.ao, optimum-quanto): the layers
    :func:`linear_weight_bytes` counts."""
    return isinstance(m, nn.Linear) or "Linear" in type(m).__name__ and m.__module__.startswith(("torch.ao", "optimum"))


def _linear_layer_bytes(m: nn.Module) -> int:
    """The bytes of one layer that :func:`_is_linear_layer` accepts."""
    return sum(_tensor_bytes(t) for t in _module_weights(m) if isinstance(t, torch.Tensor))


def read_energy_counter() -> float | None:
    """Cumulative joules from the RAPL package counter, or ``None`` when it cannot be read (containers, non-Intel,
    no permission)."""
    try:
        return int(RAPL.read_text().strip()) / 1e6
    except (OSError, ValueError):
        return None


CODECARBON_COUNTER_MODES = frozenset({"intel_rapl", "intel_power_gadget", "windows_emi"})
"""codecarbon CPU modes that read a hardware counter (its ``cpu_load`` and ``constant`` modes model power from TDP)."""


def codecarbon_reads_counter(hardware: Any) -> bool:
    """Whether a codecarbon tracker's ``_hardware`` list reads energy from a counter: a GPU (NVML), an Apple chip
    (powermetrics), or a CPU in one of :data:`CODECARBON_COUNTER_MODES`. RAM is always modelled, so it never
    counts."""
    for h in hardware or ():
        kind = type(h).__name__
        if (
            kind in ("GPU", "AppleSiliconChip")
            or kind == "CPU"
            and getattr(h, "_mode", None) in CODECARBON_COUNTER_MODES
        ):
            return True
    return False


def _codecarbon_joules(fn: Any) -> tuple[float | None, str]:
    """Run ``fn`` under codecarbon's offline tracker; joules when it read a counter, else ``None`` and why."""
    try:
        from codecarbon import OfflineEmissionsTracker
    except ImportError:
        return None, "codecarbon not installed"
    tracker = OfflineEmissionsTracker(country_iso_code="USA", log_level="error", save_to_file=False)
    tracker.start()
    try:
        fn()
    finally:
        tracker.stop()
    hardware = getattr(tracker, "_hardware", [])
    found = ", ".join(str(h.description()) if hasattr(h, "description") else type(h).__name__ for h in hardware)
    if not codecarbon_reads_counter(hardware):
        return None, f"codecarbon has no counter here, only a power model ({found or 'no hardware'})"
    kwh = getattr(getattr(tracker, "final_emissions_data", None), "energy_consumed", None)
    if kwh is None or not kwh > 0:
        return None, f"codecarbon read no energy ({found})"
    return float(kwh) * 3.6e6, f"codecarbon ({found})"


def _zeus_joules(fn: Any, device: torch.device) -> tuple[float | None, str]:
    """Run ``fn`` inside one zeus measurement window (``ZeusMonitor.begin_window``/``end_window``): the GPU of
    ``device`` when it is CUDA, else the CPU packages (RAPL); ``None`` and why when zeus is missing or has no
    counter here."""
    try:
        from zeus.monitor import ZeusMonitor  # pyright: ignore[reportMissingImports]  # optional, not installed here
    except ImportError:
        return None, "zeus not installed"
    try:
        if device.type == "cuda":
            monitor = ZeusMonitor(gpu_indices=[device.index or 0], cpu_indices=[])
        else:
            monitor = ZeusMonitor(gpu_indices=[])
    except Exception as err:  # zeus raises its own errors when no NVML / RAPL is available
        return None, f"zeus has no counter here ({type(err).__name__}: {err})"
    window = "downscaling.profile"
    monitor.begin_window(window)
    try:
        fn()
    finally:
        measurement = monitor.end_window(window)
    joules = float(getattr(measurement, "total_energy", 0.0) or 0.0)
    return (joules, "zeus") if joules > 0 else (None, "zeus read no energy")


def profile(
    model: nn.Module,
    batch: torch.Tensor,
    energy: Literal["auto", "measure", "estimate"] = "auto",
    region: str | None = None,
    pue: float = 1.0,
    n_runs: int = 10,
    *,
    ci: float | None = None,
    power_w: float | None = None,
    train_flops: bool = True,
    warmup: int = 2,
) -> Profile:
    """Profile ``model`` on ``batch`` (``(B, T)`` token ids): FLOPs per token by FlopCounterMode (forward, and
    forward + backward when ``train_flops``; a quantized model is counted as its float twin would be, since its
    integer kernels are invisible to the counter), weight bytes, the median latency of ``n_runs`` forwards after
    ``warmup``, tokens/s, joules and grams CO2e per token (``energy``: ``measure`` raises if no counter is
    readable, ``estimate`` always uses ``power_w`` x time, ``auto`` measures when it can).

    Args:
        model: a causal language model; left in the training mode it came in.
        batch: ``(B, T)`` integer token ids.
        energy: ``"auto"``, ``"measure"`` or ``"estimate"`` (above).
        region: carbon-intensity region (a key of ``downscaling.carbon.CARBON_INTENSITY``); default ``world``.
        pue: power usage effectiveness of the data centre, at least 1.
        n_runs: timed forwards, at least 1.
        ci: carbon intensity in kg CO2e per kWh, instead of ``region``.
        power_w: assumed power of an estimate (module docstring for the default).
        train_flops: also count forward + backward FLOPs.
        warmup: untimed forwards before the timed ones.

    Returns:
        The :class:`Profile`.

    Raises:
        ValueError: a bad argument (named in the message).
        RuntimeError: ``energy="measure"`` and no energy counter is readable.
    """
    energy = check_choice("energy", energy, ("auto", "measure", "estimate"))
    batch = check_tensor("batch", batch, ndim=2)
    if batch.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"batch must hold integer token ids, got dtype {batch.dtype}")
    if batch.numel() == 0:
        raise ValueError(f"batch must hold at least one token, got shape {tuple(batch.shape)}")
    batch = check_token_ids("batch", batch.long(), model)
    n_runs = check_int("n_runs", n_runs, min=1)
    warmup = check_int("warmup", warmup, min=0)
    pue = check_float("pue", pue, min=1.0)
    if ci is not None:
        check_float("ci", ci, min=0.0)
    if power_w is not None:
        check_float("power_w", power_w, min=0.0, min_open=True)
    if region is not None:
        from downscaling.carbon import carbon_intensity

        carbon_intensity(region)
    try:
        dev = next(model.parameters()).device
    except StopIteration:
        dev = torch.device("cpu")
    batch = batch.to(dev)
    tokens = batch.numel()
    was_training = model.training
    model.eval()
    try:
        twin = _float_twin(model)
        flops_fwd = count_flops(twin, batch) / tokens
        flops_train = count_train_flops(twin, batch) / tokens if train_flops and _trainable(model) else None
        with torch.no_grad():
            for _ in range(warmup):
                _forward(model, batch)

            times: list[float] = []

            def run() -> None:
                for _ in range(n_runs):
                    t0 = time.perf_counter()
                    _forward(model, batch)
                    if dev.type == "cuda":
                        torch.cuda.synchronize(dev)
                    times.append(time.perf_counter() - t0)

            joules, source, why = None, "estimate", ""
            if energy != "estimate":
                joules, source = _measure(run, dev)
                if joules is None:
                    why = source
                    if energy == "measure":
                        raise RuntimeError(
                            f"energy='measure' but no energy counter is readable ({why}); use energy='estimate' "
                            "or 'auto'"
                        )
            if joules is None:
                times.clear()
                run()
                watts = power_w or (
                    WATTS_CUDA if dev.type == "cuda" else WATTS_PER_CPU_THREAD * torch.get_num_threads()
                )
                joules = watts * sum(times)
                source = f"estimate ({watts:g} W x time" + (f"; {why})" if why else ")")
    finally:
        model.train(was_training)
    pc = param_counts(twin)
    j_tok = joules / (tokens * len(times))
    kwh = joules_to_kwh(j_tok)
    return Profile(
        params=pc["total"],
        params_nonembed=pc["nonembed"],
        flops_per_token_fwd=flops_fwd,
        flops_per_token_train=flops_train,
        weight_bytes=weight_bytes(model),
        latency_ms=1e3 * statistics.median(times),
        tokens_per_s=tokens / statistics.median(times),
        joules_per_token=j_tok,
        co2e_g_per_token=1e3 * co2e(kwh, pue, ci, region=None if ci is not None else (region or "world")),
        measured=not source.startswith("estimate"),
        energy_source=source,
        threads=torch.get_num_threads(),
        batch_shape=tuple(batch.shape),
    )


def _measure(run: Any, device: torch.device) -> tuple[float | None, str]:
    """Joules of ``run()`` from the first readable counter (module docstring), else ``None`` and the reasons."""
    why = []
    for meter in (lambda: _zeus_joules(run, device), lambda: _codecarbon_joules(run)):
        j, source = meter()
        if j is not None:
            return j, source
        why.append(source)
    start = read_energy_counter()
    if start is None:
        return None, "; ".join([*why, f"RAPL {RAPL} unreadable"])
    run()
    end = read_energy_counter()
    if end is None or not end > start:  # wrapped or frozen counter: unreadable, never a silent 0
        return None, "; ".join([*why, "RAPL counter did not advance"])
    return end - start, "rapl"


def _trainable(model: nn.Module) -> bool:
    return any(p.is_floating_point() for p in model.parameters())


def _float_twin(model: nn.Module) -> nn.Module:
    """The model itself, or for a torch.ao dynamic-quantized model a float copy with the same shapes (the counter
    does not see quantized kernels)."""
    if not any(m.__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return model
    twin = copy.deepcopy(model)
    for name, module in list(twin.named_modules()):
        if module.__module__.startswith("torch.ao.nn.quantized") and hasattr(module, "in_features"):
            m: Any = module  # torch.ao quantized Linear: weight() and bias() are methods, in/out_features ints
            lin = nn.Linear(m.in_features, m.out_features, bias=m.bias() is not None)
            with torch.no_grad():
                lin.weight.copy_(m.weight().dequantize())
                if m.bias() is not None:
                    lin.bias.copy_(m.bias())
            parent, _, child = name.rpartition(".")
            setattr(twin.get_submodule(parent) if parent else twin, child, lin)
    return twin
