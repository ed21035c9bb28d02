"""The Flower strategies and ClientApp driven by an in-process Grid (no Ray): equal to the lazy in-process loop
(same weights and payload bytes). The Ray simulation of the same apps is in test_fsl_sage_flower.py (slow)."""

import pytest
import torch

from fsl_sage import CSEFSL, FSLSAGE, FedAvg, FSLConfig, digits_cnn_split
from fsl_sage.flower import LocalGrid, make_client_app, run_server

CFG = FSLConfig(
    rounds=3,
    batch_size=8,
    server_update_interval=2,
    align_interval=1,
    align_epochs=3,
    align_batch_size=16,
    buffer_size=20,
    mode="lazy",
    seed=0,
)


def _model_fn():
    torch.manual_seed(0)
    return digits_cnn_split()


def _close(a, b):
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k].float(), b[k].float(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("method", ["fsl_sage", "cse_fsl"])
def test_flower_strategy_equals_in_process_lazy(tiny_data, method):
    data, ev = tiny_data
    grid = LocalGrid(make_client_app(_model_fn, lambda pid, n: data[pid], CFG, method=method), 3)
    strat, result = run_server(grid, _model_fn, CFG, CFG.rounds, 3, method=method, eval_data=ev)
    c, s, a = _model_fn()
    algo = (FSLSAGE if method == "fsl_sage" else CSEFSL)(c, s, a, CFG)
    hist = algo.fit(data, ev)
    _close(algo.clients[0].state_dict(), dict(result.arrays.to_torch_state_dict()))
    _close(algo.server.state_dict(), strat.server.state_dict())
    if method == "fsl_sage":
        for i in range(3):
            _close(algo.auxes[i].state_dict(), strat.auxes[i].state_dict())
        assert len(strat.align_log) == 3 * (CFG.rounds - 1)  # lazy: no alignment after the last round
    per_round = [strat.ledger.total_where(round=t) for t in range(CFG.rounds)]
    assert per_round == hist.bytes_per_round
    assert strat.ledger.by_kind() == algo.ledger.by_kind()
    assert strat.wire.total > strat.ledger.total  # npy headers, labels and the initial models travel as well
    acc = result.evaluate_metrics_serverapp[CFG.rounds]["accuracy"]
    assert acc == pytest.approx(hist.accuracies[-1], abs=1e-9)


def test_in_process_fedavg_equals_flower_builtin_fedavg(tiny_data):
    data, _ = tiny_data
    cfg = FSLConfig(**{**CFG.to_dict(), "rounds": 2})
    grid = LocalGrid(make_client_app(_model_fn, lambda pid, n: data[pid], cfg, method="fedavg"), 3)
    _, result = run_server(grid, _model_fn, cfg, 2, 3, method="fedavg")
    c, s, _ = _model_fn()
    algo = FedAvg(c, s, None, cfg)
    algo.fit(data)
    ours = {f"client.{k}": v for k, v in algo.clients[0].state_dict().items()}
    ours.update({f"server.{k}": v for k, v in algo.server.state_dict().items()})
    _close(ours, dict(result.arrays.to_torch_state_dict()))
    assert not torch.allclose(ours["server.1.weight"], s.state_dict()["1.weight"])
