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


def test_save_results_writes_numpy_and_torch_values_and_a_log(tmp_path, capsys):
    import json

    torch = pytest.importorskip("torch")
    log = bench.Log()
    log("ratio 1.50x")
    log(2)
    assert capsys.readouterr().out == "ratio 1.50x\n2\n"
    results = {
        "f32": np.float32(0.5),
        "i64": np.int64(3),
        "arr": np.arange(3),
        "t": torch.tensor([1.5, 2.0]),
        "t0": torch.tensor(7),
        "path": tmp_path / "x",
    }
    out = bench.save_results(tmp_path / "sub" / "r.json", results, log)
    back = json.loads(out.read_text())
    assert back == {"f32": 0.5, "i64": 3, "arr": [0, 1, 2], "t": [1.5, 2.0], "t0": 7, "path": str(tmp_path / "x")}
    assert type(back["i64"]) is int
    assert out.with_suffix(".log").read_text() == "ratio 1.50x\n2\n"


def test_save_results_refuses_unknown_objects(tmp_path):
    with pytest.raises(TypeError, match="cannot write a builtins.object"):
        bench.save_results(tmp_path / "r.json", {"x": object()}, [])


def test_round_robin_reads_the_clock_it_is_given():
    from icml25_shared import bench

    ticks = iter(range(1000))
    calls: list[str] = []
    out = bench.round_robin(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        repeats=3,
        clock=lambda: float(next(ticks)),
    )
    assert calls == ["a", "b", "b", "a", "a", "b"]  # the order rotates every round
    assert out["a"].times == [1.0, 1.0, 1.0] and out["b"].times == [1.0, 1.0, 1.0]  # one tick per call


def test_round_robin_shuffles_and_runs_the_between_call_untimed():
    from icml25_shared import bench

    ticks = iter(range(10_000))
    calls: list[str] = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abcd"}
    out = bench.round_robin(
        fns,
        repeats=40,
        order="shuffle",
        between=lambda: (calls.append("|"), next(ticks)),
        clock=lambda: float(next(ticks)),
    )
    rounds = [calls[i : i + 8] for i in range(0, len(calls), 8)]
    assert all(r[0::2] == ["|"] * 4 and sorted(r[1::2]) == list("abcd") for r in rounds)  # a permutation per round
    predecessors = {(r[1::2][i - 1], r[1::2][i]) for r in rounds for i in range(1, 4)}
    assert len(predecessors) > 6  # not the rotation's fixed pairs (4 of them)
    assert all(t == [1.0] * 40 for t in (v.times for v in out.values()))  # the between call is not timed
    again: list[str] = []
    bench.round_robin({k: (lambda k=k: again.append(k)) for k in "abcd"}, repeats=40, order="shuffle")
    assert again == [c for c in calls if c != "|"]  # seeded: the same orders
    with pytest.raises(ValueError, match="order must be"):
        bench.round_robin(fns, order="random")


def test_paired_ratios_per_round_from_timings_or_lists():
    from icml25_shared.bench import Timing, paired

    p = paired(Timing([2.0, 3.0, 8.0]), [4.0, 3.0, 2.0])  # per round 0.5, 1.0, 4.0
    assert p == {"ratio": 1.0, "lo": 0.5, "hi": 4.0, "ratio_rounds": [0.5, 1.0, 4.0]}
    assert paired([1.0, 1.0], Timing([2.0, 4.0]))["ratio"] == 0.375  # median of 0.5, 0.25: not a ratio of medians
    for a, b in (([1.0], [1.0, 2.0]), ([], [])):
        with pytest.raises(ValueError, match="same number"):
            paired(a, b)
    for a, b in (([1.0], [0.0]), ([float("nan")], [1.0])):  # a zero from a coarse clock, a nan
        with pytest.raises(ValueError, match="positive, finite"):
            paired(a, b)
