"""Scale: the stateless multi-step neuron under torch DDP (2 gloo processes on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from fpt_snn.config import FPTConfig
    from fpt_snn.reproduce import FPTNeuron, SNNClassifier

    STEPS, B, T = 5, 16, 6

    def data():
        g = torch.Generator().manual_seed(0)
        X = torch.rand(STEPS, 2 * B, 10, generator=g, dtype=torch.float64)
        y = torch.randint(0, 3, (STEPS, 2 * B), generator=g)
        return X, y

    def model():
        torch.manual_seed(0)
        m = SNNClassifier(10, 24, 3, FPTNeuron(FPTConfig(K=3, output="heaviside"))).double()
        return m

    def train(m, X, y):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        for k in range(STEPS):
            loss = torch.nn.functional.cross_entropy(m(X[k].unsqueeze(0).expand(T, -1, -1)), y[k])
            opt.zero_grad(); loss.backward(); opt.step()
        return m

    def worker(rank, port, out):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        X, y = data()
        ddp = torch.nn.parallel.DistributedDataParallel(model())
        sl = slice(rank * B, (rank + 1) * B)
        train(ddp, X[:, sl], y[:, sl])
        flat = torch.cat([p.detach().flatten() for p in ddp.module.parameters()])
        torch.save(flat, f"{out}/rank{rank}.pt")
        dist.destroy_process_group()

    if __name__ == "__main__":
        port, out = int(sys.argv[1]), sys.argv[2]
        mp.spawn(worker, args=(port, out), nprocs=2, join=True)
        torch.set_num_threads(1)
        X, y = data()
        single = train(model(), X, y)
        flat = torch.cat([p.detach().flatten() for p in single.parameters()])
        r0, r1 = torch.load(f"{out}/rank0.pt"), torch.load(f"{out}/rank1.pt")
        init = torch.cat([p.detach().flatten() for p in model().parameters()])
        print(json.dumps({"rank_diff": (r0 - r1).abs().max().item(), "single_diff": (r0 - flat).abs().max().item(),
                          "moved": (r0 - init).abs().max().item()}))
    """
)


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_single_process(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "ddp_check.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(port), str(tmp_path)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["rank_diff"] == 0.0
    assert res["single_diff"] <= 1e-6
    assert res["moved"] > 1e-3
