"""Tasks, toy SNNs, training loops and figures used by ``icml25 reproduce fpt_snn`` and the benchmarks.

- :func:`fidelity_table`: hard-mode FPT spikes against the sequential LIF, by K, T and λ (synthetic currents).
- :class:`SNNClassifier` with :class:`FPTNeuron` or :class:`fpt_snn.baselines.LIFSequential`, trained by
  :func:`train_digits` on scikit-learn's bundled digits (:func:`load_digits`) or aeon's GunPoint
  (:func:`load_gunpoint`, T = 150).
- :func:`accuracy_vs_K` and :func:`gunpoint_parity`: the longer sweeps of ``--full``.
- :func:`layer_timings`: fwd+bwd time of one neuron layer, FPT (dense, chunked) vs the sequential loop and
  spikingjelly's ``LIFNode``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from fpt_snn.baselines import LIFSequential, psn_factory
from fpt_snn.config import FPTConfig
from fpt_snn.functional import fpt_iterate, fpt_lif, lif_reference, mismatch_rate
from icml25_shared.metrics import accuracy
from icml25_shared.progress import track
from icml25_shared.report import save_figure, subplots
from icml25_shared.seed import seed_everything
from icml25_shared.validate import check_choice, check_float, check_int

__all__ = [
    "FPTNeuron",
    "SNNClassifier",
    "Setup",
    "accuracy_vs_K",
    "digits_parity",
    "encode",
    "fidelity_table",
    "gunpoint_parity",
    "layer_timings",
    "load_digits",
    "load_gunpoint",
    "percent_table",
    "plot_accuracy",
    "plot_accuracy_vs_K",
    "plot_fidelity",
    "plot_timing",
    "sweep_neuron",
    "train_digits",
]

log = logging.getLogger(__name__)

Data = tuple[Tensor, Tensor, Tensor, Tensor]


# ---- fidelity ----------------------------------------------------------------------------------------------------
def fidelity_table(
    decays: tuple[float, ...] = (0.5, 0.9),
    Ts: tuple[int, ...] = (4, 16, 64, 256),
    Ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6),
    columns: int = 4096,
    exact_columns: int = 1024,
    seed: int = 0,
) -> dict[float, dict[int, dict[Any, float]]]:
    """Hard-mode spike mismatch vs :func:`lif_reference` (float64, x ~ N(0.5, 1)): ``{λ: {T: {K: rate}}}``.

    Besides the K keys, ``"T"`` is the rate at K = T (must be 0; computed on the first ``exact_columns`` columns,
    since it costs T sweeps) and ``"auto_iterations"`` the sweeps ``K="auto"`` needed on those columns.
    """
    table: dict[float, dict[int, dict[Any, float]]] = {}
    for lam in decays:
        table[lam] = {}
        for T in Ts:
            g = torch.Generator().manual_seed(seed * 1000 + T)
            x = torch.randn(T, columns, generator=g, dtype=torch.float64) + 0.5
            ref = lif_reference(x, decay=lam)
            row: dict[Any, float] = {K: mismatch_rate(fpt_lif(x, decay=lam, K=K, mode="hard"), ref) for K in Ks}
            xe, refe = x[:, :exact_columns], ref[:, :exact_columns]
            row["T"] = mismatch_rate(fpt_lif(xe, decay=lam, K=T, mode="hard"), refe)
            _, info = fpt_lif(xe, decay=lam, K="auto", mode="hard", return_info=True)
            row["auto_iterations"] = info.iterations
            table[lam][T] = row
    return table


def percent_table(rows: dict[int, dict[Any, float]]) -> dict[str, dict[str, float]]:
    """One λ of :func:`fidelity_table` as ``{"T=..": {"K=..": percent}}`` (rounded to 4 decimals)."""
    return {
        f"T={T}": {f"K={k}": round(100 * v, 4) for k, v in r.items() if k != "auto_iterations"} for T, r in rows.items()
    }


# ---- a small SNN ------------------------------------------------------------------------------------------------
class FPTNeuron(nn.Module):
    """FPT in pure torch (what ``FPTLIFNode`` does, without the spikingjelly dependency)."""

    def __init__(self, cfg: FPTConfig, eval_output: str = "heaviside") -> None:
        super().__init__()
        self.cfg, self.eval_output = cfg, eval_output

    def forward(self, x_seq: Tensor) -> Tensor:
        out = None if self.training else (self.eval_output if self.cfg.mode == "soft" else "heaviside")
        s, _ = fpt_iterate(x_seq.reshape(x_seq.shape[0], -1), self.cfg, output=out)
        return s.view(x_seq.shape)


class SNNClassifier(nn.Module):
    """Linear → spiking neuron → Linear, logits = mean over time of the readout (input ``[T, B, F]``)."""

    def __init__(self, n_in: int, hidden: int, n_out: int, spiking: nn.Module) -> None:
        super().__init__()
        self.fc1, self.spiking, self.fc2 = nn.Linear(n_in, hidden), spiking, nn.Linear(hidden, n_out)

    def forward(self, x_seq: Tensor) -> Tensor:
        return self.fc2(self.spiking(self.fc1(x_seq))).mean(0)


def load_digits(split_seed: int = 1234) -> Data:
    """scikit-learn's 1797 8×8 digits, intensities in [0, 1], a 1347/450 split drawn from ``split_seed`` (the
    default 1234 is the split of every committed run): (X_train, y_train, X_test, y_test). Needs scikit-learn
    (``pip install 'icml25-fpt-snn[repro]'``)."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError as err:
        raise ImportError(
            "load_digits needs scikit-learn: pip install 'icml25-fpt-snn[repro]' (or scikit-learn>=1.4)"
        ) from err

    d: Any = sk_load_digits()  # a Bunch (the stub's union also admits the return_X_y tuple)
    X = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(split_seed))
    tr, te = perm[:1347], perm[1347:]
    return X[tr], y[tr], X[te], y[te]


