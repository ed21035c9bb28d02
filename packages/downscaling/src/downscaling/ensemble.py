"""The paper's proposed pipeline (downscaling via specialised small language models): cut one specialist per
domain from a base model by pruning, continue its pre-training on that domain, and ensemble the specialists.

Routing: ``label`` (the known domain picks one expert), ``classifier`` (a bag-of-tokens logistic-regression
domain classifier picks one per sequence) or ``average`` (the logits of all k experts are averaged). Inference
cost counts the experts actually run: one per token for ``label``/``classifier``, k for ``average``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from downscaling.config import EnsembleConfig
from downscaling.flops import _forward, count_flops

__all__ = ["Ensemble", "specialize_and_ensemble"]


class _BagClassifier(nn.Module):
    """Logistic regression on normalised token counts."""

    def __init__(self, vocab: int, k: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.lin = nn.Linear(vocab, k)

    def features(self, ids: torch.Tensor) -> torch.Tensor:
        counts = nn.functional.one_hot(ids.clamp_max(self.vocab - 1), self.vocab).float().sum(1)
        return counts / ids.shape[1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lin(self.features(ids))


class Ensemble(nn.Module):
    """k domain experts behind a router; ``forward(input_ids, domain=None)`` returns logits ``(B, T, V)``.

    Args:
        experts: domain name -> model, at least one.
        router: ``"label"`` (the caller names each row's domain), ``"classifier"`` (argmax of ``classifier``) or
            ``"average"`` (mean of all experts' logits).
        classifier: maps ``(B, T)`` token ids to ``(B, k)`` domain scores; needed for ``router="classifier"``.
    """

    def __init__(self, experts: dict[str, nn.Module], router: str = "label", classifier: nn.Module | None = None):
        super().__init__()
        if not experts:
            raise ValueError("experts must hold at least one domain model, got none")
        if router not in ("label", "classifier", "average"):
            raise ValueError(f"router must be one of 'label', 'classifier', 'average', got {router!r}")
        if router == "classifier" and classifier is None:
            raise ValueError("router='classifier' needs a trained classifier, got None")
        self.domains = list(experts)
        self.experts = nn.ModuleDict(experts)
        self.router = router
        self.classifier = classifier

    def route(self, input_ids: torch.Tensor, domain: str | list[str] | None = None) -> list[str]:
        """The expert of each row (``label``: ``domain``, one name or one per row; ``classifier``: argmax)."""
        b = input_ids.shape[0]
        if self.router == "classifier":
            assert self.classifier is not None  # __init__ requires one for router='classifier'
            with torch.no_grad():
                pick = self.classifier(input_ids).argmax(-1).tolist()
            return [self.domains[i] for i in pick]
        if domain is None:
            raise ValueError(f"router='label' needs domain= (one of {self.domains}), got None")
        names = [domain] * b if isinstance(domain, str) else list(domain)
        bad = [d for d in names if d not in self.experts]
        if bad or len(names) != b:
            raise ValueError(f"domain must be one of {self.domains} (one name or one per row), got {domain!r}")
        return names

    def forward(self, input_ids: torch.Tensor, domain: str | list[str] | None = None) -> torch.Tensor:
        if self.router == "average":
            return torch.stack([_forward(e, input_ids) for e in self.experts.values()]).mean(0)
        names = self.route(input_ids, domain)
        out: torch.Tensor | None = None
        for d in dict.fromkeys(names):
            rows = torch.tensor([i for i, n in enumerate(names) if n == d], device=input_ids.device)
            logits = _forward(self.experts[d], input_ids[rows])
            if out is None:
                out = logits.new_empty(input_ids.shape[0], *logits.shape[1:])
            out[rows] = logits
        assert out is not None
        return out

    def forward_flops(self, input_ids: torch.Tensor, domain: str | list[str] | None = None) -> int:
        """FLOPs of the experts this input runs (FlopCounterMode per expert, summed)."""
        if self.router == "average":
            return sum(count_flops(e, input_ids) for e in self.experts.values())
        names = self.route(input_ids, domain)
        total = 0
        for d in dict.fromkeys(names):
            rows = torch.tensor([i for i, n in enumerate(names) if n == d])
            total += count_flops(self.experts[d], input_ids[rows])
        return total

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 20, domain: Any = None) -> torch.Tensor:
        """Greedy decoding (full recomputation each step: the experts may differ in shape, so no shared cache)."""
        ids = input_ids
        for _ in range(max_new_tokens):
            nxt = self(ids, domain)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
        return ids


def _domain_stream(name: str, data: Any) -> torch.Tensor:
    t = torch.as_tensor(data) if not isinstance(data, torch.Tensor) else data
    if t.numel() == 0:
        raise ValueError(f"domains[{name!r}] has no data")
    if t.dtype.is_floating_point:
        raise ValueError(f"domains[{name!r}] must hold integer token ids, got dtype {t.dtype}")
    return t.reshape(-1).long()


def specialize_and_ensemble(base: nn.Module, domains: dict[str, Any], config: EnsembleConfig | None = None) -> Ensemble:
    """One specialist per domain (``domains``: name -> 1-D token ids): a copy of ``base`` pruned by
    ``config.prune`` (calibrated on that domain when the method needs it), then ``config.steps_per_domain`` AdamW
    steps of next-token training on the domain; routed by ``config.router``.

    Args:
        base: the model every specialist starts from (not modified).
        domains: domain name -> 1-D token ids, each longer than ``config.seq_len + 1``.
        config: settings; ``None`` uses ``EnsembleConfig()``.

    Returns:
        The :class:`Ensemble` of the specialists.

    Raises:
        ValueError: empty or too short domains.
    """
    from downscaling.config import PruneConfig
    from downscaling.prune import finalize, prune

    cfg = config or EnsembleConfig()
    if not isinstance(domains, dict) or not domains:
        raise ValueError(f"domains must be a non-empty dict of name -> token ids, got {domains!r}")
    streams = {name: _domain_stream(name, d) for name, d in domains.items()}
    for name, s in streams.items():
        if s.numel() <= cfg.seq_len + 1:
            raise ValueError(
                f"domains[{name!r}] has {s.numel()} tokens, needs more than seq_len + 1 = {cfg.seq_len + 1}"
            )
    gen = torch.Generator().manual_seed(cfg.seed)
    experts = {}
    for name, s in streams.items():
        starts = torch.randint(s.numel() - cfg.seq_len - 1, (max(cfg.batch_size, 16),), generator=gen)
        calib = torch.stack([s[i : i + cfg.seq_len + 1] for i in starts.tolist()])
        if cfg.prune is None:
            model = copy.deepcopy(base)
        else:
            pc = PruneConfig(**{**cfg.prune.__dict__, "calib": calib, "recover": None, "finalize": False})
            model = prune(base, pc).model
        if cfg.steps_per_domain:
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
            model.train()
            for _ in range(cfg.steps_per_domain):
                st = torch.randint(s.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=gen)
                w = torch.stack([s[i : i + cfg.seq_len + 1] for i in st.tolist()])
                logits = _forward(model, w[:, :-1])
                loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        experts[name] = finalize(model).eval()
    classifier = None
    if cfg.router == "classifier":
        vocab = int(max(int(s.max()) for s in streams.values())) + 1
        classifier = _BagClassifier(vocab, len(streams))
        xs, ys = [], []
        for j, s in enumerate(streams.values()):
            st = torch.randint(s.numel() - cfg.seq_len, (64,), generator=gen)
            xs.append(torch.stack([s[i : i + cfg.seq_len] for i in st.tolist()]))
            ys.append(torch.full((64,), j))
        x, y = torch.cat(xs), torch.cat(ys)
        opt = torch.optim.Adam(classifier.parameters(), lr=0.1)
        for _ in range(100):
            loss = nn.functional.cross_entropy(classifier(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        classifier.eval()
    return Ensemble(experts, cfg.router, classifier)
