"""Knowledge distillation (Hinton et al. 2015, Sec. 2):

.. math::

    \\mathcal{L} = (1-\\alpha)\\,\\mathrm{CE}(y, p_S) + \\alpha\\,\\tau^2\\,\\mathrm{KL}(p_T^\\tau \\,\\|\\, p_S^\\tau),
    \\qquad p^\\tau = \\mathrm{softmax}(z/\\tau)

averaged over tokens; ``kl="reverse"`` uses KL(p_S^τ ‖ p_T^τ) (mode-seeking, as MiniLLM, Gu et al. 2024). The
τ² factor keeps the soft-target gradient's scale independent of τ (Hinton et al. 2015, Sec. 2). The teacher runs
in eval mode without gradients.

:func:`distill` is a plain AdamW loop that runs unchanged under ``torch.distributed`` (DDP: every rank takes its
contiguous share of the same global batch, gradients are averaged). For teachers too large for one device, wrap
the teacher in FSDP before calling (it is only run forward). :class:`DistillTrainer` is the same loss as a
``transformers.Trainer``.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from downscaling.config import DistillConfig
from downscaling.flops import _forward, check_token_ids
from icml25_shared.validate import check_choice, check_float

__all__ = ["DistillResult", "DistillTrainer", "distill", "distill_loss", "kd_kl"]  # noqa: F822 (lazy)


def _upcast(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def kd_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 2.0, kl: str = "forward"
) -> torch.Tensor:
    """τ² · KL between the temperature-softened distributions, mean over tokens (≥ 0; 0 iff equal).

    Args:
        student_logits: ``(..., V)`` logits of the student.
        teacher_logits: ``(..., V)`` logits of the teacher (detached).
        temperature: τ > 0, divides both logits.
        kl: ``"forward"`` KL(teacher ‖ student) or ``"reverse"`` KL(student ‖ teacher).

    Returns:
        A scalar tensor.
    """
    t = check_float("temperature", temperature, min=0.0, min_open=True)
    kl = check_choice("kl", kl, ("forward", "reverse"))
    v = student_logits.shape[-1]
    log_s = torch.log_softmax(_upcast(student_logits).reshape(-1, v) / t, -1)
    log_t = torch.log_softmax(_upcast(teacher_logits).reshape(-1, v).detach() / t, -1)
    if kl == "forward":
        per_token = (log_t.exp() * (log_t - log_s)).sum(-1)
    else:
        per_token = (log_s.exp() * (log_s - log_t)).sum(-1)
    return t * t * per_token.mean()


def distill_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None,
    temperature: float = 2.0,
    alpha: float = 0.5,
    kl: str = "forward",
) -> torch.Tensor:
    """(1 − α) CE(labels, student) + α τ² KL (module docstring).

    Args:
        student_logits: ``(..., V)`` logits of the student.
        teacher_logits: ``(..., V)`` logits of the teacher (detached).
        labels: next-token ids matching the logits' leading shape; ``None`` only when α = 1.
        temperature: τ > 0 of the KL term.
        alpha: α in [0, 1], the weight of the KL term.
        kl: ``"forward"`` or ``"reverse"`` (see :func:`kd_kl`).

    Returns:
        A scalar tensor.
    """
    a = check_float("alpha", alpha, min=0.0, max=1.0)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student_logits and teacher_logits must have the same shape, got {tuple(student_logits.shape)} and "
            f"{tuple(teacher_logits.shape)}"
        )
    loss = a * kd_kl(student_logits, teacher_logits, temperature, kl) if a > 0 else student_logits.new_zeros(())
    if a < 1:
        if labels is None:
            raise ValueError(f"labels are needed when alpha < 1, got alpha={a} and labels=None")
        v = student_logits.shape[-1]
        ce = nn.functional.cross_entropy(_upcast(student_logits).reshape(-1, v), labels.reshape(-1).long())
        loss = loss + (1 - a) * ce
    return loss


class DistillResult(NamedTuple):
    """The trained student copy and its per-step losses (this rank's)."""

    model: nn.Module
    losses: list[float]


def _stream(data: Any) -> torch.Tensor:
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if not isinstance(data, torch.Tensor) or data.dtype.is_floating_point or data.dtype == torch.bool:
        raise ValueError(f"data must be a 1-D integer tensor or array of token ids, got {type(data).__name__}")
    data = data.reshape(-1).long()
    if data.numel() < 2:
        raise ValueError(f"data must hold at least 2 tokens, got {data.numel()}")
    return data


def distill(
    teacher: nn.Module, student: nn.Module, data: Any, config: DistillConfig | None = None, **kwargs: Any
) -> DistillResult:
    """Train a copy of ``student`` to imitate ``teacher`` on random windows of the token stream ``data`` with
    AdamW (``config`` or ``DistillConfig(**kwargs)``). Under an initialised ``torch.distributed`` group the copy
    is wrapped in DDP and each rank takes rows ``shard_bounds(batch, rank, world)`` of the same global batch.

    Args:
        teacher: the model imitated (only run forward).
        student: the model trained; a copy is trained, the input is not modified.
        data: 1-D token ids (tensor or array), at least 2 of them.
        config: training settings; ``None`` builds ``DistillConfig(**kwargs)``.
        **kwargs: fields of :class:`DistillConfig`, when ``config`` is ``None``.

    Returns:
        The trained copy and its loss per step.

    Raises:
        ValueError: both ``config`` and keyword arguments, or ``data`` that is not token ids.
        TypeError: ``teacher`` or ``student`` is not a ``torch.nn.Module``.
    """
    cfg = config or DistillConfig(**kwargs)
    if config is not None and kwargs:
        raise ValueError(f"give a DistillConfig or keyword arguments, not both (got {sorted(kwargs)})")
    stream = _stream(data)
    for name, m in (("teacher", teacher), ("student", student)):
        if not isinstance(m, nn.Module):
            raise TypeError(f"{name} must be a torch.nn.Module, got {type(m).__name__}")
        check_token_ids(f"data (for the {name})", stream, m)
    if stream.numel() <= cfg.seq_len + 1:
        raise ValueError(f"data has {stream.numel()} tokens, needs more than seq_len + 1 = {cfg.seq_len + 1}")
    import torch.distributed as dist

    from icml25_shared.distributed import shard_bounds

    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    lo, hi = shard_bounds(cfg.batch_size, rank, world)
    model = copy.deepcopy(student)
    device = next(model.parameters()).device
    train_model: nn.Module = model
    if distributed:
        train_model = nn.parallel.DistributedDataParallel(model)
    teacher.eval()  # run under no_grad below: it gets no gradient and its requires_grad flags are left alone
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    losses = []
    model.train()
    for _ in range(cfg.steps):
        starts = torch.randint(stream.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=gen)[lo:hi]
        win = torch.stack([stream[s : s + cfg.seq_len + 1] for s in starts.tolist()]).to(device)
        x, y = win[:, :-1], win[:, 1:]
        with torch.no_grad():
            t_logits = _forward(teacher, x)
        loss = distill_loss(_forward(train_model, x), t_logits, y, cfg.temperature, cfg.alpha, cfg.kl)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return DistillResult(model, losses)


def _make_distill_trainer() -> type:
    from transformers import Trainer

    class DistillTrainer(Trainer):
        """``transformers.Trainer`` whose loss is :func:`distill_loss` against a frozen ``teacher_model``.

        Takes ``Trainer``'s own arguments first and unchanged (``model``, ``args``, ``data_collator``,
        ``train_dataset``, ...), then keyword-only ``teacher_model`` and ``distill_config`` (a
        :class:`DistillConfig`; its ``temperature``, ``alpha`` and ``kl`` are used, the optimisation settings come
        from ``args``). Batches need ``input_ids`` and ``labels`` (already shifted: position t predicts
        ``labels[t]``; -100 ignored). Built on first access so that importing :mod:`downscaling` does not import
        ``transformers.Trainer``."""

        def __init__(
            self, *args: Any, teacher_model: nn.Module, distill_config: DistillConfig | None = None, **kwargs: Any
        ) -> None:
            super().__init__(*args, **kwargs)
            if not isinstance(teacher_model, nn.Module):
                raise TypeError(f"teacher_model must be a torch.nn.Module, got {type(teacher_model).__name__}")
            self.teacher_model = teacher_model.eval()
            for p in self.teacher_model.parameters():
                p.requires_grad_(False)
            self.distill_config = distill_config or DistillConfig()

        def compute_loss(
            self,
            model: nn.Module,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            labels = inputs["labels"]
            out = model(input_ids=inputs["input_ids"])
            self.teacher_model.to(inputs["input_ids"].device)
            with torch.no_grad():
                t_logits = self.teacher_model(input_ids=inputs["input_ids"]).logits
            keep = labels.reshape(-1) != -100
            v = out.logits.shape[-1]
            c = self.distill_config
            loss = distill_loss(
                out.logits.reshape(-1, v)[keep], t_logits.reshape(-1, v)[keep], labels.reshape(-1)[keep],
                c.temperature, c.alpha, c.kl,
            )  # fmt: skip
            return (loss, out) if return_outputs else loss

    return DistillTrainer


_LAZY: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    if name == "DistillTrainer":
        if name not in _LAZY:
            _LAZY[name] = _make_distill_trainer()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
