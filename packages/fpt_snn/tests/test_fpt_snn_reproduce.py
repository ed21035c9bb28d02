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


TINY = {
    "fid_decays": (0.5, 0.9),
    "fid_columns": 256,
    "digits_epochs": 1,
    "n_seeds": 2,
    "sweep": True,
    "sweep_Ts": (4,),
    "sweep_decays": (0.5,),
    "sweep_epochs": 1,
    "sweep_seeds": 1,
    "timing_repeats": 1,
    "hidden": 16,
}


def test_full_run_resumes_from_finished_parts(tmp_path, monkeypatch):
    """A run killed part-way, started again, trains only the unfinished units and gives the fresh run's figures;
    a third run trains nothing."""
    pytest.importorskip("sklearn")
    from fpt_snn import experiments as ex
    from fpt_snn.reproduce import reproduce

    setup = ex.Setup(**TINY)
    real, calls = ex.train_digits, []

    def counted(*args, fail_at=None, **kwargs):
        calls.append(kwargs.get("seed"))
        if fail_at is not None and len(calls) == fail_at:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(ex, "train_digits", counted)
    fresh = reproduce(True, tmp_path / "fresh", setup=setup)
    n_units, n_calls = fresh.settings["parts"]["computed"], len(calls)
    assert n_units == 2 + 5 and fresh.settings["parts"]["reused"] == 0  # 2 digits seeds, 5 sweep columns

    calls.clear()
    monkeypatch.setattr(ex, "train_digits", lambda *a, **k: counted(*a, fail_at=n_calls - 2, **k))
    with pytest.raises(KeyboardInterrupt):
        reproduce(True, tmp_path / "run", setup=setup)
    finished = len(list((tmp_path / "run" / "parts").glob("*.json")))
    assert 0 < finished < n_units

    calls.clear()
    monkeypatch.setattr(ex, "train_digits", counted)
    resumed = reproduce(True, tmp_path / "run", setup=setup)
    assert resumed.settings["parts"] == {"computed": n_units - finished, "reused": finished}
    assert 0 < len(calls) < n_calls
    assert [c.measured for c in resumed.claims[2:4]] == [c.measured for c in fresh.claims[2:4]]
    assert resumed.settings["full_sweep"] == fresh.settings["full_sweep"]

    calls.clear()
    again = reproduce(True, tmp_path / "run", setup=setup)
    assert calls == [] and again.settings["parts"] == {"computed": 0, "reused": n_units}

    calls.clear()  # another setup is another fingerprint: nothing is reused
    other = reproduce(True, tmp_path / "run", setup=ex.Setup(**{**TINY, "digits_epochs": 2}))
    assert other.settings["parts"]["reused"] == 0 and len(calls) == n_calls


def test_setup_refuses_bad_sizes():
    from fpt_snn.experiments import Setup

    assert Setup.full().n_seeds == 5 and Setup.quick().sweep is False
    with pytest.raises(ValueError, match="n_seeds"):
        Setup(**{**TINY, "n_seeds": 0})
    with pytest.raises(ValueError, match="decay"):
        Setup(**{**TINY, "sweep_decays": (1.0,)})
    with pytest.raises((TypeError, ValueError), match="hidden"):
        Setup(**{**TINY, "hidden": 2.5})
