"""Two gloo processes on loopback train (DDP) and score exactly like one process.

The two ranks are forked from the test process (``icml25_shared.distributed.launch``) instead of being started by
``torchrun``: they inherit the imported torch, and ``torch._dynamo`` (which DDP imports on first use) is imported
once here rather than in each rank. On a loaded 2-core machine that cuts the test from ~24 s to a few.
"""

import pytest
import torch

from icml25_shared.distributed import launch
from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import logic_gate

CFG = dict(n_classes=2, epochs_clf=2, epochs_entropy=2, batch_size=32, seed=3)
N = 100  # batches of 32, 32, 32, 4: unequal shards are weighted exactly


def _rank(rank: int, world: int) -> dict:
    x1, x2, y = logic_gate("or", N, seed=7)
    est = LSMIEstimator(LSMIConfig(**CFG, device="cpu")).fit(x1, x2, y, verbose=False)
    inter = est.transform(x1, x2, y)
    return {"state": est.state_dict(), "r": inter.r, "s": inter.s}


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_ddp_two_processes_match_single_process():
    import torch._dynamo

    ddp = launch(_rank, 2, timeout=300)[0]
    x1, x2, y = logic_gate("or", N, seed=7)
    single = LSMIEstimator(LSMIConfig(**CFG, device="cpu")).fit(x1, x2, y, verbose=False)
    sd = single.state_dict()
    for part in ("heads", "knife1", "knife2"):
        for name, v in sd[part].items():
            torch.testing.assert_close(ddp["state"][part][name], v, atol=2e-5, rtol=1e-4, msg=f"{part}.{name}")
    inter = single.transform(x1, x2, y)
    torch.testing.assert_close(ddp["r"], inter.r, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ddp["s"], inter.s, atol=1e-4, rtol=1e-4)
