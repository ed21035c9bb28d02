"""Two gloo processes on loopback train and score exactly like one process.

The two ranks are started directly (``python -c``, rendezvous through a FileStore in tmp_path) rather than with
``torchrun``, whose launcher process and c10d rendezvous cost more than the check itself.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import logic_gate

CFG = dict(n_classes=2, epochs_clf=2, epochs_entropy=2, batch_size=32, seed=3)
N = 100  # batches of 32, 32, 32, 4: unequal shards are weighted exactly

SCRIPT = textwrap.dedent(
    f"""
    import sys, torch, torch.distributed as dist
    from lsmi import LSMIConfig, LSMIEstimator
    from lsmi.datasets import logic_gate
    rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    x1, x2, y = logic_gate("or", {N}, seed=7)
    est = LSMIEstimator(LSMIConfig(**{CFG!r}, device="cpu")).fit(x1, x2, y, verbose=False)
    inter = est.transform(x1, x2, y)
    if rank == 0:
        torch.save({{"state": est.state_dict(), "r": inter.r, "s": inter.s}}, out)
    dist.destroy_process_group()
    """
)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_ddp_two_processes_match_single_process(tmp_path):
    out, store = tmp_path / "out.pt", tmp_path / "store"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(rank), str(store), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    try:
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
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
