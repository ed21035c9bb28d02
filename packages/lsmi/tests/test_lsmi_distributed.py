"""Two gloo processes on loopback train (DDP) and score exactly like one process.

The two ranks are forked from the test process (rendezvous through a FileStore in tmp_path) instead of being
started by ``torchrun``: they inherit the imported torch, and ``torch._dynamo`` (which DDP imports on first use) is
imported once here rather than in each rank. On a loaded 2-core machine that cuts the test from ~24 s to a few.
"""

import multiprocessing
import sys
import traceback
import warnings

import pytest
import torch
from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import logic_gate

CFG = dict(n_classes=2, epochs_clf=2, epochs_entropy=2, batch_size=32, seed=3)
N = 100  # batches of 32, 32, 32, 4: unequal shards are weighted exactly


def _rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
        x1, x2, y = logic_gate("or", N, seed=7)
        est = LSMIEstimator(LSMIConfig(**CFG, device="cpu")).fit(x1, x2, y, verbose=False)
        inter = est.transform(x1, x2, y)
        if rank == 0:
            torch.save({"state": est.state_dict(), "r": inter.r, "s": inter.s}, out)
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


@pytest.mark.skipif(
    not torch.distributed.is_available() or "fork" not in multiprocessing.get_all_start_methods(),
    reason="needs torch.distributed and fork",
)
def test_ddp_two_processes_match_single_process(tmp_path):
    import torch._dynamo  # DDP imports it on first use: once here, inherited by both ranks

    out, store = tmp_path / "out.pt", tmp_path / "store"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(rank, str(store), str(out))) for rank in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a multi-threaded process
        for p in procs:
            p.start()
    try:
        for p in procs:
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    ddp = torch.load(out, weights_only=False)
    x1, x2, y = logic_gate("or", N, seed=7)
    single = LSMIEstimator(LSMIConfig(**CFG, device="cpu")).fit(x1, x2, y, verbose=False)
    sd = single.state_dict()
    for part in ("heads", "knife1", "knife2"):
        for name, v in sd[part].items():
            torch.testing.assert_close(ddp["state"][part][name], v, atol=2e-5, rtol=1e-4, msg=f"{part}.{name}")
    inter = single.transform(x1, x2, y)
    torch.testing.assert_close(ddp["r"], inter.r, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ddp["s"], inter.s, atol=1e-4, rtol=1e-4)
