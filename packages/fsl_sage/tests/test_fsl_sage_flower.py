"""Flower: the lazy in-process loop equals the Flower simulation; in-process FedAvg equals Flower's FedAvg
(same weights and payload bytes). Ray start-up is slow on small machines: these tests are ``slow``."""

import gc
import os

import pytest
import torch

from fsl_sage import CSEFSL, FSLSAGE, FedAvg, FSLConfig, digits_cnn_split

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _model_fn():
    torch.manual_seed(0)
    return digits_cnn_split()


def _data():
    g = torch.Generator().manual_seed(0)
    xs = [torch.rand(37, 1, 8, 8, generator=g) for _ in range(N_CLIENTS)]
    ys = [torch.randint(0, 10, (37,), generator=g) for _ in range(N_CLIENTS)]
    return list(zip(xs, ys))


N_CLIENTS = 2  # two SuperNodes keep Ray's start-up (one worker per node) small
CFG = FSLConfig(
    rounds=2,
    batch_size=8,
    server_update_interval=2,
    align_interval=1,
    align_epochs=3,
    align_batch_size=16,
    buffer_size=20,
    mode="lazy",
    seed=0,
)


RAY_BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"include_dashboard": False}}


def _simulate(method, rounds, data, data_fn=None):
    from flwr.simulation import run_simulation

    from fsl_sage.flower import make_client_app, make_server_app

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "600000")  # slow start-up on busy small machines
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "600")
    out = {}
    server_app = make_server_app(
        _model_fn, CFG, rounds, len(data), method=method, on_finish=lambda s, r: out.update(strategy=s, result=r)
    )
    client_app = make_client_app(_model_fn, data_fn or (lambda pid, n: data[pid]), CFG, method=method)
    run_simulation(server_app, client_app, num_supernodes=len(data), backend_config=RAY_BACKEND)
    gc.collect()  # Ray's leftover file objects are finalised here, under this module's warning filters
    assert "strategy" in out, "the ServerApp did not finish"
    return out["strategy"], out["result"]


def _close(a, b):
    for k in a:
        torch.testing.assert_close(a[k].float(), b[k].float(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("method", ["fsl_sage", "cse_fsl"])
def test_flower_simulation_equals_in_process_lazy(method):
    data = _data()
    strat, result = _simulate(method, CFG.rounds, data)
    c, s, a = _model_fn()
    algo = (FSLSAGE if method == "fsl_sage" else CSEFSL)(c, s, a, CFG)
    algo.fit(data)
    _close(algo.clients[0].state_dict(), dict(result.arrays.to_torch_state_dict()))
    _close(algo.server.state_dict(), strat.server.state_dict())
    if method == "fsl_sage":
        for i in range(N_CLIENTS):
            _close(algo.auxes[i].state_dict(), strat.auxes[i].state_dict())
    assert [algo.ledger.total_where(round=t) for t in range(CFG.rounds)] == [
        strat.ledger.total_where(round=t) for t in range(CFG.rounds)
    ]
    assert algo.ledger.by_kind() == strat.ledger.by_kind()
    assert strat.wire.total > strat.ledger.total  # headers, labels and the initial models travel too


def test_in_process_fedavg_equals_flower_fedavg():
    data = _data()
    _, result = _simulate("fedavg", 2, data)
    c, s, a = _model_fn()
    algo = FedAvg(c, s, None, FSLConfig(**{**CFG.to_dict(), "rounds": 2}))
    algo.fit(data)
    flwr_sd = dict(result.arrays.to_torch_state_dict())
    ours = {f"client.{k}": v for k, v in algo.clients[0].state_dict().items()}
    ours.update({f"server.{k}": v for k, v in algo.server.state_dict().items()})
    _close(ours, flwr_sd)


def _raise_for_last(data):
    def fn(pid, n):
        if pid == len(data) - 1:
            raise RuntimeError(f"partition {pid} is broken")
        return data[pid]

    return fn


def test_ray_simulation_survives_a_client_raising_every_round():
    """Ray reports a ClientApp exception as an error reply: the run completes with the survivors and equals the
    run without the broken client (LocalGrid), the failures naming its partition."""
    from fsl_sage.flower import LocalGrid, make_client_app, run_server

    data = _data() + _data()[:1]  # 3 SuperNodes; partition 2 raises in every round
    strat, result = _simulate("fsl_sage", CFG.rounds, data, _raise_for_last(data))
    grid = LocalGrid(make_client_app(_model_fn, lambda pid, n: data[pid], CFG), 2)
    ref, ref_result = run_server(grid, _model_fn, CFG, CFG.rounds, 2)
    _close(dict(ref_result.arrays.to_torch_state_dict()), dict(result.arrays.to_torch_state_dict()))
    assert [(f["round"], f["partition-id"]) for f in strat.failures] == [(t, 2) for t in range(CFG.rounds)]
    assert all("partition 2 is broken" in f["reason"] for f in strat.failures)
