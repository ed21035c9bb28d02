"""Flower deployment engine (Flower 1.42): a SuperLink and two SuperNodes on 127.0.0.1 (insecure), the
package's apps submitted with ``flwr run``, two rounds; the payload bytes per round equal the in-process lazy loop.

Starts real processes (SuperLink, SuperNodes, and the ServerApp/ClientApp subprocesses they spawn) in their own
process groups, bounded in time, and always terminates those groups: ``slow``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fsl_sage import FSLSAGE, client_datasets, digits_cnn_split, load_digits_split
from fsl_sage.flower.app import config_from_run_config

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

BIN = Path(sys.executable).parent
RUN_CONFIG = {
    "method": "fsl_sage",
    "num-server-rounds": 2,
    "num-clients": 2,
    "alpha": 1.0,
    "batch-size": 32,
    "server-update-interval": 5,
    "align-interval": 1,
    "align-epochs": 3,
    "seed": 0,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(v) -> str:
    return json.dumps(v)  # strings, ints and floats are valid TOML in JSON notation


def _write_app(root: Path, results: Path) -> Path:
    app = root / "app"
    app.mkdir()
    conf = "\n".join(f"{k} = {_toml_value(v)}" for k, v in {**RUN_CONFIG, "results-path": str(results)}.items())
    (app / "pyproject.toml").write_text(
        f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fslsagedeploy"
version = "0.1.0"
description = "FSL-SAGE deployment test app"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "icml25"

[tool.flwr.app.components]
serverapp = "fsl_sage.flower.app:server_app"
clientapp = "fsl_sage.flower.app:client_app"

[tool.flwr.app.config]
{conf}
"""
    )
    return app


def _stop(procs: list[subprocess.Popen]) -> None:
    """Terminate each started process group (the SuperLink/SuperNode and the apps they spawned), then kill."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # stragglers in the group, even if the leader exited
        if p.poll() is None:
            p.wait(timeout=5)


@pytest.mark.skipif(not (BIN / "flower-superlink").exists(), reason="flwr CLI not installed next to this Python")
def test_deployment_engine_two_supernodes_equals_in_process_lazy(tmp_path):
    results = tmp_path / "result.json"
    app = _write_app(tmp_path, results)
    home = tmp_path / "flwr_home"
    home.mkdir()
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "FLWR_HOME": str(home)}
    env.setdefault("OMP_NUM_THREADS", "1")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> None:
        with open(tmp_path / log, "wb") as fh:
            procs.append(subprocess.Popen(args, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start(
            [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
             "--disable-runtime-dependency-installation"],
            "superlink.log",
        )  # fmt: skip
        for i in range(2):
            start(
                [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                 "--host", "127.0.0.1", "--port", str(_free_port()),
                 "--node-config", f"partition-id={i} num-partitions=2"],
                f"supernode{i}.log",
            )  # fmt: skip
        run = subprocess.run(
            [str(BIN / "flwr"), "run", str(app), "local", "--stream"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
        assert run.returncode == 0, f"flwr run failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{logs}"
        deadline = time.monotonic() + 60
        while not results.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert results.exists(), f"the ServerApp wrote no results:\n{run.stdout[-3000:]}\n{logs}"
    finally:
        _stop(procs)

    out = json.loads(results.read_text())
    cfg = config_from_run_config(RUN_CONFIG)
    xtr, ytr, xte, yte = load_digits_split(0)
    data = client_datasets(xtr, ytr, 2, alpha=1.0, seed=0)
    torch.manual_seed(cfg.seed)
    c, s, a = digits_cnn_split()
    algo = FSLSAGE(c, s, a, cfg)
    hist = algo.fit(data, eval_data=(xte, yte))
    assert out["payload_per_round"] == [algo.ledger.total_where(round=t) for t in range(cfg.rounds)]
    assert all(w > p for w, p in zip(out["wire_per_round"], out["payload_per_round"]))
    # same weights to float error: at most one borderline test sample may flip
    assert out["accuracy"][str(cfg.rounds)] == pytest.approx(hist.accuracies[-1], abs=1.01 / len(yte))
