"""SoftShapeNet under torch DDP: 2 gloo processes on loopback match one process on the concatenated batch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from softshape import SoftShapeConfig, SoftShapeNet

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from softshape import SoftShapeConfig, SoftShapeNet


    def worker(rank, init_file, out_prefix):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
        torch.manual_seed(0)
        net = SoftShapeNet(SoftShapeConfig(n_timepoints=40, n_classes=3, shape_size=8, emb_dim=16, dropout=0.0))
        ddp = DDP(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(8, 1, 40, generator=g), torch.arange(8) % 3
        xs, ys = x[rank * 4 : (rank + 1) * 4], y[rank * 4 : (rank + 1) * 4]
        for _ in range(3):
            out = ddp(xs)
            loss = F.cross_entropy(out.logits, ys) + 1e-3 * out.aux_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save(net.state_dict(), f"{out_prefix}{rank}.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(sys.argv[1], sys.argv[2]), nprocs=2, join=True)
    """
)


@pytest.mark.slow
def test_ddp_two_processes_match_single_process(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(SCRIPT)
    subprocess.run(
        [sys.executable, str(script), str(tmp_path / "init"), str(tmp_path / "rank")],
        check=True,
        timeout=600,
        capture_output=True,
    )
    torch.manual_seed(0)
    net = SoftShapeNet(SoftShapeConfig(n_timepoints=40, n_classes=3, shape_size=8, emb_dim=16, dropout=0.0))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 1, 40, generator=g), torch.arange(8) % 3
    for _ in range(3):
        out = net(x)
        loss = torch.nn.functional.cross_entropy(out.logits, y) + 1e-3 * out.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for key, ref in net.state_dict().items():
        torch.testing.assert_close(ranks[0][key], ranks[1][key], atol=0, rtol=0)
        torch.testing.assert_close(ranks[0][key], ref, atol=1e-6, rtol=0)
