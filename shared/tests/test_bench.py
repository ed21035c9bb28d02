import time

import numpy as np
import pytest

from icml25_shared import bench


def test_compare_ratio_reflects_known_cost():
    short = lambda: time.sleep(0.002)  # noqa: E731
    long = lambda: time.sleep(0.008)  # noqa: E731
    cmp = bench.compare(short, long, names=("short", "long"), warmup=1, repeats=6)
    assert 2.0 < cmp.ratio < 6.0  # nominal 4x; sleep granularity and load widen the band
    assert len(cmp.a.times) == len(cmp.b.times) == 6
    assert cmp.to_dict()["ratio_b_over_a"] == cmp.ratio


def test_measure_counts_and_validates():
    calls = []
    t = bench.measure(lambda: calls.append(1), warmup=3, repeats=5)
    assert len(calls) == 8 and len(t.times) == 5 and t.median >= 0
    with pytest.raises(ValueError):
        bench.measure(lambda: None, repeats=0)


def test_peak_memory_sees_a_large_allocation():
    n = 200 * 2**20  # 200 MiB

    def alloc():
        a = np.ones(n, dtype=np.uint8)
        time.sleep(0.05)
        return a.sum()

    peak = bench.peak_memory(alloc)
    assert 150 * 2**20 < peak < 400 * 2**20
    assert bench.peak_memory(lambda: None) < 50 * 2**20


def test_round_robin_rotates_the_order_and_times_every_callable():
    from icml25_shared.bench import round_robin

    calls: list[str] = []
    fns = {k: (lambda k=k: calls.append(k)) for k in ("a", "b", "c")}
    out = round_robin(fns, repeats=3, warmup=1)
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert set(out) == {"a", "b", "c"} and all(len(t.times) == 3 for t in out.values())
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        round_robin(fns, repeats=0)
