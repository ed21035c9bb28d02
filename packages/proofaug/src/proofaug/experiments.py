"""The reproduction's experiment: every method on identical proposals and ladder, the independent re-check, and
the summaries (rates, stages, checker calls, pass@k, per-kind table). Importable by users."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from proofaug.augment import ProofAugResult
from proofaug.backends.coq import CoqBackend
from proofaug.config import COQ_LADDER, COQ_QUICK_LADDER, ProofAugConfig
from proofaug.pool import Job, ProverPool, pass_at_k
from proofaug.suite import KINDS, SuiteItem

__all__ = [
    "Setup",
    "QUICK",
    "FULL",
    "SuiteRun",
    "run_suite",
    "independent_check",
    "plot_rates",
    "margin",
    "only_proofaug",
]

BASELINES = ("plain", "theorem_ladder", "dsp_holes", "first_error")


@dataclass(frozen=True)
class Setup:
    """What a reproduction runs: the subset, the ladder, the methods, the workers."""

    quick: bool = True
    hammers: tuple[str, ...] = COQ_QUICK_LADDER
    hammer_timeout: float = 1.0
    step_timeout: float = 5.0
    methods: tuple[str, ...] = (*BASELINES, "proofaug")
    workers: int = 2
    atp: bool = False
    sauto: bool = False
    n_seeds: int = 5
    """Quick: how many seeded stratified samples (``suite.sample_quick``) the headline claim is judged on."""

    def config(self) -> ProofAugConfig:
        hammers = self.hammers + (("sauto",) if self.sauto else ())
        return ProofAugConfig(
            hammers=hammers, hammer_timeout=self.hammer_timeout, step_timeout=self.step_timeout, atp=self.atp
        )


QUICK = Setup(methods=(*BASELINES, "proofaug", "proofaug+erp"))
FULL = Setup(quick=False, hammers=COQ_LADDER, methods=(*BASELINES, "proofaug", "proofaug+erp"), sauto=True, n_seeds=1)


@dataclass
class SuiteRun:
    """Results per method (same order as ``items``) and the pool's memo statistics."""

    items: list[SuiteItem]
    results: dict[str, list[ProofAugResult]]
    memo: tuple[int, int] = (0, 0)
    false_positives: int = 0
    rechecked: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def subset(self, ids: set[str] | list[str]) -> SuiteRun:
        """The same results restricted to the items whose id is in ``ids`` (suite order kept)."""
        keep = [i for i, it in enumerate(self.items) if it.id in set(ids)]
        return SuiteRun(
            [self.items[i] for i in keep], {m: [r[i] for i in keep] for m, r in self.results.items()}, self.memo
        )

    def rate(self, method: str) -> float:
        res = self.results[method]
        return sum(r.success for r in res) / len(res)

    def stages(self, method: str = "proofaug") -> dict[str, int]:
        return dict(Counter(r.stage for r in self.results[method]))

    def calls(self, method: str) -> float:
        res = self.results[method]
        return sum(r.checker_calls for r in res) / len(res)

    def seconds(self, method: str) -> float:
        return sum(r.seconds for r in self.results[method])

    def mismatches(self) -> list[tuple[str, str, bool]]:
        """(id, method, measured) where the outcome differs from the suite's expectation."""
        out = []
        for m, res in self.results.items():
            for item, r in zip(self.items, res, strict=True):
                if m in item.expected and item.expected[m] != r.success:
                    out.append((item.id, m, r.success))
        return out

    def per_kind(self) -> dict[str, dict[str, str]]:
        table: dict[str, dict[str, str]] = {}
        for k in KINDS:
            idx = [i for i, it in enumerate(self.items) if it.kind == k]
            if idx:
                table[k] = {m: f"{sum(self.results[m][i].success for i in idx)}/{len(idx)}" for m in self.results}
        return table

    def pass_at(self, method: str, k: int) -> tuple[float, int]:
        """Mean unbiased pass@k over problems with at least k proposals in the run, and that problem count."""
        by: dict[str, list[bool]] = defaultdict(list)
        for item, r in zip(self.items, self.results[method], strict=True):
            by[item.problem.name].append(r.success)
        vals = [pass_at_k(len(v), sum(v), k) for v in by.values() if len(v) >= k]
        return (sum(vals) / len(vals) if vals else float("nan")), len(vals)


