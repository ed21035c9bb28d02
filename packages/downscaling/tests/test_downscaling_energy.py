"""Energy meters: codecarbon's offline tracker (real, no network) and its counter/model distinction, a fake zeus
``ZeusMonitor`` through the adapter, and the order in which ``profile`` tries them."""

from __future__ import annotations

import socket
import sys
import types

import pytest
import torch
from ds_testing import tiny_llama, tokens

from downscaling import profiling as profile_mod
from downscaling.profiling import codecarbon_reads_counter, profile


class _Hw:
    def __init__(self, mode: str | None = None, desc: str = "hw") -> None:
        self._mode, self._desc = mode, desc

    def description(self) -> str:
        return self._desc


def _hw(kind: str, mode: str | None = None) -> object:
    return type(kind, (_Hw,), {})(mode, f"{kind}({mode})")


@pytest.mark.parametrize(
    ("hardware", "counter"),
    [
        ([_hw("RAM"), _hw("CPU", "cpu_load")], False),
        ([_hw("RAM"), _hw("CPU", "constant")], False),
        ([_hw("RAM"), _hw("CPU", "intel_rapl")], True),
        ([_hw("CPU", "intel_power_gadget")], True),
        ([_hw("RAM"), _hw("CPU", "cpu_load"), _hw("GPU")], True),
        ([_hw("AppleSiliconChip")], True),
        ([_hw("RAM")], False),
        ([], False),
    ],
)
def test_codecarbon_counter_vs_model(hardware, counter):
    assert codecarbon_reads_counter(hardware) is counter


def _no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_real_codecarbon_offline_is_labelled(monkeypatch):
    """codecarbon 3 runs offline (no socket opened); on a machine without RAPL/NVML it only models power, so the
    profile is an estimate that says so; with a counter it is a codecarbon measurement."""
    pytest.importorskip("codecarbon")
    _no_network(monkeypatch)
    calls = []
    monkeypatch.setattr(profile_mod, "_zeus_joules", lambda fn, dev: (None, "zeus stubbed"))
    real = profile_mod._codecarbon_joules
    monkeypatch.setattr(profile_mod, "_codecarbon_joules", lambda fn: calls.append(1) or real(fn))
    p = profile(tiny_llama(), tokens(2, 8), n_runs=2, energy="auto")
    assert calls == [1]
    assert p.joules_per_token > 0
    if p.measured:
        assert p.energy_source.startswith("codecarbon (")
    else:
        assert p.energy_source.startswith("estimate (15 W x time; ")
        assert "codecarbon has no counter here, only a power model (" in p.energy_source


def _fake_codecarbon(monkeypatch, hardware, kwh):
    import codecarbon

    class FakeTracker:
        instances: list[FakeTracker] = []

        def __init__(self, **kwargs):
            self.kwargs, self.running, self._hardware = kwargs, False, hardware
            FakeTracker.instances.append(self)

        def start(self):
            self.running = True

        def stop(self):
            self.running = False
            self.final_emissions_data = types.SimpleNamespace(energy_consumed=kwh)
            return 0.0

    monkeypatch.setattr(codecarbon, "OfflineEmissionsTracker", FakeTracker)
    return FakeTracker


def test_codecarbon_counter_is_a_measurement(monkeypatch):
    pytest.importorskip("codecarbon")
    monkeypatch.setattr(profile_mod, "_zeus_joules", lambda fn, dev: (None, "zeus stubbed"))
    fake = _fake_codecarbon(monkeypatch, [_hw("RAM"), _hw("CPU", "intel_rapl")], 2e-6)
    p = profile(tiny_llama(), tokens(2, 8), n_runs=3, energy="measure", region="fr")
    assert p.measured and p.energy_source.startswith("codecarbon (")
    assert p.joules_per_token == pytest.approx(2e-6 * 3.6e6 / (16 * 3), rel=1e-12)
    (tracker,) = fake.instances
    assert tracker.kwargs["country_iso_code"] and not tracker.running and tracker.kwargs["save_to_file"] is False


