"""Chain arithmetic mod 10: a reasoning task whose every step can be checked exactly.

A problem ``Q:7-4+8+7\\n`` is answered step by step, one operation per step, then the final answer::

    7-4=3\\n  3+8=1\\n  1+7=8\\n  A:8<eos>

The step delimiter is ``"\\n"``; the final step ends with EOS. Start digit 0..9, operators ``+`` and ``-``,
operands 1..9, every result mod 10. The vocabulary is the 17 symbols ``0-9 + - = : Q A \\n`` plus pad, bos and eos
(20 ids), so no tokenizer has to be downloaded. :class:`ExactArithmeticPRM` is a process reward model that is
always right (a rule, zero FLOPs); :class:`NoisyPRM` draws Beta(8, 2) rewards for correct steps and Beta(2, 8) for
wrong ones, a stand-in for a learned PRM of limited accuracy.

The draft and target models are tiny GPT-2s trained here from scratch (:func:`train_model`); the package ships the
two trained models as safetensors fixtures (:func:`load_fixture_models`, sha256 checked) so that the reproduction
does not have to train; ``scripts/train_fixtures.py`` rebuilds them.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from icml25_shared.seed import numpy_rng
from icml25_shared.training import warmup_cosine
from icml25_shared.validate import check_choice, check_float, check_int

__all__ = [
    "FIXTURE_DIR",
    "FIXTURE_SHA256",
    "FIXTURE_SPECS",
    "ArithmeticTokenizer",
    "ExactArithmeticPRM",
    "FixtureSpec",
    "NoisyPRM",
    "Problem",
    "load_fixture_models",
    "make_model",
    "make_problems",
    "step_accuracy",
    "step_correct",
    "train_model",
]

logger = logging.getLogger(__name__)

SYMBOLS = "0123456789+-=:QA\n"
PAD, BOS, EOS = 0, 1, 2
DELIMITER = "\n"
FIXTURE_DIR = Path(__file__).parent / "fixtures"


class ArithmeticTokenizer:
    """Character tokenizer of the task: ids 0/1/2 are pad/bos/eos, then one id per symbol of ``0-9+-=:QA\\n``.

    It offers the part of a ``transformers`` tokenizer that :class:`rsd.HFBackend` and the decoder use:
    ``encode``, ``decode``, ``eos_token_id``, ``pad_token_id``, ``bos_token_id``, ``get_vocab``, ``vocab_size``.
    """

    pad_token_id = PAD
    bos_token_id = BOS
    eos_token_id = EOS

    def __init__(self) -> None:
        self._vocab = {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS}
        self._vocab.update({c: i + 3 for i, c in enumerate(SYMBOLS)})
        self._inverse = {i: c for c, i in self._vocab.items()}

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Ids of ``text`` (a bos first when ``add_special_tokens``); unknown characters raise ``ValueError``."""
        bad = sorted({c for c in text if c not in self._vocab})
        if bad:
            raise ValueError(f"text has characters outside the arithmetic vocabulary {SYMBOLS!r}: {bad}")
        ids = [self._vocab[c] for c in text]
        return [BOS, *ids] if add_special_tokens else ids

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; an id outside the vocabulary raises ``ValueError``."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        unknown = sorted({int(i) for i in ids if int(i) not in self._inverse})
        if unknown:
            raise ValueError(f"ids {unknown} are outside the arithmetic vocabulary (ids 0..{len(self._vocab) - 1})")
        out = []
        for i in ids:
            if int(i) in (PAD, BOS, EOS):
                if not skip_special_tokens:
                    out.append(self._inverse[int(i)])
                continue
            out.append(self._inverse[int(i)])
        return "".join(out)

    def convert_tokens_to_ids(self, token: str) -> int:
        return self._vocab[token]


