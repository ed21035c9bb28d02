"""Run reproductions, each in its own process on one torch thread, several at once.

The ``icml25`` command owns the reproduction contract: a package's ``reproduce(full, out_dir, *, download)``
returns a :class:`~icml25_shared.report.ReproResult`; this module resolves ``out_dir``, runs it in a fresh Python
process (so that a crash, a thread setting or a leaked global in one package cannot touch another), stamps mode,
wall and CPU time, versions and machine, and writes ``<out>/<package>/result_<mode>.json`` and the process's output
to ``<out>/<package>/log_<mode>.txt``.

The worker half is ``python -m icml25_shared.runner NAME TARGET OUT_DIR [--full] [--download] [--seed N]`` where
``TARGET`` is ``module:function``. ``--seed`` reaches ``reproduce(..., seed=N)``; a reproduction that raises
:class:`~icml25_shared.report.MissingPrerequisite` is recorded as skipped (not crashed) with the reason.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path

from icml25_shared.report import Claim, MissingPrerequisite, ReproResult

__all__ = ["Job", "run_jobs", "run_in_process", "usable_cpus", "result_path"]

#: environment of every reproduction process: one intra-op thread everywhere, no progress bars in the logs
THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "PYTHONUNBUFFERED": "1",
    "ICML25_PROGRESS": "0",
}


def usable_cpus() -> int:
    """Cores this process may run on (affinity-aware)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def result_path(out_dir: Path, mode: str) -> Path:
    """``<out_dir>/result_<mode>.json``."""
    return Path(out_dir) / f"result_{mode}.json"


def _reap_workers() -> None:
    """Stop joblib's reusable (loky) worker pool, if one was started, and join finished children: a worker that is
    still alive has not been reaped, so its CPU time would be missing from ``RUSAGE_CHILDREN``."""
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None) if loky is not None else None
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=False)
    import multiprocessing

    multiprocessing.active_children()  # joins children that have exited


