"""Normalisation, collapse statistics and exact power laws against closed forms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from supercollapse import PowerLawFamily, Runs, collapse_report, normalize
from supercollapse.collapse import Normalized, l0_sweep

X = np.linspace(0.05, 1.0, 96)
SIZES = [1e2, 1e3, 1e4, 1e5, 1e6]


def _family_runs(gamma: float) -> Runs:
    return Runs.from_frame(PowerLawFamily(((1.0, 0.5, 0.0), (1.0, 0.0, 0.5)), gamma=gamma).runs(SIZES, X))


def _curves(n_sizes=3, n_seeds=3, seed=0) -> pd.DataFrame:
    """Runs with compute on an irregular grid, seed noise and a size trend."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_sizes):
        p = 1e4 * 4**i
        cstar = 6 * p * 20 * p**0.5
        for s in range(n_seeds):
            x = np.sort(np.concatenate([[0.01, 1.0], rng.uniform(0.01, 1, 40)]))  # logged from x = 0.01
            c = x * cstar
            L = 0.5 + 3 * (c / 6 / p) ** -0.3 + p**-0.3 + 0.01 * rng.standard_normal(len(c))
            rows.append(
                pd.DataFrame(
                    {"run_id": f"{i}-{s}", "size": p, "seed": s, "schedule": "linear", "step": np.arange(len(c)),
                     "compute": c, "loss": L}
                )
            )  # fmt: skip
    return pd.concat(rows, ignore_index=True)


def test_exact_law_collapses_to_closed_form():
    norm = normalize(_family_runs(1.0), 0.0, x_grid=X)
    ell = norm.ell[:, 0, :]
    np.testing.assert_allclose(ell, np.broadcast_to((X**-0.5 + 1) / 2, ell.shape), rtol=0, atol=1e-12)
    fam = PowerLawFamily(((1.0, 0.5, 0.0), (1.0, 0.0, 0.5)), gamma=1.0)
    np.testing.assert_allclose(fam.limit_curve(X), (X**-0.5 + 1) / 2, atol=1e-15)


@pytest.mark.parametrize("gamma", [0.8, 0.9, 1.1, 1.2])
def test_wrong_gamma_fans_out_and_grows_with_distance(gamma):
    d_star = normalize(_family_runs(1.0), 0.0, x_grid=X).ell[:, 0, :].std(axis=0, ddof=1)
    d = normalize(_family_runs(gamma), 0.0, x_grid=X).ell[:, 0, :].std(axis=0, ddof=1)
    assert d_star.max() <= 1e-12
    assert d.max() > 1e-3
    closer = 1.0 + 0.5 * (gamma - 1.0)  # half the distance to γ*
    d_closer = normalize(_family_runs(closer), 0.0, x_grid=X).ell[:, 0, :].std(axis=0, ddof=1)
    assert d_closer.mean() < d.mean()


def test_ell_at_one_and_affine_invariance():
    df = _curves()
    base = normalize(Runs.from_frame(df), 0.3)
    np.testing.assert_array_equal(base.ell[..., -1], 1.0)
    a, b = 2.5, -0.7
    df2 = df.assign(loss=a * df["loss"] + b, compute=df["compute"] * 1e-15)  # PFLOPs
    moved = normalize(Runs.from_frame(df2), a * 0.3 + b)
    np.testing.assert_allclose(moved.ell, base.ell, rtol=1e-12, atol=1e-12)


def test_hand_computed_four_points():
    df = pd.DataFrame(
        {"run_id": "r", "size": 10.0, "seed": 0, "schedule": "const", "step": [1, 2, 3, 4],
         "compute": [1.0, 2.0, 4.0, 8.0], "loss": [5.0, 3.0, 2.0, 1.5]}
    )  # fmt: skip
    x = np.array([0.125, np.sqrt(2) / 8, 0.5, 1.0])
    ell = normalize(Runs.from_frame(df), 1.0, x_grid=x).ell[0, 0]
    # L0 = 1, L(c*) = 1.5: ℓ = (L − 1)/0.5; x = √2/8 lies half-way between 1/8 and 1/4 in log x: L = 4
    np.testing.assert_allclose(ell, [8.0, 6.0, 2.0, 1.0], rtol=1e-13)


