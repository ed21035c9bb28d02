"""The reproduction machinery in reduced form (the full quick run is marked slow)."""

from __future__ import annotations

import pytest
import torch

from fpt_snn.baselines import LIFSequential
from fpt_snn.config import FPTConfig
from fpt_snn.experiments import FPTNeuron, fidelity_table, train_digits


def test_fidelity_table_reduced():
    tab = fidelity_table(decays=(0.5, 0.9), Ts=(4, 16), Ks=(1, 3), columns=512, exact_columns=128)
    for lam in (0.5, 0.9):
        for T in (4, 16):
            assert tab[lam][T]["T"] == 0.0
            assert 1 <= tab[lam][T]["auto_iterations"] <= T
            assert tab[lam][T][1] >= tab[lam][T][3]
    assert tab[0.9][16][3] > tab[0.5][16][3]  # slow membranes converge slower


def test_train_digits_reduced_runs_and_learns():
    g = torch.Generator().manual_seed(0)
    # a separable toy problem in the digits format: class = which half of the features is bright
    y = torch.randint(0, 2, (256,), generator=g)
    X = torch.rand(256, 64, generator=g) * 0.3
    X[y == 0, :32] += 0.7
    X[y == 1, 32:] += 0.7
    data = (X[:192], y[:192], X[192:], y[192:])
    r = train_digits(
        lambda: FPTNeuron(FPTConfig(K=3, output="bernoulli")),
        data=data,
        T=4,
        hidden=32,
        epochs=4,
        lr=1e-2,
        eval_neurons={"lif": LIFSequential},
    )
    assert r["acc"] > 0.9 and r["acc_lif"] > 0.8


@pytest.mark.slow
def test_quick_reproduce_end_to_end(tmp_path):
    pytest.importorskip("sklearn")  # the digits set (repro extra)
    from fpt_snn.reproduce import reproduce

    res = reproduce(False, tmp_path)
    assert len(res.claims) == 5
    assert res.claims[0].holds is True  # fidelity at tau = 2
    assert all((tmp_path / f"{n}.png").exists() for n in ("fidelity_mismatch_vs_K", "timing", "accuracy_digits"))
    res.save_json(tmp_path / "fpt_snn.json")


def test_parity_verdict_comes_from_the_interval_over_seeds():
    from fpt_snn.reproduce import _parity_claim

    def parity(fpt, lif):
        return {"acc": {"lif": lif, "fpt": fpt, "fpt_as_lif": fpt, "psn": []}, "train_s": {"lif": [], "fpt": []}}

    close = _parity_claim(parity([0.950, 0.955, 0.952], [0.955, 0.950, 0.957]), (0, 1, 2), 10)
    assert close.verdict == "holds" and close.details["rule_threshold"] == 2.0
    far = _parity_claim(parity([0.90, 0.91, 0.90], [0.95, 0.95, 0.96]), (0, 1, 2), 10)
    assert far.verdict == "does not hold"
    spread = _parity_claim(parity([0.95, 0.92, 0.95], [0.95, 0.95, 0.955]), (0, 1, 2), 10)
    assert spread.verdict == "inconclusive"  # 0, 3, 0.5 points: the interval straddles 2
