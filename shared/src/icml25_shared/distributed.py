"""Run a function on several local ``torch.distributed`` ranks joined on loopback.

The packages test their DDP / sharded paths the same way: start ``world_size`` processes, join them in one gloo
process group on 127.0.0.1, run a function on every rank, bring each rank's result back to the caller and
compare it with a single-process run. :func:`launch` does exactly that, with the failure modes handled once:
a free port, a child's traceback re-raised in the parent, a hung rank killed after ``timeout`` seconds.

>>> def add_rank(rank, world_size, x):            # doctest: +SKIP
...     t = torch.tensor([x + rank]); dist.all_reduce(t); return t.item()
>>> launch(add_rank, 2, args=(1,))                # doctest: +SKIP
[3, 3]
"""

from __future__ import annotations

import datetime
import io
import os
import queue as queue_module
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["free_port", "launch", "shard_bounds", "all_gather_uneven"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0 and read back the chosen one)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _dumps(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _child(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    args: Sequence[Any],
    backend: str,
    port: int,
    timeout: float,
    threads: int | None,
    results: Any,
) -> None:
    import torch
    import torch.distributed as dist

    if threads is not None:
        torch.set_num_threads(threads)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
    )  # fmt: skip
    try:
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout))
        try:
            out = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, _dumps(out)))
    except BaseException:  # report everything, including SystemExit from the function
        results.put((rank, False, traceback.format_exc()))
        sys.exit(1)


def launch(
    fn: Callable[..., Any],
    world_size: int = 2,
    args: Sequence[Any] = (),
    *,
    backend: str = "gloo",
    timeout: float = 600.0,
    start_method: str | None = None,
    threads: int | None = 1,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local ranks of one process group; return each result.

    Args:
        fn: a picklable (module-level) function; it runs after ``init_process_group`` and before
            ``destroy_process_group``, with ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` set.
        world_size: number of processes (>= 1).
        args: extra positional arguments, passed to every rank.
        backend: ``"gloo"`` (CPU, default) or ``"nccl"``.
        timeout: seconds for the process-group operations and for the whole run; a rank still running after it
            is killed and :class:`TimeoutError` is raised.
        start_method: ``"fork"`` (default on Linux: the children do not re-import torch) or ``"spawn"``.
        threads: torch intra-op threads per rank (1 by default: ranks share the machine's cores); ``None`` keeps
            torch's default.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``; results travel through ``torch.save``, so tensors, dicts and
        lists of tensors come back intact.

    Raises:
        RuntimeError: a rank raised; the message carries that rank's traceback.
    """
    import torch
    import torch.multiprocessing as mp

    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if start_method is None:
        start_method = "fork" if sys.platform == "linux" else "spawn"
    if start_method not in ("fork", "spawn", "forkserver"):
        raise ValueError(f"start_method must be 'fork', 'spawn' or 'forkserver', got {start_method!r}")
    if not torch.distributed.is_available():
        raise RuntimeError("this torch build has no torch.distributed")

    ctx: Any = mp.get_context(start_method)  # a torch.multiprocessing context (Process, Queue)
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_child, args=(fn, r, world_size, tuple(args), backend, port, timeout, threads, results))
        for r in range(world_size)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork of a multi-threaded process
        for p in procs:
            p.start()
    collected: dict[int, tuple[bool, Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(collected) < world_size:
            try:
                rank, ok, payload = results.get(timeout=0.2)
            except queue_module.Empty:
                lost = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in collected]
                if lost and results.empty():
                    raise RuntimeError(
                        f"launch: rank {lost[0]} of {world_size} died with exit code {procs[lost[0]].exitcode} "
                        "before returning a result"
                    ) from None
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world_size)) - set(collected))
                    raise TimeoutError(f"launch: ranks {missing} gave no result within {timeout} s") from None
                continue
            collected[rank] = (ok, payload)
            if not ok:
                break
    finally:
        for p in procs:
            p.join(timeout=60 if len(collected) == world_size else 2)
            if p.is_alive():
                p.kill()
                p.join()
    failed = {r: msg for r, (ok, msg) in collected.items() if not ok}
    if failed:
        rank, msg = min(failed.items())
        # a rank that exited by itself (positive code, no result) is the likelier root cause: the others then fail
        # in their collectives ("connection reset by peer")
        dead = [r for r, p in enumerate(procs) if r not in collected and (p.exitcode or 0) > 0]
        if dead:
            raise RuntimeError(
                f"launch: rank {dead[0]} of {world_size} died with exit code {procs[dead[0]].exitcode} before "
                f"returning a result; then rank {rank} raised:\n{msg}"
            )
        raise RuntimeError(f"launch: rank {rank} of {world_size} raised:\n{msg}")
    return [torch.load(io.BytesIO(collected[r][1]), weights_only=False) for r in range(world_size)]


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous shard of ``n`` items; shards differ in size by at most one (the
    first ``n % world_size`` ranks get one more). Used to split rows (bisection_proj) or columns (unifews)."""
    from icml25_shared.validate import check_int

    n = check_int("n", n, min=0)
    world_size = check_int("world_size", world_size, min=1)
    rank = check_int("rank", rank, min=0, max=world_size - 1)
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def all_gather_uneven(t: torch.Tensor, n: int, dim: int = 0, group: Any = None) -> torch.Tensor:
    """Every rank's shard of ``t`` along ``dim`` (sized by :func:`shard_bounds` of ``n``), gathered in rank order.

    ``torch.distributed.all_gather`` needs equal sizes: each shard is zero-padded to the largest, gathered, and
    the padding cut off, so every rank returns the whole ``n``-long tensor.
    """
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    dim = dim % t.dim()
    lo, hi = shard_bounds(n, rank, world)
    if t.shape[dim] != hi - lo:
        raise ValueError(f"rank {rank}'s shard must have {hi - lo} entries along dim {dim}, got {t.shape[dim]}")
    width = -(-n // world)
    shape = list(t.shape)
    shape[dim] = width
    padded = t.new_zeros(shape)
    padded.narrow(dim, 0, hi - lo).copy_(t)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous(), group=group)
    pieces = []
    for r, part in enumerate(parts):
        a, b = shard_bounds(n, r, world)
        pieces.append(part.narrow(dim, 0, b - a))
    return torch.cat(pieces, dim=dim)