def load_gunpoint() -> Data:
    """aeon's bundled GunPoint (T = 150, 2 classes), standardised with the training mean and deviation."""
    from aeon.datasets import load_gunpoint as aeon_load_gunpoint

    Xtr, ytr = (np.asarray(a) for a in aeon_load_gunpoint(split="TRAIN"))
    Xte, yte = (np.asarray(a) for a in aeon_load_gunpoint(split="TEST"))
    mu, sd = Xtr.mean(), Xtr.std()

    def prep(X: np.ndarray, y: np.ndarray) -> tuple[Tensor, Tensor]:
        x = torch.tensor((X[:, 0, :] - mu) / sd, dtype=torch.float32)  # [n, 150]
        return x, torch.tensor(y.astype(int) - 1, dtype=torch.long)

    return (*prep(Xtr, ytr), *prep(Xte, yte))


def encode(X: Tensor, T: int, encoding: Literal["constant", "series"]) -> Tensor:
    """``[B, F]`` → ``[T, B, F']``: constant current (the F intensities at every step) or the series as time."""
    check_choice("encoding", encoding, ("constant", "series"))
    if encoding == "constant":
        return X.unsqueeze(0).expand(T, -1, -1)
    return X.t().unsqueeze(-1)  # X is [B, T]: one scalar input per step