def test_codecarbon_model_only_is_an_estimate(monkeypatch):
    pytest.importorskip("codecarbon")
    monkeypatch.setattr(profile_mod, "_zeus_joules", lambda fn, dev: (None, "zeus stubbed"))
    monkeypatch.setattr(profile_mod, "read_energy_counter", lambda: None)
    _fake_codecarbon(monkeypatch, [_hw("RAM"), _hw("CPU", "cpu_load")], 5e-6)
    p = profile(tiny_llama(), tokens(2, 8), n_runs=2, energy="auto", power_w=10.0)
    assert not p.measured and "only a power model" in p.energy_source
    assert p.joules_per_token == pytest.approx(10.0 * p.latency_ms / 1e3 / 16, rel=0.5)  # P x t, not codecarbon's
    assert p.joules_per_token != pytest.approx(5e-6 * 3.6e6 / 32)
    with pytest.raises(RuntimeError, match="only a power model"):
        profile(tiny_llama(), tokens(2, 8), n_runs=1, energy="measure")


def _fake_zeus(monkeypatch, joules: float, fail: bool = False):
    class Measurement:
        def __init__(self, total_energy: float) -> None:
            self.total_energy = total_energy

    class ZeusMonitor:
        made: list[ZeusMonitor] = []

        def __init__(self, gpu_indices=None, cpu_indices=None):
            if fail:
                raise RuntimeError("no RAPL / NVML available")
            self.gpu_indices, self.cpu_indices, self.open = gpu_indices, cpu_indices, {}
            ZeusMonitor.made.append(self)

        def begin_window(self, key, sync_execution=True):
            assert key not in self.open
            self.open[key] = True

        def end_window(self, key, sync_execution=True):
            del self.open[key]
            return Measurement(joules)

    zeus = types.ModuleType("zeus")
    monitor = types.ModuleType("zeus.monitor")
    monitor.ZeusMonitor = ZeusMonitor
    zeus.monitor = monitor
    monkeypatch.setitem(sys.modules, "zeus", zeus)
    monkeypatch.setitem(sys.modules, "zeus.monitor", monitor)
    return ZeusMonitor


def test_zeus_adapter_with_a_fake_monitor(monkeypatch):
    zeus = _fake_zeus(monkeypatch, joules=4.8)
    monkeypatch.setattr(profile_mod, "_codecarbon_joules", lambda fn: pytest.fail("zeus comes first"))
    p = profile(tiny_llama(), tokens(2, 8), n_runs=3, energy="measure")
    assert p.measured and p.energy_source == "zeus"
    assert p.joules_per_token == pytest.approx(4.8 / (16 * 3), rel=1e-12)
    (mon,) = zeus.made
    assert mon.gpu_indices == [] and mon.open == {}  # CPU model: no GPU asked for, the window closed


def test_zeus_without_counter_falls_through(monkeypatch):
    _fake_zeus(monkeypatch, joules=1.0, fail=True)
    monkeypatch.setattr(profile_mod, "_codecarbon_joules", lambda fn: (None, "codecarbon stubbed"))
    monkeypatch.setattr(profile_mod, "read_energy_counter", lambda: None)
    p = profile(tiny_llama(), tokens(2, 8), n_runs=2, energy="auto")
    assert not p.measured and p.joules_per_token > 0
    assert "zeus has no counter here (RuntimeError: no RAPL / NVML available)" in p.energy_source


def test_zeus_not_installed_is_guarded(monkeypatch):
    monkeypatch.setitem(sys.modules, "zeus", None)  # import zeus raises ImportError
    monkeypatch.setitem(sys.modules, "zeus.monitor", None)
    j, why = profile_mod._zeus_joules(lambda: None, torch.device("cpu"))
    assert j is None and why == "zeus not installed"
