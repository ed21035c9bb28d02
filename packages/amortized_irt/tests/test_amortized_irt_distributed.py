"""Taker rows sharded over 2 gloo processes on loopback: the all-reduced EM gives the same items as one process."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch.distributed as dist
from amortized_irt_testing import rasch_data

from amortized_irt import Rasch, ResponseMatrix, TwoPL
from icml25_shared.distributed import launch

pytestmark = pytest.mark.skipif(not dist.is_available() or sys.platform != "linux", reason="needs torch.distributed")


def _fit(rank: int, world: int, Y: np.ndarray, cls_name: str):
    cls = {"Rasch": Rasch, "TwoPL": TwoPL}[cls_name]
    m = cls(tol=1e-300, max_iter=15).fit(ResponseMatrix.from_dense(Y), distributed=True)
    return m.difficulty_, m.discrimination_, m.theta_, m.loglik_trace_


@pytest.mark.parametrize("cls", [Rasch, TwoPL])
def test_two_processes_equal_one(cls):
    Y, *_ = rasch_data(301, 12, seed=0, density=0.7)
    single = cls(tol=1e-300, max_iter=15).fit(Y)  # same iteration count
    out = launch(_fit, 2, (Y, cls.__name__))
    for b, a, theta, trace in out:
        assert np.abs(b - single.difficulty_).max() < 1e-10
        assert np.abs(a - single.discrimination_).max() < 1e-10
        assert np.abs(theta - single.theta_).max() < 1e-10
        assert len(trace) == len(single.loglik_trace_)