def train_digits(
    make_neuron: Callable[[], nn.Module],
    *,
    data: Data,
    T: int = 8,
    encoding: Literal["constant", "series"] = "constant",
    hidden: int = 256,
    epochs: int = 10,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    eval_neurons: dict[str, Callable[[], nn.Module]] | None = None,
    desc: str = "train",
) -> dict[str, Any]:
    """Train :class:`SNNClassifier` with Adam (same init and batches for a given ``seed``); returns the test
    accuracy, the wall time and, for each of ``eval_neurons``, the accuracy of the trained weights with that
    neuron swapped in (e.g. the exact LIF for FPT-trained weights)."""
    Xtr, ytr, Xte, yte = data
    n_in = Xtr.shape[1] if encoding == "constant" else 1
    n_out = int(ytr.max()) + 1
    seed_everything(seed)
    model = SNNClassifier(n_in, hidden, n_out, make_neuron())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    model.train()
    for _ in track(range(epochs), desc):
        perm = torch.randperm(len(ytr), generator=g)
        for i in range(0, len(ytr), batch_size):
            idx = perm[i : i + batch_size]
            loss = nn.functional.cross_entropy(model(encode(Xtr[idx], T, encoding)), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    train_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        out = {"acc": accuracy(model(encode(Xte, T, encoding)), yte), "train_s": train_s}
        for name, make in (eval_neurons or {}).items():
            model.spiking = make().eval()
            out[f"acc_{name}"] = accuracy(model(encode(Xte, T, encoding)), yte)
    return out


Runner = Callable[[str, Callable[[], Any]], Any]
"""``run(name, fn)`` → ``fn()``'s result: the hook through which the sweeps hand each seed × configuration to
:meth:`icml25_shared.parts.Parts.run` (finished units are reused by a resumed run); by default ``fn()``."""


def _call(name: str, fn: Callable[[], Any]) -> Any:
    return fn()


@dataclass(frozen=True)
class Setup:
    """The sizes of one reproduction (``--full`` by :meth:`full`, quick by :meth:`quick`; tests shrink it)."""

    fid_decays: tuple[float, ...]
    """λ of the fidelity table (the claims need 0.5 and 0.9)."""
    fid_columns: int
    """Independent neurons per fidelity cell."""
    digits_epochs: int
    """Epochs of the digits parity runs (T = 8)."""
    n_seeds: int
    """Seeds of the judged claims (digits and GunPoint parity)."""
    sweep: bool = False
    """Run :func:`accuracy_vs_K` (accuracy by K, T and λ)."""
    sweep_Ts: tuple[int, ...] = (8, 64)
    """T of the sweep."""
    sweep_decays: tuple[float, ...] = (0.5, 0.8)
    """λ of the sweep."""
    sweep_epochs: int = 10
    """Epochs of every sweep run."""
    sweep_seeds: int = 3
    """Seeds of every sweep cell."""
    auto_seeds: int = 3
    """Seeds of the ``K="auto"`` cells at T > 8 (the costliest: up to T sweeps per batch)."""
    gunpoint_epochs: int = 0
    """Epochs of the GunPoint parity runs (0: not run)."""
    timing_repeats: int = 3
    """Repeats of the layer timing (median)."""
    hidden: int = 256
    """Hidden width of the digits SNN."""

    def __post_init__(self) -> None:
        for name in ("fid_columns", "digits_epochs", "n_seeds", "sweep_epochs", "sweep_seeds", "timing_repeats"):
            check_int(name, getattr(self, name), min=1)
        for name in ("auto_seeds", "gunpoint_epochs", "hidden"):
            check_int(name, getattr(self, name), min=0 if name != "hidden" else 1)
        for T in self.sweep_Ts:
            check_int("sweep_Ts", T, min=1)
        for lam in (*self.fid_decays, *self.sweep_decays):
            check_float("decay", lam, min=0.0, max=1.0, max_open=True)

    @classmethod
    def quick(cls) -> Setup:
        """The quick reproduction: fidelity, digits parity over 3 seeds × 10 epochs, layer timings."""
        return cls(fid_decays=(0.5, 0.9), fid_columns=4096, digits_epochs=10, n_seeds=3)

    @classmethod
    def full(cls) -> Setup:
        """``--full``: 5 seeds × 25 epochs of digits parity, the accuracy sweep, GunPoint, 7 timing repeats."""
        return cls(
            fid_decays=(0.5, 0.8, 0.9),
            fid_columns=4096,
            digits_epochs=25,
            n_seeds=5,
            sweep=True,
            sweep_epochs=10,
            sweep_seeds=3,
            auto_seeds=1,
            gunpoint_epochs=60,
            timing_repeats=7,
        )


def digits_parity(
    T: int = 8,
    epochs: int = 10,
    seeds: tuple[int, ...] = (0,),
    data: Data | None = None,
    *,
    hidden: int = 256,
    run: Runner = _call,
) -> dict[str, Any]:
    """The 64-``hidden``-10 SNN on digits trained with the sequential LIF, with FPT (K = 3, Bernoulli
    straight-through) and with spikingjelly's PSN (when installed), the same init and batches per seed.

    Args:
        T: time steps (constant-current encoding).
        epochs: training epochs of every run.
        seeds: one training run of each neuron per seed.
        data: :func:`load_digits` when ``None``.
        hidden: hidden width.
        run: see :data:`Runner`; one unit per seed, named ``digits_T<T>_s<seed>``.

    Returns:
        ``{"acc": {"lif", "fpt", "fpt_as_lif", "psn"}: [per seed], "train_s": {"lif", "fpt"}: [per seed],
        "psn": bool}``; ``fpt_as_lif`` is the FPT-trained weights run with the exact sequential LIF.
    """
    data = load_digits() if data is None else data
    acc: dict[str, list[float]] = {"lif": [], "fpt": [], "fpt_as_lif": [], "psn": []}
    times: dict[str, list[float]] = {"lif": [], "fpt": []}
    psn = psn_factory(T)

    def one(seed: int) -> dict[str, Any]:
        kw: dict[str, Any] = {"data": data, "T": T, "epochs": epochs, "seed": seed, "hidden": hidden}
        r_lif = train_digits(LIFSequential, desc=f"digits LIF s{seed}", **kw)
        fpt = lambda: FPTNeuron(FPTConfig(K=3, output="bernoulli"))  # noqa: E731
        r_fpt = train_digits(fpt, eval_neurons={"lif": LIFSequential}, desc=f"digits FPT s{seed}", **kw)
        out = {"lif": r_lif["acc"], "fpt": r_fpt["acc"], "fpt_as_lif": r_fpt["acc_lif"]}
        out |= {"lif_s": r_lif["train_s"], "fpt_s": r_fpt["train_s"]}
        if psn is not None:
            out["psn"] = train_digits(psn, desc="digits PSN", **kw)["acc"]
        return out

    for seed in seeds:
        r = run(f"digits_T{T}_s{seed}", lambda seed=seed: one(seed))
        for k in acc:
            if k in r:
                acc[k].append(r[k])
        times["lif"].append(r["lif_s"])
        times["fpt"].append(r["fpt_s"])
    return {"acc": acc, "train_s": times, "psn": psn is not None}


def sweep_neuron(K: int | Literal["auto", "lif"], decay: float) -> Callable[[], nn.Module]:
    """The neuron of one :func:`accuracy_vs_K` column: the sequential LIF (``"lif"``), FPT with K soft sweeps and
    Bernoulli straight-through, or hard FPT iterated to convergence (``"auto"``)."""
    if K == "lif":
        return lambda: LIFSequential(decay=decay)
    mode, output = ("hard", "heaviside") if K == "auto" else ("soft", "bernoulli")
    return lambda: FPTNeuron(FPTConfig(decay=decay, K=K, mode=mode, output=output))


def accuracy_vs_K(
    data: Data | None = None,
    seeds: tuple[int, ...] = (0, 1, 2),
    epochs: int = 15,
    *,
    Ts: tuple[int, ...] = (8, 64),
    decays: tuple[float, ...] = (0.5, 0.8),
    auto_seeds: int | None = None,
    hidden: int = 256,
    run: Runner = _call,
) -> dict[str, dict[str, Any]]:
    """Test accuracy of the sequential LIF and of FPT with K ∈ {1, 2, 3, "auto"} for each T and λ on digits.

    Args:
        data: :func:`load_digits` when ``None``.
        seeds: training seeds of every cell.
        epochs: training epochs of every run.
        Ts: time steps of the sweep.
        decays: leaks λ of the sweep.
        auto_seeds: ``"auto"`` at T > 8 trains on the first ``auto_seeds`` seeds only (``None``: all).
        hidden: hidden width.
        run: see :data:`Runner`; one unit per T, λ, K and seed.

    Returns:
        ``{"T=8,lam=0.5": {"lif": mean acc, "1": ..., "auto": ..., "per_seed": {"lif": [...], ...}}, ...}``.
    """
    data = load_digits() if data is None else data

    def cell(Tq: int, lam: float, K: int | Literal["auto", "lif"], s: int) -> float:
        make = sweep_neuron(K, lam)
        return run(
            f"sweep_T{Tq}_lam{lam}_K{K}_s{s}",
            lambda: train_digits(make, data=data, T=Tq, epochs=epochs, seed=s, hidden=hidden)["acc"],
        )

    out: dict[str, dict[str, Any]] = {}
    for Tq in Ts:
        for lam in decays:
            per_seed: dict[str, list[float]] = {}
            for K in ("lif", 1, 2, 3, "auto"):
                use = seeds[:auto_seeds] if (K == "auto" and Tq > 8 and auto_seeds is not None) else seeds
                per_seed[str(K)] = [cell(Tq, lam, K, s) for s in use]
            res: dict[str, Any] = {k: float(np.mean(v)) for k, v in per_seed.items()}
            out[f"T={Tq},lam={lam}"] = {**res, "per_seed": per_seed}
    return out


def gunpoint_parity(seeds: tuple[int, ...] = (0, 1, 2), epochs: int = 60, *, run: Runner = _call) -> dict[str, Any]:
    """Test accuracy per seed of a 1-64-2 SNN on GunPoint (T = 150), sequential LIF vs FPT (K = 3).

    Args:
        seeds: training seeds.
        epochs: training epochs of every run.
        run: see :data:`Runner`; one unit per neuron and seed.

    Returns:
        ``{"lif": [acc per seed], "fpt": [acc per seed]}``.

    Raises:
        ImportError: aeon is not installed (``pip install icml25-fpt-snn[full]``).
    """
    gp = load_gunpoint()
    kw: dict[str, Any] = {
        "data": gp,
        "T": 150,
        "encoding": "series",
        "hidden": 64,
        "epochs": epochs,
        "batch_size": 16,
        "lr": 3e-3,
    }
    fpt = lambda: FPTNeuron(FPTConfig(K=3, output="bernoulli"))  # noqa: E731
    return {
        name: [run(f"gunpoint_{name}_s{s}", lambda s=s, m=make: train_digits(m, seed=s, **kw)["acc"]) for s in seeds]
        for name, make in (("lif", LIFSequential), ("fpt", fpt))
    }


# ---- depth and time ---------------------------------------------------------------------------------------------
def layer_timings(T: int, N: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """Median fwd+bwd seconds of one neuron layer on [T, N] (float32, CPU; input drawn from ``seed``)."""
    from icml25_shared.bench import measure

    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, N, generator=g) + 0.5).requires_grad_(True)
    fns: dict[str, Callable[[], Any]] = {
        "fpt_dense": lambda: fpt_lif(x, K=3, output="heaviside", path="dense").sum().backward(),
        "fpt_chunked": lambda: fpt_lif(x, K=3, output="heaviside", path="chunked").sum().backward(),
        "naive_loop": lambda: lif_reference(x).sum().backward(),
    }
    try:
        from spikingjelly.activation_based import functional, neuron

        lif = neuron.LIFNode(tau=2.0, decay_input=False, v_reset=None, step_mode="m")

        def sj() -> None:
            functional.reset_net(lif)
            lif(x).sum().backward()

        fns["spikingjelly_lif"] = sj
    except ImportError:
        log.info("spikingjelly not installed: its LIFNode is left out of the timings")
    return {k: measure(f, warmup=1, repeats=repeats).median for k, f in fns.items()}


