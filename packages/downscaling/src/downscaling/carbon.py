"""Energy and operational carbon (Strubell et al. 2019, Sec. 2; Patterson et al. 2021, Sec. 2):

.. math::

    \\text{CO}_2\\text{e} = E_\\text{kWh} \\cdot \\text{PUE} \\cdot \\text{CI},
    \\qquad 1\\ \\text{kWh} = 3.6 \\cdot 10^6\\ \\text{J}

CI is the carbon intensity of the grid in kg CO2e per kWh. :data:`CARBON_INTENSITY` holds approximate annual
averages for a few regions (dated in :data:`CI_SOURCE`); pass ``ci=`` for anything more precise.
"""

from __future__ import annotations

import math
from typing import Any

from icml25_shared.validate import check_choice, check_float

__all__ = [
    "CARBON_INTENSITY",
    "CI_SOURCE",
    "JOULES_PER_KWH",
    "carbon_intensity",
    "co2e",
    "joules_to_kwh",
    "kwh_to_joules",
]

JOULES_PER_KWH = 3.6e6

CI_SOURCE = (
    "approximate 2023 annual grid averages, kg CO2e/kWh, rounded from Ember's Global Electricity Review 2024 "
    "(world) and national yearly data; table dated 2024-06, for illustration -- pass ci= for real accounting"
)
CARBON_INTENSITY: dict[str, float] = {
    "world": 0.48,
    "us": 0.37,
    "eu": 0.24,
    "gb": 0.24,
    "de": 0.38,
    "fr": 0.06,
    "se": 0.04,
    "in": 0.71,
    "cn": 0.58,
}


def _nonneg(name: str, value: Any) -> float:
    v = check_float(name, value, min=0.0)
    assert v is not None
    return v


def joules_to_kwh(joules: float) -> float:
    """Joules to kilowatt-hours (÷ 3.6e6).

    Args:
        joules: energy, finite and ≥ 0.

    Returns:
        The energy in kWh.

    Raises:
        ValueError: negative or NaN energy.
    """
    return _nonneg("joules", joules) / JOULES_PER_KWH


def kwh_to_joules(kwh: float) -> float:
    """Kilowatt-hours to joules (× 3.6e6).

    Args:
        kwh: energy, finite and ≥ 0.

    Returns:
        The energy in joules.

    Raises:
        ValueError: negative or NaN energy.
    """
    return _nonneg("kwh", kwh) * JOULES_PER_KWH


def carbon_intensity(region: str) -> float:
    """kg CO2e per kWh of ``region``.

    Args:
        region: a key of :data:`CARBON_INTENSITY`, case-insensitive.

    Returns:
        The intensity in kg CO2e per kWh.

    Raises:
        ValueError: an unknown region (the message lists the known ones).
    """
    if not isinstance(region, str):
        raise ValueError(f"region must be one of {sorted(CARBON_INTENSITY)}, got {region!r}")
    return CARBON_INTENSITY[check_choice("region", region.lower(), tuple(CARBON_INTENSITY))]


def co2e(kwh: float, pue: float = 1.0, ci: float | None = None, *, region: str | None = None) -> float:
    """Operational emissions in kg CO2e = kwh · PUE · CI.

    Args:
        kwh: energy used, ≥ 0.
        pue: power usage effectiveness, at least 1.
        ci: carbon intensity in kg CO2e per kWh; give it or ``region``, not both.
        region: a key of :data:`CARBON_INTENSITY` (default ``world`` when ``ci`` is ``None``).

    Returns:
        kg CO2e.

    Raises:
        ValueError: a bad argument, both ``ci`` and ``region``, or an overflow.
    """
    e = _nonneg("kwh", kwh)
    p = check_float("pue", pue, min=1.0)
    if ci is None:
        c = carbon_intensity(region or "world")
    else:
        if region is not None:
            raise ValueError(f"give ci or region, not both (got ci={ci!r}, region={region!r})")
        c = _nonneg("ci", ci)
    out = e * p * c
    if not math.isfinite(out):
        raise ValueError(f"co2e overflowed: kwh={e}, pue={p}, ci={c}")
    return out
