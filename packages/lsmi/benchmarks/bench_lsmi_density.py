"""density="knife" (Adam) vs density="gmm" (EM, scikit-learn's GaussianMixture): accuracy and CPU cost.

On the official Gaussian generator (sigma 0.5, rho 0.5, N = 4,000: fit on 3,200, score the other 800) at each C,
the defaults with each density against the exact plug-in (``gaussian_exact_terms``): the error of each of
(R, U1, U2, S) and of the mean surprisals h1, h2 (the part the density decides), the CPU seconds of ``fit`` and,
for the GMM, of the two EM fits alone. One torch thread. Writes benchmarks/results/bench_lsmi_density.json and .log.

    python packages/lsmi/benchmarks/bench_lsmi_density.py [--cs 2,10] [--ns 4000] [--densities knife,gmm]
        [--hidden 64] [--out F]

One fit per (C, N, density), run one after the other for each (C, N) (not repeated): a single small measurement.
``--ns`` changes N (fit on 80 %, score the other 20 %), e.g. the error against N at C = 30 with the defaults:
``--cs 30 --ns 4000,8000,16000 --densities knife --out benchmarks/results/bench_lsmi_density_c30_n.json``.
``--hidden`` changes the classifier heads' width (the paper's 64 by default), e.g.
``--cs 10,30 --ns 4000,16000 --densities gmm --hidden 64,256,1024 --out benchmarks/results/bench_lsmi_hidden.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from icml25_shared.bench import Log, save_results
from lsmi import LSMIConfig, LSMIEstimator
from lsmi.datasets import gaussian_exact_terms, gaussian_modalities
from lsmi.functional import lsmi_from_terms, mean_shift
from lsmi.knife import GaussianMixtureDensity

RESULTS = Path(__file__).resolve().parent / "results"
TERMS = ("i1", "i2", "i12", "h1", "h2")


def run(c: int, density: str, n: int = 4000, hidden: int = 64) -> dict:
    x1, x2, y = gaussian_modalities(n, c, 0.5, 0.5, seed=0)
    nf = int(0.8 * n)
    est = LSMIEstimator(LSMIConfig(n_classes=c, density=density, hidden=hidden))
    w, t = time.perf_counter(), time.process_time()
    est.fit(x1[:nf], x2[:nf], y[:nf], verbose=False)
    wall, cpu = time.perf_counter() - w, time.process_time() - t
    measured = np.array(est.score(x1[nf:], x2[nf:], y[nf:]))
    got = est.terms(x1[nf:], x2[nf:], y[nf:])
    ex = gaussian_exact_terms(x1[nf:], x2[nf:], y[nf:], c, 0.5, 0.5)
    exact = np.array([float(v.mean()) for v in mean_shift(*lsmi_from_terms(*(ex[k] for k in TERMS)))[:4]])
    # the estimator's surprisals are of standardised features: h(z) = h(x) - sum log std
    h_err = [
        float(got[h].double().mean()) - (float(np.mean(ex[h])) - float(est_std.log().sum()))
        for h, est_std in (("h1", est.std1), ("h2", est.std2))
    ]
    row = {
        "C": c,
        "n": n,
        "n_fit": nf,
        "density": density,
        "hidden": hidden,
        "fit_wall_s": wall,
        "fit_cpu_s": cpu,
        "epochs": est.history_["epochs"],
        "measured": measured.tolist(),
        "exact": exact.tolist(),
        "abs_err": np.abs(measured - exact).tolist(),
        "max_err": float(np.abs(measured - exact).max()),
        "h_err": h_err,
    }
    if density == "gmm":
        z1, z2 = est._standardize(*est._prepare(x1[:nf], x2[:nf], y[:nf], fitting=True)[:2])
        t = time.process_time()
        for z in (z1, z2):
            GaussianMixtureDensity.fit(z, 5, "full", 100, 0)
        row["em_cpu_s"] = time.process_time() - t
        row["gmm_converged"] = est.history_["gmm_converged"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cs", default="2,10")
    ap.add_argument("--ns", default="4000", help="samples per run (fit on 80 %%, score the rest)")
    ap.add_argument("--densities", default="knife,gmm")
    ap.add_argument("--hidden", default="64", help="classifier head widths (the paper's 64 is the default)")
    ap.add_argument("--out", default=str(RESULTS / "bench_lsmi_density.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    say = Log()

    load0, start = os.getloadavg(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    say(f"{start} load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    rows = []
    cells = [(int(c), int(n)) for c in args.cs.split(",") for n in args.ns.split(",")]
    for c, n in cells:
        for density, hidden in [(d, int(h)) for d in args.densities.split(",") for h in args.hidden.split(",")]:
            r = run(c, density, n, hidden)
            rows.append(r)
            say(
                f"C={c:3d} N={n:6d} {density:5s} hidden {hidden:4d} fit {r['fit_cpu_s']:6.2f} CPU-s "
                f"({r['fit_wall_s']:6.2f} wall, "
                f"{r['epochs']} epochs) max err {r['max_err']:.3f} err R,U1,U2,S "
                + ", ".join(f"{v:.3f}" for v in r["abs_err"])
                + " h1,h2 err "
                + ", ".join(f"{v:+.3f}" for v in r["h_err"])
                + (f" EM alone {r['em_cpu_s']:.2f} CPU-s" if "em_cpu_s" in r else "")
            )
    load1 = os.getloadavg()
    say(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    save_results(out, {"rows": rows, "started_utc": start, "load_before": load0, "load_after": load1}, say)


if __name__ == "__main__":
    main()
