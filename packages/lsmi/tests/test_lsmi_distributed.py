"""Two gloo processes on loopback (torchrun) train and score exactly like one process."""

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
    dist.init_process_group("gloo")
    x1, x2, y = logic_gate("or", {N}, seed=7)
    est = LSMIEstimator(LSMIConfig(**{CFG!r}, device="cpu")).fit(x1, x2, y, verbose=False)
    inter = est.transform(x1, x2, y)
    if dist.get_rank() == 0:
        torch.save({{"state": est.state_dict(), "r": inter.r, "s": inter.s}}, sys.argv[1])
    dist.destroy_process_group()
    """
)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_ddp_two_processes_match_single_process(tmp_path):
    script, out = tmp_path / "ddp.py", tmp_path / "out.pt"
    script.write_text(SCRIPT)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        "--master_port=0",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=127.0.0.1:0",
        str(script),
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
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
