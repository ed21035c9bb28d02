"""Flower's Simulation Engine (Ray on loopback), 2 SuperNodes, 1 round, equals the in-process engine bit for bit.
Ray's start-up is slow on small machines: ``slow``."""

import gc
import os

import pytest
import torch
from eagles_testing import small_clients, small_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

RAY_BACKEND = {
    "init_args": {"_node_ip_address": "127.0.0.1", "include_dashboard": False, "num_cpus": 2},
    "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
}


def _ray_usable() -> None:
    # Ray's serialisation context imports pyarrow and tolerates only its absence: a pyarrow built against
    # another numpy (an environment problem, not this package's) crashes every run_simulation.
    try:
        import pyarrow  # noqa: F401
    except ModuleNotFoundError:
        return
    except ImportError as err:
        pytest.skip(f"Ray cannot start actors here: pyarrow is installed but unusable ({err})")


def test_run_simulation_equals_run_inprocess(tiny_graph):
    from flwr.simulation import run_simulation

    _ray_usable()

    from eagles.flower import make_client_app, make_server_app
    from eagles.sim import graph_dims, run_inprocess

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "600000")
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "600")
    clients = small_clients(tiny_graph, 2)
    cfg = small_config()
    f, k = graph_dims(clients)
    out = {}
    server_app = make_server_app(cfg, f, k, 2, 1, on_finish=lambda s: out.update(server=s))
    run_simulation(server_app, make_client_app(clients, cfg), num_supernodes=2, backend_config=RAY_BACKEND)
    gc.collect()
    assert "server" in out, "the ServerApp did not finish"
    ref = run_inprocess(clients, cfg, 1)
    assert out["server"].history == ref.history
    for pid in range(2):
        a, b = out["server"].personal[pid], ref.server.personal[pid]
        for key in a:
            assert torch.equal(a[key], b[key]), key