def _cpu_seconds() -> float:
    """CPU seconds of this process and of every child it has reaped (worker processes included)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cpu_after() -> float:
    _reap_workers()
    return _cpu_seconds()


def _load_target(target: str) -> Callable[..., ReproResult]:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    fn = import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn  # type: ignore[return-value]


def _call(fn: Callable[..., ReproResult], *, full: bool, out_dir: Path, download: bool, seed: int) -> ReproResult:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
        takes_seed = any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)
    except (TypeError, ValueError):  # no introspectable signature: pass the seed and let the call say
        takes_seed = True
    if takes_seed:
        return fn(full=full, out_dir=out_dir, download=download, seed=seed)
    if seed != 0:
        raise TypeError(f"this reproduce() takes no seed, so it runs only at seed 0 (asked for seed {seed})")
    return fn(full=full, out_dir=out_dir, download=download)


def _skipped(name: str, err: MissingPrerequisite) -> ReproResult:
    res = ReproResult(name, [Claim("reproduction ran", None, f"skipped: {err}", None, short="ran", verdict="skipped")])
    res.skipped = str(err)
    res.settings = {"missing": err.program, "install": err.install}
    return res


def run_in_process(
    name: str, target: str, out_dir: Path, *, full: bool = False, download: bool = False, seed: int = 0
) -> ReproResult:
    """Run one reproduction in this process on one torch thread; stamp it and write its JSON (never raises)."""
    mode = "full" if full else "quick"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0, c0 = time.perf_counter(), _cpu_seconds()
    try:
        fn = _load_target(target)
        if "torch" in sys.modules:  # numpy-only packages never pay for importing torch
            from icml25_shared.device import torch_threads

            with torch_threads(1):
                res = _call(fn, full=full, out_dir=out_dir, download=download, seed=seed)
        else:
            res = _call(fn, full=full, out_dir=out_dir, download=download, seed=seed)
        if not isinstance(res, ReproResult):
            raise TypeError(f"reproduce() of {name} returned {type(res).__name__}, expected ReproResult")
    except MissingPrerequisite as err:
        print(f"{name}: skipped, {err}")
        res = _skipped(name, err)
    except BaseException as err:  # a crash is reported as the package's result, never propagated
        if isinstance(err, KeyboardInterrupt):
            raise
        traceback.print_exc()
        last = traceback.format_exception_only(err)[-1].strip()
        res = ReproResult(name, [Claim("reproduction ran to completion", None, "crashed", False, short="ran")])
        res.crashed = True
        res.settings = {"error": last}
    res.seed = seed
    res.stamp(
        mode=mode,
        runtime_s=time.perf_counter() - t0,
        cpu_s=_cpu_after() - c0,
        started=started,
        out_dir=out_dir,
    )
    res.save_json(result_path(out_dir, mode))
    return res


@dataclass
class Job:
    """One reproduction to run: its name, ``module:function`` target and output folder."""

    name: str
    target: str
    out_dir: Path
    seed: int | None = None
    """The base seed handed to ``reproduce`` (``None``: :func:`run_jobs`'s ``seed``)."""
    state: str = "queued"  # queued | running | done | crashed
    started: float = 0.0
    elapsed: float = 0.0
    result: ReproResult | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    log: object = field(default=None, repr=False)


def _spawn(
    job: Job, *, full: bool, download: bool, workers: int, extra_env: dict[str, str] | None, seed: int = 0
) -> None:
    mode = "full" if full else "quick"
    job.out_dir.mkdir(parents=True, exist_ok=True)
    result_path(job.out_dir, mode).unlink(missing_ok=True)
    env = {**os.environ, **THREAD_ENV, "ICML25_WORKERS": str(workers), **(extra_env or {})}
    cmd = [sys.executable, "-m", "icml25_shared.runner", job.name, job.target, str(job.out_dir)]
    cmd += ["--full"] * full + ["--download"] * download + ["--seed", str(seed)]
    job.log = open(job.out_dir / f"log_{mode}.txt", "w", encoding="utf-8")  # noqa: SIM115 - closed in _reap
    job.proc = subprocess.Popen(cmd, stdout=job.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    job.state, job.started = "running", time.perf_counter()


def _reap(job: Job, *, full: bool) -> None:
    mode = "full" if full else "quick"
    assert job.proc is not None
    rc = job.proc.returncode
    job.log.close()  # type: ignore[union-attr]
    job.elapsed = time.perf_counter() - job.started
    path = result_path(job.out_dir, mode)
    res = None
    if path.is_file():
        try:
            res = ReproResult.load_json(path)
        except (ValueError, KeyError, TypeError):
            res = None
    if res is None:  # the process died before writing (killed, segfault, out of memory)
        res = ReproResult(job.name, [Claim("reproduction ran to completion", None, "crashed", False, short="ran")])
        res.crashed = True
        res.settings = {"error": f"process exited with status {rc} without a result; see log_{mode}.txt"}
        res.stamp(mode=mode, runtime_s=job.elapsed, cpu_s=0.0, started="", out_dir=job.out_dir)
        res.save_json(path)
    job.result = res
    job.state = "crashed" if res.crashed else "done"


def run_jobs(
    jobs: Sequence[Job],
    *,
    full: bool = False,
    download: bool = False,
    n_jobs: int | None = None,
    on_change: Callable[[Sequence[Job]], None] | None = None,
    extra_env: dict[str, str] | None = None,
    poll_s: float = 0.2,
    seed: int = 0,
) -> list[ReproResult]:
    """Run ``jobs`` in subprocesses, at most ``n_jobs`` at a time (default: usable cores); results in job order.

    Jobs start in the order given (callers put the longest first); ``on_change(jobs)`` is called whenever a job
    starts or ends and every ``poll_s`` while any runs (live displays). Each process gets ``ICML25_WORKERS`` =
    cores // ``n_jobs`` for packages that fan out internally (:func:`icml25_shared.device.worker_count`).
    """
    n_jobs = n_jobs or usable_cpus()
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be a positive int, got {n_jobs}")
    workers = max(1, usable_cpus() // min(n_jobs, max(1, len(jobs))))
    pending = list(jobs)
    running: list[Job] = []
    try:
        while pending or running:
            while pending and len(running) < n_jobs:
                job = pending.pop(0)
                job_seed = seed if job.seed is None else job.seed
                _spawn(job, full=full, download=download, workers=workers, extra_env=extra_env, seed=job_seed)
                running.append(job)
                if on_change:
                    on_change(jobs)
            time.sleep(poll_s)
            for job in list(running):
                job.elapsed = time.perf_counter() - job.started
                if job.proc is not None and job.proc.poll() is not None:
                    _reap(job, full=full)
                    running.remove(job)
            if on_change:
                on_change(jobs)
    finally:  # Ctrl-C or an error here: leave no orphan reproductions behind
        for job in running:
            if job.proc is not None and job.proc.poll() is None:
                job.proc.kill()
                job.proc.wait()
            if job.log is not None and not job.log.closed:  # type: ignore[union-attr]
                job.log.close()  # type: ignore[union-attr]
    return [j.result for j in jobs if j.result is not None]


def _worker(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m icml25_shared.runner")
    p.add_argument("name")
    p.add_argument("target")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--full", action="store_true")
    p.add_argument("--download", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    res = run_in_process(a.name, a.target, a.out_dir, full=a.full, download=a.download, seed=a.seed)
    return 1 if res.crashed else 0


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses in tests
    sys.exit(_worker())
