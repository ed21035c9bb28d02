"""The time-to-accuracy comparison (`--full`'s efficiency-vs-PID-Batch claims and the benchmark)."""

import numpy as np
import pytest

from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import noisy_discrete
from lsmi.experiments import accuracy_joint, pid_batch_ratio, time_to_accuracy
from lsmi.reproduce import _pid_batch_claim


def _row(lsmi_t, pb_t, pb_cpu):
    return {
        "C": 10,
        "n": 4000,
        "lsmi": {"time_to_tol": lsmi_t, "error": 0.01},
        "pid_batch": {"time_to_tol": pb_t, "cpu_s": pb_cpu, "error": 0.02 if pb_t else 0.09},
        "pid_cvx": {"time_to_tol": 0.1},
    }


def test_pid_batch_ratio_is_exact_when_it_converges_and_a_lower_bound_when_not():
    assert pid_batch_ratio(_row(2.0, 1.0, 40.0)) == (0.5, False)
    assert pid_batch_ratio(_row(2.0, None, 40.0)) == (20.0, True)  # never within 0.05: its whole run bounds it
    assert pid_batch_ratio(_row(None, 1.0, 40.0)) == (None, False)  # LSMI never got there: no ratio
    assert _pid_batch_claim([_row(2.0, None, 40.0), _row(1.0, 3.5, 9.0)]).holds
    assert not _pid_batch_claim([_row(2.0, None, 40.0), _row(1.0, 2.5, 9.0)]).holds  # 2.5x < 3x
    assert not _pid_batch_claim([_row(2.0, None, 5.0)]).holds  # a lower bound below 3x proves nothing
    assert not _pid_batch_claim([_row(None, None, 40.0)]).holds


def test_extra_lsmi_variant_is_the_same_fit_on_the_same_samples():
    pytest.importorskip("sklearn")
    r = time_to_accuracy(2, 600, pid_batch_epochs=0, extra_lsmi={"gmm": {"density": "gmm"}})
    assert {"lsmi", "lsmi_gmm", "pid_batch", "pid_cvx"} <= set(r)
    assert r["lsmi_gmm"]["options"] == {"density": "gmm"} and r["lsmi"]["options"] == {}
    assert len(r["pid_batch"]["curve"]) == 1  # epochs=0: the point after its classifiers only
    x1, x2, y = noisy_discrete(accuracy_joint(2), 600, seed=0)
    est = LSMIEstimator(LSMIConfig(n_classes=2, density="gmm")).fit(x1, x2, y, verbose=False)
    np.testing.assert_allclose(r["lsmi_gmm"]["means"], est.score(x1, x2, y), atol=1e-9)
    for key in ("lsmi", "lsmi_gmm"):
        ref = np.array(r[key]["reference"])
        assert r[key]["error"] == pytest.approx(np.abs(np.array(r[key]["means"]) - ref).max())


def test_time_to_accuracy_plot_draws_each_run(tmp_path):
    def row(c, n, lsmi_cpu, err):
        r = _row(lsmi_cpu, None, 40.0) | {"C": c, "n": n, "tol": 0.05}
        r["lsmi"] |= {"cpu_s": lsmi_cpu, "error": err}
        r["pid_batch"]["curve"] = [(1.0, 0.09), (20.0, 0.08)]
        r["pid_cvx"] |= {"cpu_s": 0.05, "error": 0.03}
        return r

    from lsmi.experiments import plot_time_to_accuracy

    runs = {"KNIFE": [row(2, 1000, 3.0, 0.01), row(10, 1000, 5.0, 0.04)], "GMM": [row(2, 1000, 0.4, 0.01)]}
    path = plot_time_to_accuracy(tmp_path, runs)
    assert path.endswith("time_to_accuracy.png")
    assert (tmp_path / "time_to_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
