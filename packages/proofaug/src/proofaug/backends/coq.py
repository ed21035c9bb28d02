"""Coq backend: one persistent ``coqtop -quiet -emacs`` per backend, rewound with ``BackTo``; fresh ``coqc`` checks.

``coqtop -emacs`` prints the goals after each command and then a prompt ``<prompt>NAME < N |NAME| 0 < </prompt>``
whose N is the id of the current state; an error leaves N unchanged and ``BackTo N.`` returns to any earlier state
in about a millisecond. We cache the state after each problem's header (``Require``s take seconds) and rewind to
it between problems. Tactics run under Coq's ``Timeout``; a Python watchdog kills a process that hangs anyway and
starts a new one (the call raises :class:`BackendError`, never a success). Only our own processes are killed.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from icml25_shared.validate import check_float
from proofaug.backends.base import BackendError, CheckResult, StatementError, StepResult
from proofaug.backends.kernel import kernel_check, screen_proof, statement_type
from proofaug.config import Problem
from proofaug.structure import classify, split_sentences

__all__ = ["CoqBackend", "coq_available", "hammer_available", "final_prefilter", "HAMMER_PRELUDE"]

_PROMPT = re.compile(rb"<prompt>(\S*) < (\d+) \|[^|]*\| \d+ < </prompt>")
_INFO = re.compile(r"<(infomsg|warning)>.*?</\1>", re.S)
_GAVE_UP = re.compile(
    r"<infomsg>\s*No more goals, but there are some goals you gave up:\s*</infomsg>.*?You need to go back and solve "
    r"them\.",
    re.S,
)
_SELECTOR = re.compile(r"^(\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*|all|par|!|\[\s*[A-Za-z_][\w']*\s*\])\s*:")

HAMMER_PRELUDE = "From Hammer Require Import Hammer Tactics."
_APT = "install Debian's packages: apt-get install coq (and libcoq-hammer eprover for the hammer)"


def coq_available(coqtop: str = "coqtop") -> bool:
    """Whether ``coqtop`` is on PATH."""
    return shutil.which(coqtop) is not None


def hammer_available(coqtop: str = "coqtop") -> bool:
    """Whether CoqHammer's library is installed next to ``coqtop`` and E prover is on PATH."""
    if not coq_available(coqtop) or shutil.which("eprover") is None:
        return False
    try:
        where = subprocess.run(["coqc", "-where"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return any((Path(where) / sub / "Hammer").is_dir() for sub in ("user-contrib", "../coq/user-contrib")) or any(
        Path(p, "Hammer").is_dir() for p in ("/usr/lib/ocaml/coq/user-contrib", "/usr/lib/coq/user-contrib")
    )


def _limit(memory_limit_gb: float):
    limit = int(memory_limit_gb * 2**30)

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _kill(proc: subprocess.Popen | None) -> None:
    """Stop one process this backend started, and its own process group (E prover runs started by CoqHammer)."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def clean_output(text: str) -> str:
    """The goal display of a coqtop answer: messages and warnings removed, the list of given-up goals folded
    into ``No more goals.`` (so that ``admit`` and a real proof of the last goal display the same)."""
    text = _GAVE_UP.sub("No more goals.", text)
    # keep the proof-state notes ("This subproof is complete, but there are some unfocused goals."), drop the rest
    keep = _INFO.sub(lambda m: m.group(0)[9:-10] if m.group(1) == "infomsg" and "goals" in m.group(0) else "", text)
    return keep.strip()


def final_prefilter(proof: str) -> str | None:
    """Why ``proof`` cannot be a real proof before running anything, or None (:func:`kernel.screen_proof`)."""
    return screen_proof(proof)


def _coq_only(problem: Problem) -> None:
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a Problem, got {type(problem).__name__}")
    if problem.language != "coq":
        other = {"lean": "LeanReplBackend", "isabelle": "IsabelleBackend"}[problem.language]
        raise ValueError(
            f"problem.language={problem.language!r}: CoqBackend runs Coq problems only (use {other} for this problem)"
        )


class CoqBackend:
    """Coq through ``coqtop -quiet -emacs`` (persistent, ``BackTo``) and ``coqc`` (final check).

    Args:
        coqtop: the ``coqtop`` executable.
        coqc: the ``coqc`` executable (final check).
        memory_limit_gb: address-space cap of every Coq process (``RLIMIT_AS``).
        hammer: load CoqHammer (``From Hammer Require Import Hammer Tactics``, :data:`HAMMER_PRELUDE`) after each
            header, for ``sauto`` and ``hammer`` in the ladder; final checks then load it too (a proof that uses
            ``sauto`` needs that line in its file).
        watchdog: seconds past a command's own timeout after which the process is killed and restarted.
        atp_limit: ``Set Hammer ATPLimit`` (seconds) before ``hammer``.
        fresh_check: the final check compiles the file with ``coqc``, checks the statement by type in a second
            file and re-checks both with ``coqchk`` (:mod:`proofaug.backends.kernel`; default, about 1 CPU-s).
            ``False`` is a fast pre-screen for searches: the same sentence screen, then a second, separate
            ``coqtop`` rewound to the header before every check runs the proof to ``Qed.`` (Coq's kernel checks
            the term) and the statement by type; it lists no axioms the header's libraries provide, so pair it
            with the kernel re-check of every success, as the reproduction does
            (``experiments.independent_check``).
        coqchk: the ``coqchk`` executable (final check).
        allowed_axioms: axioms a proof may depend on, as ``Print Assumptions`` names them (e.g.
            ``ClassicalDedekindReals.sig_forall_dec`` for a real-analysis header); default none.
    """

    def __init__(
        self,
        coqtop: str = "coqtop",
        coqc: str = "coqc",
        memory_limit_gb: float = 4.0,
        *,
        hammer: bool = False,
        watchdog: float = 30.0,
        atp_limit: int = 10,
        fresh_check: bool = True,
        coqchk: str = "coqchk",
        allowed_axioms: tuple[str, ...] = (),
    ) -> None:
        paths: dict[str, str] = {}
        for arg, given in (("coqtop", coqtop), ("coqc", coqc), ("coqchk", coqchk)):
            found = shutil.which(given)
            if found is None:
                raise FileNotFoundError(f"{arg}={given!r}: not found on PATH; {_APT}")
            paths[arg] = found
        self.coqtop: str = paths["coqtop"]
        self.coqc: str = paths["coqc"]
        self.coqchk: str = paths["coqchk"]
        if isinstance(allowed_axioms, str) or not all(isinstance(a, str) for a in allowed_axioms):
            raise TypeError(f"allowed_axioms must be a tuple of axiom names, got {allowed_axioms!r}")
        self.allowed_axioms = tuple(allowed_axioms)
        self.memory_limit_gb = check_float("memory_limit_gb", memory_limit_gb, min=0.25)
        self.watchdog = check_float("watchdog", watchdog, min=0.0, min_open=True)
        self.hammer = bool(hammer)
        if self.hammer and not hammer_available(coqtop):
            raise FileNotFoundError(f"hammer=True: CoqHammer or eprover not installed; {_APT}")
        self.atp_limit = int(atp_limit)
        self.fresh_check = bool(fresh_check)
        self._checker: CoqBackend | None = None
        self.calls = 0
        self.restarts = 0
        self.log: list[tuple[str, str, float]] = []
        self._proc: subprocess.Popen | None = None
        # coqtop's working folder: lia/nia write their caches (.lia.cache) there, never in the user's cwd
        self._workdir = tempfile.mkdtemp(prefix="proofaug-coq-")
        weakref.finalize(self, shutil.rmtree, self._workdir, ignore_errors=True)
        self._buf = b""
        self._initial = 0
        self._current = 0
        self._header: str | None = None
        self._header_state = 0
        self._display = ""
        self._checked: dict[tuple[str, str, str], CheckResult] = {}
        self._finalizer = weakref.finalize(self, _kill, None)

    # -------------------------------------------------------------------- process
    def _spawn(self) -> None:
        self._proc = subprocess.Popen(
            [self.coqtop, "-quiet", "-emacs"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_limit(self.memory_limit_gb),
            start_new_session=True,
            cwd=self._workdir,
        )
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        self._buf = b""
        self._display = ""
        _, state = self._read(time.monotonic() + 60.0)
        self._initial = self._current = state
        self._header = None

    def _restart(self, why: str) -> BackendError:
        _kill(self._proc)
        self._proc = None
        self._header = None
        self.restarts += 1
        return BackendError(f"coqtop {why}; the process was restarted")

    def _read(self, deadline: float) -> tuple[str, int]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            m = _PROMPT.search(self._buf)
            if m:
                out = self._buf[: m.start()].decode("utf-8", "replace")
                self._buf = self._buf[m.end() :]
                return out, int(m.group(2))
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._restart("did not answer before the watchdog")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise self._restart(f"exited (code {self._proc.poll()})")
                self._buf += chunk

    def _send(self, code: str, timeout: float) -> tuple[str, int]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                raise self._restart("crashed")
            self._spawn()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(code.encode() + b"\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise self._restart(f"crashed ({err})") from err
        out, state = self._read(time.monotonic() + timeout + self.watchdog)
        self._current = state
        return out, state

    def _goto(self, state: int) -> None:
        if self._current != state:
            out, now = self._send(f"BackTo {state}.", 10.0)
            if now != state:
                raise self._restart(f"could not rewind to state {state}: {out.strip()[:200]}")

    @staticmethod
    def _error(out: str) -> str | None:
        if "Error:" in out or out.lstrip().startswith("Toplevel input"):
            i = out.find("Error:")
            return " ".join(out[i + 6 :].split()) if i >= 0 else " ".join(out.split())
        return None

    def _result(self, out: str, state: int, before: int) -> StepResult:
        err = self._error(out)
        if err is not None:
            return StepResult(False, before, "", err, timed_out="Timeout!" in err)
        # coqtop prints the goals only when they differ from the last goals it printed
        shown = clean_output(out)
        if shown:
            self._display = shown
        return StepResult(True, state, self._display)

    # -------------------------------------------------------------------- protocol
    def start(self, problem: Problem) -> StepResult:
        """Header (cached per worker: ``BackTo`` its state) then the statement; the state before ``Proof.``."""
        _coq_only(problem)
        self._enter_header(problem)
        self.calls += 1
        t0 = time.perf_counter()
        out, state = self._send(" ".join(problem.statement.split()), 60.0)
        self.log.append(("start", problem.name, time.perf_counter() - t0))
        return self._result(out, state, self._header_state)

    def _enter_header(self, problem: Problem) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = None
            self._spawn()
        if self._header != problem.header:
            self._goto(self._initial)
            prelude = split_sentences(problem.header)
            if self.hammer:
                prelude += split_sentences("\n" + HAMMER_PRELUDE)
            for s in prelude:
                if s.kind == "blank":
                    continue
                if not s.terminated:  # coqtop would wait for the period forever
                    self._header = None
                    raise StatementError(
                        f"header of {problem.name!r} fails at {s.code[:60]!r}: Syntax error: '.' expected "
                        "(every Coq sentence ends with a period)"
                    )
                out, _ = self._send(s.code, 600.0)
                err = self._error(out)
                if err is not None:
                    self._header = None
                    raise StatementError(f"header of {problem.name!r} fails at {s.code!r}: {err}")
            self._header, self._header_state = problem.header, self._current
        self._goto(self._header_state)

    def run(self, state: Any, sentence: str, timeout: float) -> StepResult:
        """One sentence from ``state``; tactics run as ``Timeout t (…)`` (goal-selector sentences: watchdog only)."""
        code = " ".join(sentence.split())
        self._goto(int(state))
        self.calls += 1
        if classify(code) == "tactic" and not _SELECTOR.match(code):
            code = f"Timeout {max(1, math.ceil(timeout))} {code}"
        t0 = time.perf_counter()
        out, new = self._send(code, timeout)
        self.log.append(("run", code, time.perf_counter() - t0))
        return self._result(out, new, int(state))

    def run_hammer(self, state: Any, tactic: str, timeout: float) -> StepResult:
        """``Timeout t (solve [ tactic ])`` from ``state``; CoqHammer's ``hammer`` runs under its own limits."""
        self._goto(int(state))
        if tactic == "hammer":
            limit = max(1, math.ceil(timeout))
            self._send(f"Set Hammer ATPLimit {limit}.", 10.0)
            self._send(f"Set Hammer ReconstrLimit {limit}.", 10.0)
            code, budget = "hammer.", 4 * limit + 10
        else:
            code, budget = f"Timeout {max(1, math.ceil(timeout))} (solve [ {tactic} ]).", timeout
        self.calls += 1
        t0 = time.perf_counter()
        out, new = self._send(code, budget)
        self.log.append(("hammer", code, time.perf_counter() - t0))
        return self._result(out, new, int(state))

    def check(self, problem: Problem, proof: str, timeout: float = 60.0) -> CheckResult:
        """The sound final check (:mod:`proofaug.backends.kernel`): sentence screen, ``coqc`` on header +
        statement + proof, the statement by type in a second file, ``coqchk`` on both; axioms outside
        ``allowed_axioms`` and bypassed guard/positivity/universe checks are rejected.

        Results are memoised per text (a repeated check is neither run nor counted as a call)."""
        _coq_only(problem)
        if not isinstance(proof, str):
            raise TypeError(f"proof must be a str, got {type(proof).__name__}")
        key = (problem.header, problem.statement, proof)
        if key in self._checked:
            return self._checked[key]
        self.calls += 1
        result = self._check(problem, proof, timeout)
        self._checked[key] = result
        return result

    def _check(self, problem: Problem, proof: str, timeout: float) -> CheckResult:
        why = final_prefilter(proof)
        if why is not None:
            self.log.append(("check", problem.name, 0.0))
            return CheckResult(False, why)
        if not self.fresh_check:
            return self._check_warm(problem, proof, timeout)
        return kernel_check(
            problem.header,
            problem.statement,
            proof,
            coqc=self.coqc,
            coqchk=self.coqchk,
            prelude=HAMMER_PRELUDE if self.hammer else "",
            allowed_axioms=self.allowed_axioms,
            timeout=timeout,
            preexec_fn=_limit(self.memory_limit_gb),
            log=lambda dt: self.log.append(("check", problem.name, dt)),
        )

    def _check_warm(self, problem: Problem, proof: str, timeout: float) -> CheckResult:
        """The pre-screen in the separate checker process: the problem's statement elaborated first as
        ``pa_target``, then statement, every sentence, ``Qed.`` (the kernel checks the term) and
        ``pa_check : pa_target := name`` (the statement by type). The screen has rejected vernacular and
        ``admit``; library axioms are not listed (the kernel re-check does that)."""
        if self._checker is None:
            self._checker = CoqBackend(
                self.coqtop, self.coqc, self.memory_limit_gb, watchdog=self.watchdog, hammer=self.hammer
            )
        chk = self._checker
        t0 = time.perf_counter()
        name, target = statement_type(problem.statement)
        try:
            chk._enter_header(problem)
            for code in (f"Definition pa_target := ({target}).", " ".join(problem.statement.split())):
                err = chk._error(chk._send(code, 60.0)[0])
                if err is not None:
                    return CheckResult(False, f"statement {code[:60]!r}: {err}")
            for s in split_sentences(proof):
                if s.kind == "blank":
                    continue
                out, _ = chk._send(s.code, timeout)
                err = chk._error(out)
                if err is not None:
                    return CheckResult(False, f"{s.code[:60]!r}: {err}")
            err = chk._error(chk._send(f"Definition pa_check : pa_target := {name}.", 60.0)[0])
            if err is not None:
                return CheckResult(False, f"the proved constant {name!r} does not have the problem's statement: {err}")
        except BackendError as err:
            return CheckResult(False, str(err))
        finally:
            self.log.append(("check", problem.name, time.perf_counter() - t0))
        return CheckResult(True, "warm check: assumptions not listed")

    def close(self) -> None:
        """Kill our coqtop processes (and their process groups)."""
        if self._checker is not None:
            self._checker.close()
            self._checker = None
        _kill(self._proc)
        self._proc = None
        self._header = None

    def __enter__(self) -> CoqBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        raise TypeError("CoqBackend holds a live process; pass a factory (e.g. CoqBackend itself) to ProverPool")
