"""icml25_shared.distributed.launch: results per rank, collectives across ranks, errors and bad arguments."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
from icml25_shared.distributed import free_port, launch  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not dist.is_available(), reason="needs fork and gloo")


def _all_reduce(rank: int, world_size: int, base: float) -> dict:
    t = torch.tensor([base + rank], dtype=torch.float64)
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t, "env": os.environ["RANK"]}


def _boom(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("rank one fails on purpose")


def _die(rank: int, world_size: int) -> None:
    if rank == 0:
        os._exit(3)


def test_launch_returns_each_rank_result_after_a_collective():
    out = launch(_all_reduce, 2, args=(1.5,))
    assert [o["rank"] for o in out] == [0, 1] and all(o["world"] == 2 for o in out)
    assert [o["env"] for o in out] == ["0", "1"]
    for o in out:
        assert torch.equal(o["sum"], torch.tensor([1.5 + 2.5], dtype=torch.float64))


def test_launch_single_rank():
    assert launch(_all_reduce, 1, args=(2.0,))[0]["sum"].item() == 2.0


def test_launch_reraises_the_rank_traceback():
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 raised:(.|\n)*rank one fails on purpose"):
        launch(_boom, 2, timeout=60)


def test_launch_reports_a_rank_that_died():
    with pytest.raises(RuntimeError, match="rank 0 of 2 died with exit code 3"):
        launch(_die, 2, timeout=60)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"world_size": 0}, "world_size must be an int >= 1"),
        ({"backend": "mpi"}, "backend must be 'gloo' or 'nccl'"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"start_method": "thread"}, "start_method must be"),
    ],
)
def test_launch_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        launch(_all_reduce, **{"world_size": 2, **kwargs})


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_shard_bounds_cover_every_item_once():
    from icml25_shared.distributed import shard_bounds

    for n in (0, 1, 7, 10):
        for world in (1, 2, 3, 4):
            bounds = [shard_bounds(n, r, world) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    with pytest.raises(ValueError, match="rank must be an int in"):
        shard_bounds(5, 2, 2)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        shard_bounds(5, 0, 0)


def _gather_cols(rank: int, world_size: int, full: torch.Tensor) -> torch.Tensor:
    from icml25_shared.distributed import all_gather_uneven, shard_bounds

    a, b = shard_bounds(full.shape[1], rank, world_size)
    return all_gather_uneven(full[:, a:b] * 1, full.shape[1], dim=1)


def test_all_gather_uneven_rebuilds_the_whole_tensor():
    full = torch.arange(15.0).reshape(3, 5)  # 5 columns over 2 ranks: 3 + 2
    out = launch(_gather_cols, 2, args=(full,))
    for t in out:
        assert torch.equal(t, full)
