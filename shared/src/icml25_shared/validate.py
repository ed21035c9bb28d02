"""Argument checks with messages that name the argument, the value received and what was expected.

Used by every package's config dataclasses and public functions, so that bad input fails at the call that made
it, never deep inside torch or numpy::

    rank = check_int("rank", rank, min=1)                    # "rank must be a positive int, got 0"
    lr = check_float("lr", lr, min=0.0, min_open=True)       # "lr must be a float > 0.0, got nan"
    mode = check_choice("mode", mode, ("lock", "strict"))    # "mode must be one of 'lock', 'strict', got 'x'"
    x = check_tensor("x", x, ndim=3, dtype="floating", finite=True)

numpy scalars (``np.int64(3)``, ``np.float32(0.1)``) and 0-d integer/float arrays are accepted where a Python int
or float is, and come back as Python ``int``/``float``. ``bool`` is never taken for a number. A value of the wrong
type raises :class:`ArgumentTypeError` (both a ``TypeError`` and a ``ValueError``, so callers catching either see
it); a value of the right type but outside its range raises ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

__all__ = [
    "ArgumentTypeError",
    "check_int",
    "check_float",
    "check_bool",
    "check_choice",
    "check_finite",
    "check_tensor",
    "check_array",
    "check_lr",
]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a ``TypeError`` that ``except ValueError`` also catches)."""


def _show(value: Any) -> str:
    """A short repr for messages: tensors and arrays by shape and dtype, not by content."""
    shape = getattr(value, "shape", None)
    if shape is not None and getattr(value, "ndim", 0) > 0:
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {getattr(value, 'dtype', '?')}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _scalar(value: Any) -> Any:
    """Unwrap 0-d numpy arrays / numpy scalars / 0-d tensors to Python numbers; leave everything else."""
    if hasattr(value, "ndim") and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool") and type(value).__module__ == "numpy"


