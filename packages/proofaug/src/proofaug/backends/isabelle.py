"""Isabelle through the Isabelle server (``isabelle server``, driven with the ``isabelle-client`` package).

The server checks whole theories (``use_theories``); it has no step-by-step proof states. A state here is the
tuple of Isar steps executed so far: running a step re-checks ``statement + steps + step`` followed by ``oops``
(which ends any unfinished proof without an error), so a step succeeds iff that theory has no error. The step
``end`` is checked without ``oops``: it passes only when the proof is finished, which is how ProofAug's end-of-proof
rule asks "do goals remain". The session runs with ``quick_and_dirty`` so that ``sorry`` holes are accepted while
a proof is analysed; the final check rejects ``sorry``/``oops``/``\\<proof>``/``sledgehammer`` and axioms in the
proof text and re-checks the whole theory. The ladder is the paper's heuristic tactics (Sec. 4.1,
:data:`ISABELLE_LADDER`); Sledgehammer needs a PISA-compatible server, which this backend does not drive.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from proofaug.backends.base import BackendError, CheckResult, StepResult
from proofaug.config import Problem

__all__ = ["IsabelleBackend", "ISABELLE_LADDER", "isabelle_available", "ISAR_END"]

#: The paper's heuristic proof methods for Isabelle (Sec. 4.1), cheapest first; each runs as ``by <method>``.
ISABELLE_LADDER: tuple[str, ...] = (
    "auto",
    "simp",
    "blast",
    "fastforce",
    "force",
    "eval",
    "presburger",
    "sos",
    "arith",
    "linarith",
    "(auto simp: field_simps)",
)
#: The pseudo-step that ends a proof (checked without ``oops``).
ISAR_END = "end"

# holes, axioms, ML code (which can add oracles or change the logic), new specifications and theory commands
_CHEATS = re.compile(
    r"\b(sorry|oops|sledgehammer|axiomatization|axioms|skip_proof|oracle|ML|ML_val|ML_command|ML_file|setup|"
    r"local_setup|attribute_setup|method_setup|declare|consts|specification|quick_and_dirty|theory|imports|"
    r"lemma|theorem|corollary|definition|fun|primrec)\b|\\<proof>"
)


def isabelle_available(isabelle: str = "isabelle") -> bool:
    """Whether the ``isabelle`` executable is on the PATH."""
    return shutil.which(isabelle) is not None


def _imports(header: str) -> str:
    """``imports … begin`` (and the declarations after it) from a problem header such as ``Complex_Main``."""
    head = header.strip()
    if not head.startswith("imports"):
        head = f"imports {head}"
    if not re.search(r"\bbegin\b", head):
        lines = head.split("\n", 1)
        head = lines[0] + " begin" + ("\n" + lines[1] if len(lines) > 1 else "")
    return head


class IsabelleBackend:
    """The :class:`~proofaug.backends.base.ProverBackend` protocol on an Isabelle server.

    Args:
        server: the server's info line (``server "name" = host:port (password "…")``) of a running
            ``isabelle server``; None starts one (needs ``isabelle`` on the PATH) and stops it in :meth:`close`.
        session: the logic session to start (``HOL``; ``Complex_Main`` is imported per theory).
        client: any object with ``session_start``/``use_theories`` in the ``isabelle_client.IsabelleClient``
            style (a connected client, or a recorded fake); replaces ``server``.
        options: session options (``quick_and_dirty`` lets ``sorry`` holes through while a proof is analysed).
        check_delay: seconds between the server's status checks; a call is bounded by its timeout through
            ``check_limit = timeout / check_delay``.
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        session: str = "HOL",
        client: Any = None,
        options: tuple[str, ...] = ("quick_and_dirty",),
        check_delay: float = 0.5,
        workdir: str | Path | None = None,
    ) -> None:
        self.session = session
        self.options = list(options)
        self.check_delay = check_delay
        self.calls = 0
        self.log: list[tuple[str, str, float]] = []
        self._server_proc: Any = None
        if client is None:
            try:
                from isabelle_client import get_isabelle_client, start_isabelle_server
            except ImportError as err:  # pragma: no cover - the `isabelle` extra
                raise ImportError(
                    "IsabelleBackend needs isabelle-client: pip install icml25-proofaug[isabelle]"
                ) from err
            if server is None:
                if not isabelle_available():
                    raise FileNotFoundError("isabelle not found on the PATH (install Isabelle, or pass server=)")
                server, self._server_proc = start_isabelle_server(name="proofaug")
            client = get_isabelle_client(server)
        self.client = client
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="proofaug_isa_"))
        self._session_id: str | None = None
        self._n = 0

    # ------------------------------------------------------------------ server
    def _session(self) -> str:
        if self._session_id is None:
            resp = self.client.session_start(session=self.session, options=self.options)
            body = resp[-1].response_body
            sid = getattr(body, "session_id", None)
            if sid is None:
                raise BackendError(f"Isabelle session {self.session!r} did not start: {body}")
            self._session_id = str(sid)
        return self._session_id

    def _theory(self, problem: Problem, proof: str) -> str:
        self._n += 1
        name = f"ProofAug_{self._n}"
        text = f"theory {name}\n{_imports(problem.header)}\n\n{problem.statement.strip()}\n{proof}\nend\n"
        (self.workdir / f"{name}.thy").write_text(text)
        return name

    def _use(self, problem: Problem, proof: str, timeout: float) -> tuple[bool, str, bool]:
        """Check one theory: (no errors, first error message, timed out)."""
        sid = self._session()
        name = self._theory(problem, proof)
        try:
            resp = self.client.use_theories(
                session_id=sid,
                theories=[name],
                master_dir=str(self.workdir),
                check_delay=self.check_delay,
                check_limit=max(1, math.ceil(timeout / self.check_delay)),
            )
        finally:
            (self.workdir / f"{name}.thy").unlink(missing_ok=True)
        final = resp[-1]
        kind = getattr(final.response_type, "value", final.response_type)
        if kind != "FINISHED":
            raise BackendError(f"Isabelle server: use_theories {kind}: {final.response_body}")
        body = final.response_body
        errors = [m.message for m in body.errors]
        timed_out = False
        for node in body.nodes:
            errors += [m.message for m in node.messages if m.kind == "error"]
            timed_out |= node.status.unprocessed > 0 or node.status.running > 0
        with contextlib.suppress(Exception):
            self.client.purge_theories(session_id=sid, theories=[name], master_dir=str(self.workdir))
        ok = bool(body.ok) and not errors and not timed_out
        return ok, (errors[0] if errors else "timeout" if timed_out else ""), timed_out

    # ------------------------------------------------------------------ protocol
    def _step(self, problem: Problem, steps: tuple[str, ...], timeout: float) -> StepResult:
        self.calls += 1
        t0 = time.perf_counter()
        ended = bool(steps) and steps[-1] == ISAR_END
        body = steps[:-1] if ended else steps
        proof = "\n".join(body) + ("" if ended else "\noops")
        ok, msg, timed_out = self._use(problem, proof, timeout)
        self.log.append(("run", steps[-1] if steps else "", time.perf_counter() - t0))
        # the "goal display" names the state exactly (statement and steps), so that memo keys stay apart
        shown = problem.statement.strip() + "\n" + "\n".join(body)
        return StepResult(ok, (problem, steps) if ok else (problem, steps[:-1]), shown, msg, timed_out)

    def start(self, problem: Problem) -> StepResult:
        """Check the statement (followed by ``oops``); the state is the empty step tuple."""
        res = self._step(problem, (), 60.0)
        return StepResult(res.ok, (problem, ()), res.goals, res.message, res.timed_out)

    def run(self, state: Any, sentence: str, timeout: float) -> StepResult:
        """One Isar step after the steps of ``state`` (``end``: the proof must be finished)."""
        problem, steps = state
        return self._step(problem, (*steps, sentence), timeout)

    def run_hammer(self, state: Any, tactic: str, timeout: float) -> StepResult:
        """A ladder method as the terminal step ``by <method>`` (it proves the pending goal or fails)."""
        return self.run(state, f"by {tactic}", timeout)

    def check(self, problem: Problem, proof: str, timeout: float = 300.0) -> CheckResult:
        """Final check: no ``sorry``/``oops``/axioms in the proof text, and the whole theory without errors."""
        self.calls += 1
        m = _CHEATS.search(proof)
        if m:
            return CheckResult(False, f"the proof uses {m.group(0)!r}")
        ok, msg, _ = self._use(problem, proof, timeout)
        return CheckResult(ok, msg)

    def close(self) -> None:
        """Stop our session and, when this backend started it, our server (only that process)."""
        if self._session_id is not None:
            with contextlib.suppress(Exception):
                self.client.session_stop(session_id=self._session_id)
            self._session_id = None
        if self._server_proc is not None:
            with contextlib.suppress(Exception):
                self.client.shutdown()
            with contextlib.suppress(ProcessLookupError):
                self._server_proc.kill()
            self._server_proc = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> IsabelleBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
