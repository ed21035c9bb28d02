"""Scale: ``ProverPool`` (one persistent backend per worker process, any ``concurrent.futures.Executor``) and
``prove`` (proposals drawn until the first success or the budget, with pass@k bookkeeping and a resumable log).
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import pickle
import threading
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from math import comb
from pathlib import Path
from typing import Any

from icml25_shared.validate import check_int
from proofaug.augment import ProofAug, ProofAugResult
from proofaug.backends.base import ProverBackend
from proofaug.config import Problem, ProofAugConfig

__all__ = ["Job", "ProverPool", "ProveResult", "prove", "pass_at_k"]


@dataclass(frozen=True)
class Job:
    """One proposal to check: ``method`` is ``proofaug`` or a baseline; ``erp`` a scripted ERP completion;
    ``memo`` names the worker's (goal, tactic) memo the job uses (default: one per method)."""

    problem: Problem
    proposal: str
    method: str = "proofaug"
    erp: str | None = None
    key: str = ""
    memo: str = ""


class _Local(threading.local):
    def __init__(self) -> None:
        self.d: dict[str, Any] = {}


_LOCAL = _Local()  # one backend per worker process, and per thread under a thread-pool executor


def _close_weak(ref: weakref.ref) -> None:
    backend = ref()
    if backend is not None:
        backend.close()


def _backend(factory: Callable[[], ProverBackend]) -> ProverBackend:
    """The process's persistent backend for ``factory`` (created on first use, closed when the process exits)."""
    worker = _LOCAL.d
    tag = pickle.dumps(factory)
    if worker.get("tag") != tag:
        old = worker.get("backend")
        if old is not None:
            old.close()
        backend = factory()
        worker.update(tag=tag, backend=backend, memo={}, stats=[0, 0])
        # closed when its thread's locals go, or when the worker process exits (no strong reference kept)
        multiprocessing.util.Finalize(backend, _close_weak, args=(weakref.ref(backend),), exitpriority=10)
    return worker["backend"]


def _work_many(
    factory: Callable[[], ProverBackend], config: ProofAugConfig, jobs: list[Job]
) -> tuple[list[ProofAugResult], tuple[int, int]]:
    _backend(factory)  # a new backend resets the memo statistics: read them after that
    h0, n0 = _memo_stats()
    out = [_work(factory, config, j) for j in jobs]
    h1, n1 = _memo_stats()
    return out, (h1 - h0, n1 - n0)


def _work(factory: Callable[[], ProverBackend], config: ProofAugConfig, job: Job) -> ProofAugResult:
    backend = _backend(factory)
    worker = _LOCAL.d
    if job.erp is not None:
        completion = job.erp

        def scripted(prompt: str, n: int = 1, **_: Any) -> list[str]:
            return [completion] * n

        pa = ProofAug(backend, config.__class__(**{**asdict(config), "erp": True}), proposer=scripted)
    else:
        pa = ProofAug(backend, config.__class__(**{**asdict(config), "erp": False}))
    # one memo per worker and method, so that methods never profit from each other's ladder calls
    pa.memo = worker["memo"].setdefault(job.memo or job.method, {})
    result = pa.run_method(job.problem, job.proposal, job.method)  # type: ignore[arg-type]
    stats = worker["stats"]
    stats[0] += pa.memo_hits
    stats[1] += pa.memo_lookups
    return result


def _memo_stats() -> tuple[int, int]:
    stats = _LOCAL.d.get("stats", [0, 0])
    return stats[0], stats[1]