# ---- figures ----------------------------------------------------------------------------------------------------
def plot_fidelity(fid: dict[float, dict[int, dict[Any, float]]], Ks: tuple[int, ...], out_dir: Path) -> Path:
    """Mismatch (%) vs K, one panel per λ, one line per T."""
    fig, axes = subplots(1, len(fid), figsize=(4.5 * len(fid), 3.6))
    for ax, (lam, rows) in zip(np.atleast_1d(axes), fid.items()):
        for T in rows:
            ax.plot(Ks, [100 * rows[T][k] for k in Ks], marker="o", label=f"T={T}")
        ax.axhline(3.0, color="grey", ls=":", lw=1)
        ax.set(title=f"hard FPT vs LIF, λ={lam}", xlabel="K (fixed-point iterations)", ylabel="spike mismatch (%)")
        ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "fidelity_mismatch_vs_K")


def plot_accuracy_vs_K(sweep: dict[str, dict[str, Any]], out_dir: Path) -> Path:
    """Accuracy vs K from :func:`accuracy_vs_K`, one panel per T, the LIF as a dashed line."""
    cells = [tuple(float(v.split("=")[1]) for v in key.split(",")) for key in sweep]
    Ts = sorted({int(T) for T, _ in cells})
    fig, axes = subplots(1, len(Ts), figsize=(5 * len(Ts), 3.6))
    for ax, Tq in zip(np.atleast_1d(axes), Ts):
        for i, lam in enumerate(lam for T, lam in cells if int(T) == Tq):
            row = sweep[f"T={Tq},lam={lam}"]
            ks = ["1", "2", "3", "auto"]
            ax.plot(ks, [100 * row[k] for k in ks], marker="o", color=f"C{i}", label=f"FPT λ={lam}")
            ax.axhline(100 * row["lif"], ls="--", lw=1, color=f"C{i}", label=f"LIF λ={lam}")
        ax.set(title=f"digits, T={Tq}", xlabel="K", ylabel="test accuracy (%)")
        ax.legend(fontsize=8)
    return save_figure(fig, out_dir, "accuracy_vs_K")


