"""The run_config-driven apps of ``eagles.app`` (what ``flwr run`` submits): in process on the loopback grid (default)
and on Flower's Deployment Engine, a SuperLink and two SuperNodes on 127.0.0.1 (``slow``). Both equal
:func:`eagles.sim.run_inprocess` on the same graphs and configuration, bit for bit."""

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch
from flwr.app import Context, RecordDict

from eagles.app import clientapp, clients_from_run_config, config_from_run_config, serverapp
from eagles.flower import LocalGrid
from eagles.sim import run_inprocess
from icml25_shared.distributed import free_port

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

EXAMPLE = Path(__file__).parents[1] / "examples" / "flwr_app"


def _example_run_config(**over):
    with open(EXAMPLE / "pyproject.toml", "rb") as fh:
        table = tomllib.load(fh)["tool"]["flwr"]["app"]["config"]
    rc = {k: v for k, v in table.items() if not isinstance(v, dict)}
    rc.update({f"eagles.{k}": v for k, v in table["eagles"].items()})
    rc.update(over)
    return rc


def _assert_equal_to_inprocess(result, rc):
    ref = run_inprocess(clients_from_run_config(rc), config_from_run_config(rc), rc["num-rounds"])
    assert result["history"] == ref.history
    assert sorted(result["personal"]) == sorted(ref.server.personal)
    for pid, state in ref.server.personal.items():
        for key, value in state.items():
            assert torch.equal(result["personal"][pid][key], value), (pid, key)


def test_run_config_is_parsed_into_the_config_and_the_graphs():
    rc = _example_run_config(**{"eagles.keep-ratios": "0.8, 0.4", "eagles.top-s": 1, "num-clients": 3})
    cfg = config_from_run_config(rc)
    assert cfg.keep_ratios == (0.8, 0.4) and cfg.bands == (0.9, 0.7, 0.5, 0.3) and cfg.hidden_channels == 16
    clients = clients_from_run_config(rc)
    assert len(clients) == 3 and sum(c.num_nodes for c in clients) == rc["num-nodes"]
    with pytest.raises(ValueError, match="unknown EaglesConfig field"):
        config_from_run_config({"eagles.hiden-channels": 4})
    with pytest.raises(ValueError, match="dataset"):
        clients_from_run_config({"dataset": "Pubmed!"})


def test_run_config_apps_in_process_equal_run_inprocess(tmp_path):
    rc = _example_run_config(**{"num-rounds": 2, "result-file": str(tmp_path / "result.pt")})
    grid = LocalGrid(clientapp, rc["num-clients"], run_config=rc, seed=3)
    serverapp(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    _assert_equal_to_inprocess(torch.load(tmp_path / "result.pt", weights_only=False), rc)


def _wait_for(path: Path, procs, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            time.sleep(1.0)  # torch.save has returned before the ServerApp logs its end
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise AssertionError(f"a Flower process exited early: {[p.args[0] for p in dead]}")
        time.sleep(0.5)
    raise AssertionError(f"no result after {timeout:.0f} s")


@pytest.mark.slow
def test_deployment_engine_superlink_and_two_supernodes_equal_run_inprocess(tmp_path):
    """``flower-superlink --insecure`` + 2 ``flower-supernode --insecure`` on 127.0.0.1, the example app submitted
    with ``flwr run``: the ServerApp's history and personalised models equal the in-process engine's."""
    bindir = Path(sys.executable).parent
    if not (bindir / "flower-superlink").exists():
        pytest.skip("flower-superlink is not installed next to this Python")
    rc = _example_run_config(**{"num-rounds": 2, "result-file": str(tmp_path / "result.pt")})
    port = free_port()  # flwr 1.42: one HTTP port for the Fleet, Control and ServerAppIo APIs
    home = tmp_path / "flwr_home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "eagles-test"\n\n[superlink.eagles-test]\naddress = "127.0.0.1:{port}"\n'
        "insecure = true\n"
    )
    # the SuperLink and SuperNodes start flwr-serverapp / flwr-clientapp processes: found on PATH
    path = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, FLWR_HOME=str(home), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PATH=path)
    logs = []

    def start(*args):
        log = open(tmp_path / f"{args[0]}-{len(logs)}.log", "w")  # noqa: SIM115
        logs.append(log)
        return subprocess.Popen([str(bindir / args[0]), *args[1:]], stdout=log, stderr=subprocess.STDOUT, env=env)

    procs = [
        start(
            "flower-superlink",
            "--insecure",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-runtime-dependency-installation",
        )
    ]
    try:
        time.sleep(5)  # the SuperNodes retry, but a SuperLink that is up first keeps their logs short
        for pid in range(rc["num-clients"]):
            procs.append(
                start(
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    f"partition-id={pid} num-partitions={rc['num-clients']}",
                )
            )
        overrides = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in rc.items())
        overrides = overrides.replace("'", '"')
        sub = subprocess.run(
            [str(bindir / "flwr"), "run", str(EXAMPLE), "eagles-test", "--run-config", overrides],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sub.returncode == 0, sub.stdout + sub.stderr
        _wait_for(tmp_path / "result.pt", procs, timeout=600)
        result = torch.load(tmp_path / "result.pt", weights_only=False)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()
    _assert_equal_to_inprocess(result, rc)
