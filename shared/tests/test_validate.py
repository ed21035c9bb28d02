"""icml25_shared.validate: accepted forms, refused forms, and messages naming argument, value and expectation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml25_shared.validate import (
    ArgumentTypeError,
    check_array,
    check_bool,
    check_choice,
    check_finite,
    check_float,
    check_int,
)


def test_int_accepts_numpy_integers_and_returns_python_int():
    for v in (3, np.int64(3), np.int32(3), np.array(3), np.uint8(3)):
        out = check_int("k", v, min=1)
        assert out == 3 and type(out) is int


@pytest.mark.parametrize(
    ("value", "kw", "exc", "msg"),
    [
        (0, {"min": 1}, ValueError, "rank must be a positive int, got 0"),
        (-1, {"min": 0}, ValueError, "rank must be a non-negative int, got -1"),
        (True, {"min": 1}, ArgumentTypeError, "rank must be a positive int, got True"),
        (2.0, {}, ArgumentTypeError, "rank must be an int, got 2.0"),
        ("3", {}, ArgumentTypeError, "rank must be an int, got '3'"),
        (9, {"min": 2, "max": 8}, ValueError, r"rank must be an int in \[2, 8\], got 9"),
        (None, {}, ArgumentTypeError, "got None"),
    ],
)
def test_int_refusals_name_argument_value_and_expectation(value, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        check_int("rank", value, **kw)


def test_type_errors_are_caught_as_value_errors_too():
    with pytest.raises(ValueError):
        check_int("n", 1.5)
    with pytest.raises(TypeError):
        check_int("n", 1.5)
    assert check_int("n", None, allow_none=True) is None


def test_float_ranges_open_and_closed():
    assert check_float("lr", np.float32(0.5), min=0, min_open=True) == 0.5
    assert type(check_float("lr", 1, min=0)) is float
    assert check_float("p", 0.0, min=0, max=1) == 0.0
    with pytest.raises(ValueError, match=r"lr must be a float > 0, got 0.0"):
        check_float("lr", 0.0, min=0, min_open=True)
    with pytest.raises(ValueError, match=r"p must be a float in \[0, 1\), got 1.0"):
        check_float("p", 1.0, min=0, max=1, max_open=True)
    with pytest.raises(ValueError, match="finite, got nan"):
        check_float("x", math.nan)
    with pytest.raises(ValueError, match="finite, got inf"):
        check_float("x", np.inf)
    assert check_float("x", math.inf, allow_inf=True) == math.inf
    with pytest.raises(ArgumentTypeError, match="got False"):
        check_float("x", False)


def test_bool_and_choice():
    assert check_bool("flag", np.bool_(True)) is True
    with pytest.raises(ArgumentTypeError, match="flag must be a bool, got 1"):
        check_bool("flag", 1)
    assert check_choice("mode", "lock", ("lock", "strict")) == "lock"
    with pytest.raises(ValueError, match="mode must be one of 'lock', 'strict', got 'x'"):
        check_choice("mode", "x", ("lock", "strict"))
    with pytest.raises(ValueError, match="got \\[1\\]"):
        check_choice("mode", [1], ("lock",))  # unhashable values are refused, not crashed on
    with pytest.raises(ValueError):
        check_choice("k", True, (1, 2))  # True == 1, but a bool is not the int choice


def test_finite_counts_nan_and_inf():
    check_finite("x", np.array([1.0, 2.0]))
    check_finite("x", np.array([1, 2]))
    with pytest.raises(ValueError, match="x must be finite, .* with 2 NaN and 1 infinite entries"):
        check_finite("x", np.array([np.nan, np.nan, np.inf, 0.0]))
    with pytest.raises(ArgumentTypeError, match="numeric"):
        check_finite("x", "abc")


def test_array_shape_dtype_and_empty():
    a = check_array("X", [[1.0, 2.0], [3.0, 4.0]], shape=("n", "n"), dtype="floating", finite=True)
    assert a.shape == (2, 2)
    with pytest.raises(ValueError, match=r"X must have shape \(n, n\), got ndarray of shape \(2, 3\)"):
        check_array("X", np.zeros((2, 3)), shape=("n", "n"))
    with pytest.raises(ValueError, match="X must have 2 dimensions"):
        check_array("X", np.zeros(3), ndim=2)
    with pytest.raises(ArgumentTypeError, match="floating dtype"):
        check_array("X", np.zeros(3, dtype=int), dtype="floating")
    with pytest.raises(ValueError, match="must not be empty"):
        check_array("X", np.zeros((0, 2)), nonempty=True)
    with pytest.raises(ArgumentTypeError, match="Python objects"):
        check_array("X", [object()])


def test_tensor_checks():
    torch = pytest.importorskip("torch")
    from icml25_shared.validate import check_tensor

    x = torch.zeros(4, 3)
    assert check_tensor("x", x, ndim=2, shape=(None, 3), dtype="floating", device="cpu", finite=True) is x
    with pytest.raises(ArgumentTypeError, match="x must be a torch.Tensor, got ndarray"):
        check_tensor("x", np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"x must have shape \(\*, 4\)"):
        check_tensor("x", x, shape=(None, 4))
    with pytest.raises(ValueError, match="x must have 3 or 4 dimensions"):
        check_tensor("x", x, ndim=(3, 4))
    with pytest.raises(ArgumentTypeError, match="x must have dtype torch.int64, got Tensor"):
        check_tensor("x", x, dtype=torch.int64)
    with pytest.raises(ArgumentTypeError, match="integer dtype"):
        check_tensor("x", x, dtype="integer")
    with pytest.raises(ValueError, match="1 NaN"):
        check_tensor("x", torch.tensor([0.0, float("nan")]), finite=True)
    with pytest.raises(ValueError, match="must be on device cuda"):
        check_tensor("x", x, device="cuda")