def run_suite(
    items: list[SuiteItem], setup: Setup = QUICK, backend_factory: Callable[[], Any] | None = None
) -> SuiteRun:
    """Every method of ``setup`` on every item, through one pool (methods interleaved per proposal)."""
    config = setup.config()
    if backend_factory is None:  # warm checker per worker; every success is re-checked by fresh coqc afterwards
        backend_factory = partial(CoqBackend, fresh_check=False, hammer=setup.sauto or setup.atp)
    jobs = []
    for item in items:
        for m in setup.methods:
            if m == "proofaug+erp" and item.erp is None and "proofaug" in setup.methods:
                continue  # without a completion ERP never fires: the proofaug row's result is this row's
            erp = item.erp if m == "proofaug+erp" else None
            method = "proofaug" if m == "proofaug+erp" else m
            jobs.append(Job(item.problem, item.proposal, method, erp, f"{item.id}:{m}", memo=m))
    with ProverPool(backend_factory, setup.workers, config=config) as pool:
        flat = dict(zip((j.key for j in jobs), pool.map(jobs, group=lambda j: j.key.rsplit(":", 1)[0]), strict=True))
        memo = pool.memo_stats()
    results = {m: [flat.get(f"{it.id}:{m}") or flat[f"{it.id}:proofaug"] for it in items] for m in setup.methods}
    return SuiteRun(items, results, memo)


def independent_check(
    run: SuiteRun,
    coqc: str = "coqc",
    timeout: float = 600.0,
    *,
    hammer: bool = False,
    coqchk: str = "coqchk",
    allowed_axioms: tuple[str, ...] = (),
) -> tuple[int, int]:
    """Re-check every distinct successful proof with fresh ``coqc`` and ``coqchk`` processes; returns (false
    positives, proofs checked).

    Independent of the backend's final check (no code shared beyond writing the file; no screen of the text):
    per header, one file holds every proof (theorems renamed ``pa_proof_i``); a second file compiled after it
    loads that library, restates each problem's statement as ``pa_goal_i`` and proves it by ``exact`` of
    ``pa_proof_i`` after reverting the statement's binders (so the proved constant must have the statement's type,
    up to conversion), then prints the assumptions of all the goals. ``coqchk -o`` re-checks both compiled files in
    the kernel checker: no axiom of ours, nothing relying on type-in-type, unsafe (co)fixpoints or assumed
    positivity; the printed assumptions must lie in ``allowed_axioms`` (default none). A failing batch is re-run
    one proof at a time to count the culprits. ``hammer``: CoqHammer's import follows the header.
    """
    todo: dict[tuple[str, str, str], Any] = {}
    for res in run.results.values():
        for item, r in zip(run.items, res, strict=True):
            if r.success:
                todo.setdefault((item.problem.header, item.problem.statement, r.proof), item.problem)
    by_header: dict[str, list] = defaultdict(list)
    for (header, _, proof), problem in todo.items():
        by_header[header].append((problem, proof))
    bad = 0
    for header, group in by_header.items():
        prelude = header + ("\nFrom Hammer Require Import Hammer Tactics." if hammer else "")
        if _recheck(prelude, group, coqc, coqchk, timeout, set(allowed_axioms)):
            continue
        bad += sum(not _recheck(prelude, [one], coqc, coqchk, timeout, set(allowed_axioms)) for one in group)
    return bad, len(todo)


_RECHECK_SUB, _RECHECK_GOAL = "RecheckSubmission", "RecheckGoals"