class ProverPool:
    """Run ``augment`` (or a baseline) over many proposals with one persistent backend per worker.

    Args:
        backend_factory: a picklable callable returning a backend (``CoqBackend``, ``functools.partial(...)``).
        workers: worker processes; 1 with no ``executor`` runs in this process.
        executor: any ``concurrent.futures.Executor`` (Ray's, dask's, a ``ProcessPoolExecutor``); each of its
            processes builds its backend on first use. Default: a ``ProcessPoolExecutor`` (spawn) of ``workers``.
        config: the ProofAug configuration used for every job.
    """

    def __init__(
        self,
        backend_factory: Callable[[], ProverBackend],
        workers: int = 1,
        executor: Executor | None = None,
        *,
        config: ProofAugConfig | None = None,
    ) -> None:
        if not callable(backend_factory):
            raise TypeError(f"backend_factory must be callable, got {type(backend_factory).__name__}")
        self.backend_factory = backend_factory
        self.workers = check_int("workers", workers, min=1)
        self.config = config or ProofAugConfig()
        self.memo_hits = 0
        self.memo_lookups = 0
        self._own = executor is None and self.workers > 1
        self.executor = executor
        if self._own:
            self.executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))

    def map(self, jobs: Iterable[Job], *, group: Callable[[Job], Any] | None = None) -> list[ProofAugResult]:
        """Results in the order of ``jobs``; jobs with the same ``group(job)`` run in order on one worker (so that
        they share its memo and check cache)."""
        jobs = list(jobs)
        if self.executor is None:
            out, (hits, lookups) = _work_many(self.backend_factory, self.config, jobs)
            self.memo_hits += hits
            self.memo_lookups += lookups
            return out
        groups: dict[Any, list[int]] = {}
        for i, j in enumerate(jobs):
            groups.setdefault(group(j) if group else i, []).append(i)
        futures = {
            k: self.executor.submit(_work_many, self.backend_factory, self.config, [jobs[i] for i in idx])
            for k, idx in groups.items()
        }
        out: list[Any] = [None] * len(jobs)
        for k, idx in groups.items():
            results, (hits, lookups) = futures[k].result()
            self.memo_hits += hits
            self.memo_lookups += lookups
            for i, r in zip(idx, results, strict=True):
                out[i] = r
        return out

    def memo_stats(self) -> tuple[int, int]:
        """(hits, lookups) of the per-worker (goal, tactic) memo over every ``map`` of this pool."""
        return self.memo_hits, self.memo_lookups

    def close(self) -> None:
        """Shut the pool down (worker backends close their provers when the workers exit)."""
        if self._own and self.executor is not None:
            self.executor.shutdown(wait=True)
        elif self.executor is None and "backend" in _LOCAL.d:
            _LOCAL.d.pop("backend").close()
            _LOCAL.d.pop("tag", None)

    def __enter__(self) -> ProverPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass
class ProveResult:
    """Outcome of :func:`prove` on one problem."""

    problem: str
    success: bool
    proof: str | None
    attempts: int
    results: list[dict] = field(default_factory=list)


def prove(
    problem: Problem,
    proposer: Callable[..., list[str]],
    proofaug: ProofAug,
    budget: int = 100,
    *,
    log: str | Path | None = None,
    prompt: str | None = None,
) -> ProveResult:
    """Draw proposals one at a time and augment each until the first success or ``budget`` proposals (Sec. 4).

    ``log`` (JSONL) records each attempt; a rerun with the same log resumes after the attempts already made.
    """
    from proofaug.proposers import check_proposals, prompt_for

    budget = check_int("budget", budget, min=1)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem, got {type(problem).__name__}")
    done: list[dict] = []
    if log is not None and Path(log).exists():
        done = [r for r in map(json.loads, Path(log).read_text().splitlines()) if r.get("problem") == problem.name]
        for r in done:
            if r["success"]:
                return ProveResult(problem.name, True, r["proof"], len(done), done)
    text = prompt or prompt_for(problem)
    results = list(done)
    while len(results) < budget:
        proposals = proposer(text, 1, problem=problem) if _takes_problem(proposer) else proposer(text, 1)
        proposals = check_proposals(proposals, 1)
        if not proposals:
            break
        res = proofaug.augment(problem, proposals[0])
        row = {
            "problem": problem.name,
            "attempt": len(results),
            "success": res.success,
            "stage": res.stage,
            "proof": res.proof,
            "checker_calls": res.checker_calls,
        }
        results.append(row)
        if log is not None:
            with Path(log).open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        if res.success:
            return ProveResult(problem.name, True, res.proof, len(results), results)
    return ProveResult(problem.name, False, None, len(results), results)


def _takes_problem(fn: Callable) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "problem" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