@dataclass(frozen=True)
class Problem:
    """One problem: start digit, operations ``(op, operand)``, and the gold steps (the last one ends with EOS)."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def prompt(self) -> str:
        return "Q:" + str(self.start) + "".join(f"{op}{b}" for op, b in self.ops) + "\n"

    @property
    def answer(self) -> int:
        return self.results[-1]

    @property
    def results(self) -> list[int]:
        a, out = self.start, []
        for op, b in self.ops:
            a = _apply(a, op, b)
            out.append(a)
        return out

    @property
    def gold_steps(self) -> list[str]:
        """Step texts without delimiter or EOS: ``["7-4=3", "3+8=1", "1+7=8", "A:8"]``."""
        a, steps = self.start, []
        for op, b in self.ops:
            c = _apply(a, op, b)
            steps.append(f"{a}{op}{b}={c}")
            a = c
        return [*steps, f"A:{a}"]

    @property
    def gold_text(self) -> str:
        return "".join(s + DELIMITER for s in self.gold_steps[:-1]) + self.gold_steps[-1]


def _apply(a: int, op: str, b: int) -> int:
    return (a + b) % 10 if op == "+" else (a - b) % 10


def make_problems(n: int, *, min_ops: int = 2, max_ops: int = 4, seed: int | np.random.Generator = 0) -> list[Problem]:
    """``n`` seeded problems with ``min_ops..max_ops`` operations each (uniform); ``seed`` is an int or a numpy
    ``Generator`` to draw from (advanced in place)."""
    n = check_int("n", n, min=1)
    min_ops = check_int("min_ops", min_ops, min=1)
    max_ops = check_int("max_ops", max_ops, min=min_ops, max=8)
    rng = numpy_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(min_ops, max_ops + 1))
        ops = tuple(("+" if rng.random() < 0.5 else "-", int(rng.integers(1, 10))) for _ in range(k))
        out.append(Problem(int(rng.integers(0, 10)), ops))
    return out


def parse_prompt(prompt: str) -> tuple[int, list[tuple[str, int]]]:
    """Start digit and operations of a prompt ``Q:7-4+8+7\\n``; ``ValueError`` if it is not of that form."""
    body = prompt.strip("\n")
    if not (body.startswith("Q:") and len(body) >= 3 and body[2].isdigit() and (len(body) - 3) % 2 == 0):
        raise ValueError(f"not an arithmetic prompt: {prompt!r}")
    ops = [(body[i], int(body[i + 1])) for i in range(3, len(body), 2)]
    if any(op not in "+-" or not body[i + 1].isdigit() for i, (op, _) in zip(range(3, len(body), 2), ops)):
        raise ValueError(f"not an arithmetic prompt: {prompt!r}")
    return int(body[2]), ops


def _clean(step: str) -> str:
    return step.replace(DELIMITER, "")


def step_correct(prompt: str, steps: list[str]) -> list[bool]:
    """Whether each step is right *given the steps written before it* (the exact PRM's rule).

    Step i < number of operations must read ``a op b=c`` with ``a`` the previous step's written result (the start
    digit for the first step), ``op b`` the i-th operation of the prompt and ``c = (a op b) mod 10``; the step after
    the last operation must read ``A:`` followed by the last written result; anything else (malformed, extra
    steps, an answer given too early) is wrong.
    """
    start, ops = parse_prompt(prompt)
    written: int | None = start
    out = []
    for i, raw in enumerate(steps):
        s = _clean(raw)
        ok = False
        if written is not None and i < len(ops):
            op, b = ops[i]
            c = _apply(written, op, b)
            ok = s == f"{written}{op}{b}={c}"
        elif written is not None and i == len(ops):
            ok = s == f"A:{written}"
        out.append(ok)
        # the next step builds on what this one wrote, right or wrong
        written = int(s[-1]) if len(s) == 5 and s[-1].isdigit() and s[3] == "=" else None
    return out


class ExactArithmeticPRM:
    """Process reward model that is always right: 1.0 for a correct step in its context, 0.0 otherwise.

    A rule, not a network: it costs no FLOPs (``cost = None``).
    """

    cost = None

    def score(self, prompt: str, steps: list[str]) -> list[float]:
        return [1.0 if ok else 0.0 for ok in step_correct(prompt, steps)]


class NoisyPRM:
    """A PRM of limited accuracy: reward ~ Beta(8, 2) for a correct step, Beta(2, 8) for a wrong one (seeded).

    The draw is a function of ``(seed, prompt, steps)`` only, so a step gets the same reward whichever decoder
    (batched or per-problem) asks, and in whichever order.
    """

    cost = None

    def __init__(self, seed: int = 0, good: tuple[float, float] = (8.0, 2.0), bad: tuple[float, float] = (2.0, 8.0)):
        self.seed = check_int("seed", seed, min=0)
        for name, pair in (("good", good), ("bad", bad)):
            for x in pair:
                check_float(f"{name} Beta parameter", x, min=0.0, min_open=True)
        self.good, self.bad = tuple(good), tuple(bad)

    def score(self, prompt: str, steps: list[str]) -> list[float]:
        out = []
        for i, ok in enumerate(step_correct(prompt, steps)):
            key = f"{self.seed}|{prompt}|{'|'.join(steps[: i + 1])}".encode()
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
            a, b = self.good if ok else self.bad
            out.append(float(rng.beta(a, b)))
        return out


# ----------------------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class FixtureSpec:
    """Size and training of one fixture model (GPT-2, ``n_positions`` 64, no dropout)."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    steps: int
    lr: float = 1e-2
    batch_size: int = 64
    seed: int = 0
    min_ops: int = 2
    max_ops: int = 4
    curriculum_steps: int | None = None
    """A curriculum: the first ``curriculum_steps`` training steps draw problems of ``min_ops`` to
    ``curriculum_max_ops`` operations, the rest ``min_ops`` to ``max_ops`` (one warm-up + cosine schedule over all
    steps). ``None`` (the shipped fixtures): every step draws ``min_ops`` to ``max_ops``."""
    curriculum_max_ops: int = 4
    """The curriculum's first range ends at this many operations (used only with ``curriculum_steps``)."""

    def __post_init__(self) -> None:
        if self.curriculum_steps is not None:
            check_int("curriculum_steps", self.curriculum_steps, min=0)
            check_int("curriculum_max_ops", self.curriculum_max_ops, min=self.min_ops, max=self.max_ops)

    def ops_at(self, step: int) -> tuple[int, int]:
        """``(min_ops, max_ops)`` of the problems drawn at training step ``step`` (0-based)."""
        if self.curriculum_steps is not None and step < self.curriculum_steps:
            return self.min_ops, self.curriculum_max_ops
        return self.min_ops, self.max_ops