def _recheck(prelude: str, group: list, coqc: str, coqchk: str, timeout: float, allowed: set[str]) -> bool:
    """One batch of :func:`independent_check`: True when every proof of ``group`` passes."""
    sub, goals = [prelude], [prelude, f"Require {_RECHECK_SUB}."]
    for i, (problem, proof) in enumerate(group):
        name = re.escape(problem.name)
        sub.append(re.sub(rf"\b{name}\b", f"pa_proof_{i}", problem.statement, count=1) + "\n" + proof)
        goals.append(
            re.sub(rf"\b{name}\b", f"pa_goal_{i}", problem.statement, count=1)
            + "\nProof. repeat match goal with H : _ |- _ => revert H end. "
            + f"exact {_RECHECK_SUB}.pa_proof_{i}. Qed."
        )
    names = ", ".join(f"pa_goal_{i}" for i in range(len(group)))
    goals.append(f"Definition pa_all := ({names}, I).\nPrint Assumptions pa_all.")
    with tempfile.TemporaryDirectory(prefix="proofaug_recheck_") as tmp:
        Path(tmp, f"{_RECHECK_SUB}.v").write_text("\n\n".join(sub) + "\n", encoding="utf-8")
        Path(tmp, f"{_RECHECK_GOAL}.v").write_text("\n\n".join(goals) + "\n", encoding="utf-8")
        try:
            for f in (_RECHECK_SUB, _RECHECK_GOAL):
                p = subprocess.run(
                    [coqc, "-q", "-R", ".", "", f"{f}.v"], capture_output=True, text=True, timeout=timeout, cwd=tmp
                )
                if p.returncode != 0:
                    return False
            printed = p.stdout.strip()
            k = subprocess.run(
                [coqchk, "-silent", "-o", "-R", ".", "", "-norec", _RECHECK_SUB, "-norec", _RECHECK_GOAL],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return False
    if k.returncode != 0 or "CONTEXT SUMMARY" not in k.stdout + k.stderr:
        return False
    summary = (k.stdout + k.stderr).split("CONTEXT SUMMARY", 1)[1]
    section = ""
    for line in summary.splitlines():
        if line.startswith("* "):
            section = line
            rest = line.split(":", 1)[1].strip()
            if not section.startswith(("* Theory", "* Axioms")) and rest not in ("", "<none>"):
                return False
        elif line.strip() and section:
            entry = line.strip()
            if not section.startswith(("* Theory", "* Axioms")) or entry.startswith((_RECHECK_SUB, _RECHECK_GOAL)):
                return False
    if printed == "Closed under the global context":
        return True
    if "assumed" in printed or not printed.startswith("Axioms:"):
        return False
    listed = [ln.split(" :")[0].strip() for ln in printed.splitlines()[1:] if ln and not ln[0].isspace()]
    return all(a in allowed for a in listed)


def plot_rates(run: SuiteRun, out_dir: Path, name: str = "pass_rates") -> Path:
    """Pass rate per method (bars) and ProofAug's stage histogram."""
    from icml25_shared.report import save_figure, subplots

    fig, (ax1, ax2) = subplots(1, 2)
    methods = list(run.results)
    ax1.bar(range(len(methods)), [100 * run.rate(m) for m in methods], color="tab:blue")
    ax1.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax1.set_ylabel("pass rate on identical proposals (%)")
    ax1.set_title(f"Coq, {len(run.items)} proposals")
    st = run.stages("proofaug")
    ax2.bar(list(st), list(st.values()), color="tab:orange")
    ax2.set_title("ProofAug stages")
    ax2.set_ylabel("proposals")
    return save_figure(fig, out_dir, name)


def margin(rates: dict[str, float], method: str = "proofaug") -> float:
    """rate(method) − the best baseline's rate: the headline claim's figure on one sample."""
    return rates[method] - max(rates[m] for m in BASELINES if m in rates)


def only_proofaug(run: SuiteRun) -> dict[str, list[str]]:
    """Ids of proposals that proofaug (or proofaug+erp) repairs and no baseline does, by the stage of the success:
    ``init_atp`` (MCSP kept correct steps after an error), ``coarse_atp`` (a coarser cut), ``erp``."""
    out: dict[str, list[str]] = {"init_atp": [], "coarse_atp": [], "erp": []}
    rows = ["proofaug+erp", "proofaug"] if "proofaug+erp" in run.results else ["proofaug"]
    for i, it in enumerate(run.items):
        if any(run.results[m][i].success for m in BASELINES if m in run.results):
            continue
        for m in rows:
            r = run.results[m][i]
            if r.success and r.stage in out:
                out[r.stage].append(it.id)
                break
    return out