def test_horizon_mapping_interpolates_and_checks():
    df = _curves(n_sizes=2, n_seeds=2)
    runs = Runs.from_frame(df)
    meta = runs.meta()
    cs = {p: 0.5 * c for p, c in meta.groupby("size")["final_compute"].min().items()}
    norm = normalize(runs, 0.3, c_star=cs)
    assert np.allclose(norm.ell[..., -1], 1.0)
    with pytest.raises(ValueError, match="before its horizon"):
        normalize(runs, 0.3, c_star={p: 3 * c for p, c in cs.items()})
    with pytest.raises(ValueError, match="no entry for size"):
        normalize(runs, 0.3, c_star={list(cs)[0]: 1.0})


def test_null_excess_is_unbiased():
    """Identical mean curve + iid seed noise: E[excess] = 0 (500 replicates, within 3 standard errors)."""
    rng = np.random.default_rng(0)
    x = np.linspace(0.1, 1, 5)
    mean = (x**-0.5 + 1) / 2
    ex = []
    for _ in range(500):
        ell = mean + 0.05 * rng.standard_normal((4, 3, len(x)))
        ex.append(collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0, 4.0])).excess)
    ex = np.array(ex)
    se = ex.std(axis=0, ddof=1) / np.sqrt(len(ex))
    assert np.all(np.abs(ex.mean(axis=0)) < 3 * se)
    # and a real size effect is detected
    ell = mean + 0.05 * rng.standard_normal((4, 3, len(x))) + 0.2 * np.arange(4)[:, None, None]
    assert collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0, 4.0])).excess.min() > 0.02


def test_report_matches_hand_formula_and_pools():
    rng = np.random.default_rng(1)
    x = np.array([0.5, 1.0])
    ell = rng.standard_normal((3, 4, 2))
    rep = collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0]))
    var = ell.var(axis=1, ddof=1)
    np.testing.assert_allclose(rep.sigma, np.sqrt(var.mean(0)))
    np.testing.assert_allclose(rep.delta, ell.mean(1).std(0, ddof=1))
    np.testing.assert_allclose(rep.excess, rep.delta**2 - rep.sigma**2 / 4)
    mean_pool = collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0]), pool="mean")
    np.testing.assert_allclose(mean_pool.sigma, np.sqrt(var).mean(0))
    sub = collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0]), sizes=[2.0, 3.0])
    np.testing.assert_allclose(sub.delta, ell[1:].mean(1).std(0, ddof=1))
    med = collapse_report(Normalized(x, ell, [1.0, 2.0, 3.0]), center="median")
    np.testing.assert_allclose(med.delta, np.median(ell, axis=1).std(0, ddof=1))
    assert list(rep.to_frame().columns) == ["x", "delta", "sigma", "ratio", "excess"]


