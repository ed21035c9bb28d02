"""Bad input raises a ValueError naming the argument, the value and the expectation (or is handled correctly)."""

from __future__ import annotations

import numpy as np
import pytest
from amortized_irt_testing import rasch_data

from amortized_irt import Rasch, ResponseMatrix, from_mirt, to_mirt


def test_fractional_entry_indices_are_refused_not_truncated():
    with pytest.raises(ValueError, match=r"rows must hold integer indices, got 0\.7 at position 0"):
        ResponseMatrix(rows=[0.7, 1.6], cols=[0, 1], values=[1, 0], shape=(2, 2))
    with pytest.raises(ValueError, match=r"cols must hold integer indices, got 1\.5 at position 1"):
        ResponseMatrix(rows=[0, 1], cols=[0, 1.5], values=[1, 0], shape=(2, 2))
    R = ResponseMatrix(rows=[0.0, 1.0], cols=[1.0, 0.0], values=[1, 0], shape=(2, 2))  # whole floats are fine
    assert R.rows.tolist() == [0, 1] and R.cols.tolist() == [1, 0]


def test_ability_prior_must_be_a_mean_and_a_positive_sd():
    Y, *_ = rasch_data(60, 8, seed=12)
    m = Rasch().fit(Y)
    for method in ("eap", "map"):
        with pytest.raises(ValueError, match=r"prior\[1\] must be a float > 0(\.0)?, got -1"):
            m.ability(Y, method=method, prior=(0, -1))
        with pytest.raises(ValueError, match=r"prior\[1\] must be a float > 0(\.0)?, got 0"):
            m.ability(Y, method=method, prior=(0, 0))
    with pytest.raises(ValueError, match=r"prior\[0\] must be a float and finite, got nan"):
        m.ability(Y, prior=(np.nan, 1.0))
    with pytest.raises(ValueError, match="prior must be a pair"):
        m.ability(Y, prior=(0.0, 1.0, 2.0))
    ok = m.ability(Y, prior=(np.float32(0.5), 2))[0]
    assert np.isfinite(ok).all()


def test_mirt_conversion_refuses_undefined_parameters():
    with pytest.raises(ValueError, match=r"params\['b'\].*finite.*NaN"):
        to_mirt({"b": np.array([0.1, np.nan])})
    with pytest.raises(ValueError, match=r"params\['a1'\] must be > 0 \(a discrimination\), got 0 at item 0"):
        from_mirt({"a1": np.array([0.0, 1.0]), "d": np.array([0.5, 0.2])})
    with pytest.raises(ValueError, match=r"params\['g'\] must lie in \[0, 1\)"):
        from_mirt({"d": np.zeros(2), "g": np.array([0.2, 1.0])})
    with pytest.raises(ValueError, match=r"must contain 'd'"):
        from_mirt({"a1": np.ones(2)})


def test_subset_refuses_repeated_and_out_of_range_indices():
    R = ResponseMatrix.from_dense(rasch_data(20, 4, seed=0)[0])
    with pytest.raises(ValueError, match="idx must not repeat an index.*got 0 2 times"):
        R.subset_items([0, 0, 1])
    with pytest.raises(ValueError, match="idx must not repeat an index.*got 3 2 times"):
        R.subset_takers([3, 1, 3])
    with pytest.raises(ValueError, match=r"idx must lie in \[0, 4\), got 4 at position 1"):
        R.subset_items([0, 4])
    assert R.subset_items([2, 0]).n_items == 2


def test_missing_code_accepts_numpy_nan_scalars():
    Y = np.array([[1.0, np.nan], [0.0, 1.0]])
    for code in (np.nan, np.float32("nan"), np.float64("nan")):
        R = ResponseMatrix.from_dense(Y, missing=code)
        assert R.nnz == 3


def test_distributed_without_a_process_group_names_the_argument():
    Y, *_ = rasch_data(40, 5, seed=0)
    with pytest.raises(ValueError, match="distributed=True needs an initialised torch.distributed process group"):
        Rasch().fit(Y, distributed=True)
