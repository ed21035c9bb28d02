"""A fake Isabelle server client (``session_start``/``use_theories`` in isabelle-client's types) replaying
recorded outcomes of Isar steps (no Isabelle here).

The fake reads the theory file the backend wrote, takes the goal from the statement's first quoted string, and
runs the proof one line (one Isar step) at a time: ``by m`` proves the pending goal iff ``(goal, m)`` is in
``provable``; ``sorry`` always does; ``proof -`` opens a block on the pending goal, ``proof m`` only if ``(goal,
m)`` is in ``provable``; ``have "P"`` makes ``P`` pending; ``show ?thesis``/``show "G"`` makes the block's goal
pending; ``qed`` needs it shown; ``oops`` stops; ``end`` needs the proof finished. Messages are Isabelle's.
"""

from __future__ import annotations

import re
from pathlib import Path

from isabelle_client.data_models import SessionStartRegularResponse, UseTheoriesResponse

STATE_MODE = 'Illegal application of proof command in "state" mode'
PROVE_MODE = 'Illegal application of proof command in "prove" mode'


class FakeIsabelleClient:
    def __init__(self, provable: set[tuple[str, str]]):
        self.provable = provable
        self.theories: list[str] = []

    def session_start(self, session="HOL", options=None, **_):
        self.options = options
        body = {"task": "t0", "session_id": "fake-session", "tmp_dir": "/tmp"}
        return [SessionStartRegularResponse(response_type="FINISHED", response_body=body)]

    def purge_theories(self, **_):
        return []

    def session_stop(self, **_):
        return []

    def _error(self, text: str) -> str | None:
        lines = text.split("\n")
        k = next(i for i, ln in enumerate(lines) if ln.startswith(("theorem", "lemma")))
        goal = re.search(r'"([^"]*)"', lines[k]).group(1)
        pending: str | None = goal  # prove mode with this goal
        frames: list[dict] = []  # state-mode blocks: their goal and whether it was shown
        steps = [part for ln in lines[k + 1 :] for part in re.split(r"\s(?=by\s)", ln)]  # `… by m`: two steps
        for raw in steps:
            step = raw.strip()
            if not step or step.startswith(("using", "unfolding", "then", "from", "note", "fix", "assume")):
                continue
            word = step.split()[0]
            if word == "oops":
                return None
            if word == "end":
                return None if pending is None and not frames else 'Bad context for command "end"'
            if pending is not None:
                if word == "by":
                    if (pending, step[3:].strip()) not in self.provable:
                        return "Failed to apply initial proof method"
                    pending = None
                elif word == "sorry":
                    pending = None
                elif word == "proof":
                    method = step[5:].strip()
                    if method != "-" and (pending, method) not in self.provable:
                        return "Failed to apply initial proof method"
                    frames.append({"goal": pending, "shown": False})
                    pending = None
                else:
                    return PROVE_MODE
                if pending is None and frames and frames[-1].get("showing"):
                    frames[-1]["shown"], frames[-1]["showing"] = True, False
                continue
            if not frames:
                return "No proof state"
            if word in ("by", "sorry", "apply", "done"):
                return STATE_MODE
            if word == "qed":
                if not frames[-1]["shown"]:
                    return "Failed to finish proof"
                frames.pop()
                if frames and frames[-1].get("showing"):
                    frames[-1]["shown"], frames[-1]["showing"] = True, False
            elif word == "have":
                pending = re.search(r'"([^"]*)"', step).group(1)
            elif word in ("show", "thus"):
                claim = re.search(r'"([^"]*)"|\?thesis', step)
                pending = frames[-1]["goal"] if claim.group(0) == "?thesis" else claim.group(1)
                if pending != frames[-1]["goal"]:
                    return "Failed to refine any pending goal"
                frames[-1]["showing"] = True
            else:
                return f"Outer syntax error: unknown command {word!r}"
        return 'Bad context for command "end"'

    def use_theories(self, session_id, theories, master_dir, **_):
        text = (Path(master_dir) / f"{theories[0]}.thy").read_text()
        self.theories.append(text)
        err = self._error(text)
        msgs = [{"kind": "error", "message": err, "pos": {"line": 1}}] if err else []
        status = {
            "ok": err is None,
            "total": 3,
            "unprocessed": 0,
            "running": 0,
            "warned": 0,
            "failed": int(err is not None),
            "finished": 3,
            "canceled": False,
            "consolidated": True,
            "percentage": 100,
        }
        node = {"node_name": theories[0], "theory_name": f"Draft.{theories[0]}", "status": status, "messages": msgs}
        body = {"ok": err is None, "errors": msgs, "nodes": [dict(node, exports=[])]}
        return [UseTheoriesResponse(response_type="FINISHED", response_body=body)]