#: The shipped fixtures: a 1 x 48 draft and a 2 x 96 target (7.9x the draft's non-embedding parameters). The target
#: is trained on 2-6 operations (the quick run tests 2-4, ``--full`` 2-6). The draft learns by a curriculum: 3,000
#: steps on 2-4 operations, then 1,500 on 2-6 (one schedule over 4,500 steps); trained on 2-6 from the start it did
#: not learn the result digit in 3,000 or 6,000 steps (step accuracy 0.350 / 0.365), and trained on 2-4 only it was
#: weak on 5-6 operations (0.535 on 2-6); README "The fixtures".
FIXTURE_SPECS = {
    "draft": FixtureSpec("draft", n_layer=1, n_embd=48, n_head=2, steps=4500, seed=1, max_ops=6, curriculum_steps=3000),
    "target": FixtureSpec("target", n_layer=2, n_embd=96, n_head=4, steps=6000, seed=2, max_ops=6),
}
#: sha256 of each fixture's ``model.safetensors`` (written by ``scripts/train_fixtures.py``).
FIXTURE_SHA256 = {
    "draft": "d41df6a2f1c2f29b4d08386656ca367083f31e7787ac0d63e0ddb30b28c291de",
    "target": "77505cfefbe0d4546b6d69aeb81de21dc2166d28c9a5867191d0d85869cc0f6a",
}