def plot_timing(tim: dict[str, float], T: int, N: int, out_dir: Path) -> Path:
    """Bars of the fwd+bwd milliseconds of :func:`layer_timings`."""
    fig, ax = subplots(1, 1, figsize=(5.5, 3.4))
    names = list(tim)
    ax.bar(names, [1e3 * tim[n] for n in names], color=["C0", "C1", "C3", "C2"][: len(names)])
    ax.set(ylabel="fwd+bwd ms (median)", title=f"one layer, T={T}, N={N}, {torch.get_num_threads()} threads")
    ax.tick_params(axis="x", labelrotation=20)
    return save_figure(fig, out_dir, "timing")


def plot_accuracy(mean: dict[str, float], T: int, n_seeds: int, out_dir: Path) -> Path:
    """Bars of the digits accuracies: LIF, FPT, FPT weights run as the exact LIF, PSN."""
    fig, ax = subplots(1, 1, figsize=(5.5, 3.4))
    labels = ["LIF (BPTT)", "FPT K=3", "FPT→exact LIF", "PSN"]
    vals = [mean["lif"], mean["fpt"], mean["fpt_as_lif"], mean["psn"]]
    ax.bar(labels, [100 * v for v in vals], color=["C0", "C1", "C2", "C4"])
    ax.set(ylabel="test accuracy (%)", title=f"digits, T={T}, {n_seeds} seed(s)", ylim=(0, 100))
    return save_figure(fig, out_dir, "accuracy_digits")