def test_report_plot_and_l0_sweep(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    runs = Runs.from_frame(_curves())
    rep = collapse_report(normalize(runs, 0.3))
    fig = rep.plot()
    assert len(fig.axes) == 2
    sweep = l0_sweep(runs, [0.0, 0.3, 0.45])
    assert list(sweep["L0"]) == [0.0, 0.3, 0.45] and sweep["ratio"].notna().all()


def test_bad_inputs_name_the_problem():
    runs = Runs.from_frame(_curves(n_sizes=2, n_seeds=1))
    with pytest.raises(ValueError, match="L0 = 5.0 must be below"):
        normalize(runs, 5.0)
    with pytest.raises(ValueError, match=r"x_grid must lie in \(0, 1\]"):
        normalize(runs, 0.3, x_grid=[0.5, 1.2])
    with pytest.raises(ValueError, match=r"x_grid must lie in \(0, 1\]"):
        normalize(runs, 0.3, x_grid=[0.0, 1.0])
    with pytest.raises(ValueError, match=">= 2 seeds"):
        collapse_report(normalize(runs, 0.3))
    one = Runs.from_frame(_curves(n_sizes=1, n_seeds=2))
    with pytest.raises(ValueError, match=">= 2 sizes"):
        collapse_report(normalize(one, 0.3))
    two = Runs.from_frame(
        pd.concat([_curves(2, 2), _curves(2, 2).assign(schedule="const", run_id=lambda d: "c" + d["run_id"])])
    )
    with pytest.raises(ValueError, match="one schedule"):
        normalize(two, 0.3)


def test_x_grid_below_the_logged_range_raises_or_is_nan_by_request():
    """An x_grid starting before a run's first point once gave NaN ℓ silently; now it raises, or (outside='nan')
    ℓ is NaN there and Δ, σ use the runs that cover each x."""
    df = _curves(n_sizes=2, n_seeds=2)
    first = df[df["run_id"] == "1-1"].index[0]
    df = df.drop(index=first)  # run 1-1 now starts later than the others
    runs = Runs.from_frame(df)
    start = float(runs.frame.query("run_id == '1-1'")["compute"].min()) / float(
        runs.frame.query("run_id == '1-1'")["compute"].max()
    )
    grid = np.linspace((0.01 + start) / 2, 1.0, 50)  # covered by every run but 1-1 (all start at x = 0.01)
    with pytest.raises(ValueError, match=r"below run_id '1-1''s first logged point x = "):
        normalize(runs, 0.3, x_grid=grid)
    with pytest.raises(ValueError, match="outside must be one of"):
        normalize(runs, 0.3, x_grid=grid, outside="clip")
    norm = normalize(runs, 0.3, x_grid=grid, outside="nan")
    below = grid < start * (1 - 1e-12)
    assert below.any() and np.isnan(norm.ell[1, 1, below]).all() and np.isfinite(norm.ell[1, 1, ~below]).all()
    rep = collapse_report(norm)
    assert np.isfinite(rep.delta).all()  # every size keeps >= 1 seed at every x
    assert np.isnan(rep.sigma[below]).all() and np.isfinite(rep.sigma[~below]).all()  # size 1 has one seed there
    assert rep.mean("sigma") == pytest.approx(float(rep.sigma[~below].mean()))  # means skip the NaN points
    covered = normalize(runs, 0.3, x_grid=grid[~below])  # on the covered range both options agree
    np.testing.assert_array_equal(covered.ell, norm.ell[..., ~below])


def test_collapse_deviation_unknown_size_names_it():
    from supercollapse.collapse import collapse_deviation

    norm = normalize(Runs.from_frame(_curves(n_sizes=2, n_seeds=2)), 0.3)
    with pytest.raises(ValueError, match=r"sizes \[5.0\] are not among the normalised sizes"):
        collapse_deviation(norm, sizes=[5])


def test_small_argument_checks_that_used_to_return_nan_or_nothing():
    fam = PowerLawFamily(((1.0, 0.5, 0.0), (1.0, 0.0, 0.5)), gamma=1.0)
    with pytest.raises(ValueError, match="finite A > 0"):
        PowerLawFamily(((float("nan"), 0.5, 0.0),), gamma=1.0)  # was accepted: every loss NaN
    frames = [fam.runs([1e2, 4e2], np.geomspace(0.01, 1, 30)).assign(seed=s) for s in range(2)]
    runs = Runs.from_frame(pd.concat([f.assign(run_id=f["run_id"] + f"-{s}") for s, f in enumerate(frames)]))
    report = collapse_report(normalize(runs, 0.0, x_grid=np.geomspace(0.05, 1, 20)))
    with pytest.raises(ValueError, match="lo must be <= hi, got lo=0.9, hi=0.1"):
        report.mean("delta", 0.9, 0.1)  # was NaN
    with pytest.raises(ValueError, match="L0s must not be empty"):
        l0_sweep(runs, [])  # was an empty frame without columns