def make_model(n_layer: int, n_embd: int, n_head: int, *, seed: int = 0) -> Any:
    """A randomly initialised ``GPT2LMHeadModel`` over the task's 20 ids (``n_positions`` 64, dropout 0)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=len(SYMBOLS) + 3,
        n_positions=64,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    model.generation_config.pad_token_id = PAD
    return model


def _batch(problems: list[Problem], tok: ArithmeticTokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    seqs, labels = [], []
    for p in problems:
        q = tok.encode(p.prompt)
        a = tok.encode(p.gold_text, add_special_tokens=False) + [EOS]
        seqs.append(q + a)
        labels.append([-100] * len(q) + a)  # loss on answer tokens only
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    lab = torch.full((len(seqs), width), -100, dtype=torch.long)
    for i, (s, y) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(y)] = torch.tensor(y)
    return ids, lab


def train_model(spec: FixtureSpec, *, steps: int | None = None, log_every: int = 500) -> Any:
    """Train one fixture model from scratch: AdamW, 10% warm-up then cosine, batch of fresh problems (of
    ``spec.ops_at(step)`` operations), loss on answer tokens only (right padding; positions are exact because
    padding only follows the sequence)."""
    steps = spec.steps if steps is None else check_int("steps", steps, min=1)
    model = make_model(spec.n_layer, spec.n_embd, spec.n_head, seed=spec.seed)
    tok = ArithmeticTokenizer()
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, 0.1, final=0.0))
    rng = numpy_rng(10_000 + spec.seed)
    model.train()
    for step in range(steps):
        lo, hi = spec.ops_at(step)
        problems = make_problems(spec.batch_size, min_ops=lo, max_ops=hi, seed=rng)
        ids, lab = _batch(problems, tok)
        loss = model(input_ids=ids, attention_mask=(ids != PAD).long(), labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log_every and (step + 1) % log_every == 0:
            logger.info("%s step %d loss %.4f", spec.name, step + 1, loss.item())
    return model.eval()


@torch.no_grad()
def step_accuracy(model: Any, *, probes: int = 200, seed: int = 7, min_ops: int = 2, max_ops: int = 4) -> float:
    """Share of probes whose greedy step, given a gold prefix, equals the gold step (a random step of a random
    problem, the final answer step included)."""
    tok = ArithmeticTokenizer()
    rng = numpy_rng(seed)
    problems = make_problems(probes, min_ops=min_ops, max_ops=max_ops, seed=rng)
    right = 0
    for p in problems:
        gold = p.gold_steps
        i = int(rng.integers(0, len(gold)))
        ctx = tok.encode(p.prompt + "".join(s + DELIMITER for s in gold[:i]))
        ids = torch.tensor([ctx])
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=[EOS, tok.convert_tokens_to_ids(DELIMITER)],
            pad_token_id=PAD,
        )[0, len(ctx) :].tolist()
        want = tok.encode(gold[i], add_special_tokens=False) + [EOS if i == len(gold) - 1 else 19]
        right += out[: len(want)] == want and len(out) == len(want)
    return right / probes


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_fixture_models(directory: str | Path | None = None, *, check: bool = True) -> tuple[Any, Any]:
    """``(draft, target)``: the shipped trained GPT-2 fixtures (``from_pretrained`` on local folders), in eval mode;
    ``check`` verifies each ``model.safetensors`` against :data:`FIXTURE_SHA256`."""
    from transformers import GPT2LMHeadModel

    root = Path(directory) if directory is not None else FIXTURE_DIR
    models = []
    for name in ("draft", "target"):
        folder = root / name
        weights = folder / "model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"fixture {weights} is missing; rebuild it with scripts/train_fixtures.py")
        if check and directory is None and _sha256(weights) != FIXTURE_SHA256[name]:
            raise ValueError(
                f"fixture {weights} has sha256 {_sha256(weights)}, expected {FIXTURE_SHA256[name]}; "
                "rebuild it with scripts/train_fixtures.py"
            )
        model = GPT2LMHeadModel.from_pretrained(folder).eval()
        model.generation_config.pad_token_id = PAD
        models.append(model)
    return models[0], models[1]


def non_embedding_parameters(model: Any) -> int:
    """Parameters outside the token and position embeddings (the tied LM head counted once, with the embedding)."""
    skip = {id(model.transformer.wte.weight), id(model.transformer.wpe.weight)}
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) in skip or id(p) in seen:
            continue
        seen.add(id(p))
        n += p.numel()
    return n


Kind = Literal["draft", "target"]


def fixture_spec(kind: Kind) -> FixtureSpec:
    return FIXTURE_SPECS[check_choice("kind", kind, tuple(FIXTURE_SPECS))]