def _range_text(kind: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is None and lo == 0 and kind == "int":
        return "a positive int" if lo_open else "a non-negative int"
    if lo is not None and hi is None and lo == 1 and kind == "int" and not lo_open:
        return "a positive int"
    if lo is not None and hi is not None:
        left, right = ("(" if lo_open else "["), (")" if hi_open else "]")
        return f"{'an' if kind == 'int' else 'a'} {kind} in {left}{lo}, {hi}{right}"
    if lo is not None:
        return f"{'an' if kind == 'int' else 'a'} {kind} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'an' if kind == 'int' else 'a'} {kind} {'<' if hi_open else '<='} {hi}"
    return "an int" if kind == "int" else f"a {kind}"


def _in_range(v: float, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return not (hi is not None and (v >= hi if hi_open else v > hi))


@overload
def check_int(
    name: str, value: Any, *, min: int | None = None, max: int | None = None, allow_none: Literal[False] = False
) -> int: ...
@overload
def check_int(
    name: str, value: Any, *, min: int | None = None, max: int | None = None, allow_none: bool = ...
) -> int | None: ...
def check_int(
    name: str,
    value: Any,
    *,
    min: int | None = None,
    max: int | None = None,
    allow_none: bool = False,
) -> int | None:
    """``value`` as a Python ``int`` in ``[min, max]``; numpy integers accepted, ``bool`` and floats refused."""
    if value is None and allow_none:
        return None
    v = _scalar(value)
    if _is_bool(v) or not isinstance(v, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be {_range_text('int', min, max, False, False)}, got {_show(value)}")
    v = int(v)
    if not _in_range(v, min, max, False, False):
        raise ValueError(f"{name} must be {_range_text('int', min, max, False, False)}, got {v}")
    return v


@overload
def check_float(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    allow_inf: bool = False,
    allow_none: Literal[False] = False,
) -> float: ...
@overload
def check_float(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    allow_inf: bool = False,
    allow_none: bool = ...,
) -> float | None: ...
def check_float(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    allow_inf: bool = False,
    allow_none: bool = False,
) -> float | None:
    """``value`` as a Python ``float`` in the given (half-)open or closed range.

    ints and numpy numbers are accepted; ``bool``, strings and NaN are refused, and so are infinities unless
    ``allow_inf``. ``min_open``/``max_open`` make the bound exclusive (``lr > 0``: ``min=0, min_open=True``).
    """
    if value is None and allow_none:
        return None
    expect = _range_text("float", min, max, min_open, max_open)
    v = _scalar(value)
    if _is_bool(v) or not isinstance(v, numbers.Real):
        raise ArgumentTypeError(f"{name} must be {expect}, got {_show(value)}")
    v = float(v)
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be {expect} and finite, got {v}")
    if not _in_range(v, min, max, min_open, max_open):
        raise ValueError(f"{name} must be {expect}, got {v}")
    return v


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a Python ``bool`` (numpy bools accepted; 0/1 and strings refused)."""
    v = _scalar(value)
    if not _is_bool(v):
        raise ArgumentTypeError(f"{name} must be a bool, got {_show(value)}")
    return bool(v)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` when it is one of ``choices``; else a ``ValueError`` listing them."""
    options = tuple(choices)
    try:
        ok = value in options
    except TypeError:  # unhashable / incomparable
        ok = False
    if not ok or (_is_bool(value) and not any(_is_bool(o) for o in options)):
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}, got {_show(value)}")
    return value


def _nonfinite_count(x: Any) -> tuple[int, int] | None:
    """(NaN count, inf count) of a tensor, array or number; ``None`` when ``x`` is not numeric."""
    if hasattr(x, "is_floating_point") and hasattr(x, "isnan"):  # torch.Tensor
        if not (x.is_floating_point() or x.is_complex()):
            return 0, 0
        return int(x.isnan().sum()), int(x.isinf().sum())
    import numpy as np

    arr = np.asarray(x)
    if arr.dtype.kind not in "fc":
        return (0, 0) if arr.dtype.kind in "biu" else None
    return int(np.isnan(arr).sum()), int(np.isinf(arr).sum())


def check_finite(name: str, x: Any) -> Any:
    """``x`` (tensor, array or number) unchanged when it holds no NaN or infinity; else a ``ValueError``."""
    counts = _nonfinite_count(x)
    if counts is None:
        raise ArgumentTypeError(f"{name} must be numeric, got {_show(x)}")
    nan, inf = counts
    if nan or inf:
        raise ValueError(f"{name} must be finite, got {_show(x)} with {nan} NaN and {inf} infinite entries")
    return x


def _shape_text(shape: Sequence[int | str | None]) -> str:
    return "(" + ", ".join("*" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_shape(name: str, value: Any, actual: tuple[int, ...], ndim: int | Sequence[int] | None, shape: Any) -> None:
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if len(actual) not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got {_show(value)}")
    if shape is not None:
        named: dict[str, int] = {}
        ok = len(shape) == len(actual)
        for want, got in zip(shape, actual):
            if not ok:
                break
            if isinstance(want, str):  # a symbolic size: equal wherever the same name appears
                ok = named.setdefault(want, got) == got
            elif want is not None and want != -1:
                ok = want == got
        if not ok:
            raise ValueError(f"{name} must have shape {_shape_text(shape)}, got {_show(value)}")


def check_tensor(
    name: str,
    x: Any,
    *,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int | str | None] | None = None,
    dtype: Any = None,
    device: Any = None,
    finite: bool = False,
    nonempty: bool = False,
) -> Any:
    """``x`` unchanged when it is a ``torch.Tensor`` of the expected form; else a clear error.

    ``shape`` entries may be ``None`` (any size) or a string (a size shared by every dimension with that name);
    ``dtype`` is a ``torch.dtype``, a tuple of them, or one of ``"floating"``, ``"integer"``, ``"bool"``;
    ``device`` a device or its type (``"cpu"``, ``"cuda"``); ``finite`` checks for NaN/inf; ``nonempty`` refuses
    zero elements.
    """
    import torch

    if not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {_show(x)}")
    _check_shape(name, x, tuple(x.shape), ndim, shape)
    if dtype is not None:
        if dtype == "floating":
            ok, want = x.is_floating_point(), "a floating dtype"
        elif dtype == "integer":
            ok, want = (not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool), "an integer dtype"
        elif dtype == "bool":
            ok, want = x.dtype == torch.bool, "dtype torch.bool"
        else:
            allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
            ok, want = x.dtype in allowed, "dtype " + " or ".join(str(d) for d in allowed)
        if not ok:
            raise ArgumentTypeError(f"{name} must have {want}, got {_show(x)}")
    if device is not None:
        want_dev = torch.device(device) if not isinstance(device, torch.device) else device
        same = x.device.type == want_dev.type and (want_dev.index is None or x.device.index == want_dev.index)
        if not same:
            raise ValueError(f"{name} must be on device {want_dev}, got a tensor on {x.device}")
    if nonempty and x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got {_show(x)}")
    if finite:
        check_finite(name, x)
    return x


def check_array(
    name: str,
    x: Any,
    *,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int | str | None] | None = None,
    dtype: Any = None,
    finite: bool = False,
    nonempty: bool = False,
) -> Any:
    """``np.asarray(x)`` when it has the expected form (numpy counterpart of :func:`check_tensor`).

    ``dtype`` is ``"floating"``, ``"integer"``, ``"numeric"`` or a numpy dtype; when a dtype kind is asked for and
    ``x`` is not of that kind, ``x`` is refused, not cast.
    """
    import numpy as np

    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:
        raise ArgumentTypeError(f"{name} must be array-like, got {_show(x)}") from err
    if arr.dtype == object:
        raise ArgumentTypeError(f"{name} must be a numeric array, got an array of Python objects ({_show(x)})")
    _check_shape(name, arr, tuple(arr.shape), ndim, shape)
    if dtype is not None:
        kinds = {"floating": "f", "integer": "iu", "numeric": "fiub"}
        if isinstance(dtype, str) and dtype in kinds:
            ok, want = arr.dtype.kind in kinds[dtype], f"a {dtype} dtype"
        else:
            ok, want = arr.dtype == np.dtype(dtype), f"dtype {np.dtype(dtype)}"
        if not ok:
            raise ArgumentTypeError(f"{name} must have {want}, got {_show(arr)}")
    if nonempty and arr.size == 0:
        raise ValueError(f"{name} must not be empty, got {_show(arr)}")
    if finite:
        check_finite(name, arr)
    return arr


def check_lr(name: str, value: Any) -> float:
    """A learning rate as ``torch.optim`` takes it: a non-negative float, or a 1-element tensor (returned as float)."""
    if hasattr(value, "numel") and hasattr(value, "is_floating_point") and getattr(value, "ndim", 0) > 0:
        if value.numel() != 1:
            raise ValueError(f"{name} as a tensor must have 1 element, got shape {tuple(value.shape)}")
        value = value.reshape(())
    return check_float(name, value, min=0.0)
