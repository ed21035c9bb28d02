"""FLOPs and parameter counts: measured with ``torch.utils.flop_counter.FlopCounterMode`` and in closed form for the
``transformers`` Llama family (Kaplan et al. 2020, Sec. 2.1; Hoffmann et al. 2022, App. F).

For a sequence of length T, FlopCounterMode counts (SDPA or eager attention, transformers 5.x)

.. math::

    F_\\text{fwd}(T) = 2T\\,(W + V d) + 4 T^2 (h\\,d_h) L

with W every 2-D weight inside the decoder blocks (q, k, v, o, gate, up, down), V d the LM head (counted even when
it is tied to the embedding: the matmul runs), h d_h the attention width and L the number of blocks; QKᵀ and AV
are counted without the causal saving and grouped-query attention does not change them. Training costs
forward + backward ≈ 3 F_fwd (the backward of a matmul is two matmuls), the "6N" of C ≈ 6 N D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from icml25_shared.validate import check_int

__all__ = [
    "AnalyticFlops",
    "analytic_llama",
    "count_flops",
    "count_train_flops",
    "fvcore_flops",
    "llama_param_count",
    "param_counts",
]


def _llama_dims(config: Any) -> dict[str, int]:
    d = int(config.hidden_size)
    h = int(config.num_attention_heads)
    kv = int(getattr(config, "num_key_value_heads", None) or h)
    hd = int(getattr(config, "head_dim", None) or d // h)
    return {
        "d": d,
        "h": h,
        "kv": kv,
        "hd": hd,
        "ff": int(config.intermediate_size),
        "layers": int(config.num_hidden_layers),
        "vocab": int(config.vocab_size),
    }


def llama_param_count(config: Any) -> dict[str, int]:
    """Exact parameter counts of ``LlamaForCausalLM(config)`` (no biases, RMSNorm weights): ``total``,
    ``nonembed`` (everything but the embedding and an untied head) and ``block_matrices`` (the 2-D weights inside
    the decoder blocks, W of the module docstring)."""
    g = _llama_dims(config)
    d, hd = g["d"], g["hd"]
    attn = d * g["h"] * hd + 2 * d * g["kv"] * hd + g["h"] * hd * d
    mlp = 3 * d * g["ff"]
    block_matrices = g["layers"] * (attn + mlp)
    norms = (2 * g["layers"] + 1) * d
    embed = g["vocab"] * d
    head = 0 if getattr(config, "tie_word_embeddings", False) else g["vocab"] * d
    bias = bool(getattr(config, "attention_bias", False)) or bool(getattr(config, "mlp_bias", False))
    if bias:
        raise ValueError("llama_param_count supports attention_bias=False and mlp_bias=False only, got a biased config")
    return {
        "total": block_matrices + norms + embed + head,
        "nonembed": block_matrices + norms,
        "block_matrices": block_matrices,
    }


@dataclass(frozen=True)
class AnalyticFlops:
    """Closed-form FLOPs of one sequence of ``seq_len`` tokens through a Llama model."""

    seq_len: int
    forward: int
    """F_fwd(T) of the module docstring."""
    train: int
    """3 F_fwd(T): forward + backward."""
    params: int
    params_nonembed: int

    @property
    def per_token_forward(self) -> float:
        return self.forward / self.seq_len

    @property
    def per_token_train(self) -> float:
        return self.train / self.seq_len


def analytic_llama(config: Any, seq_len: int) -> AnalyticFlops:
    """Forward and training FLOPs of one sequence of length ``seq_len`` through ``LlamaForCausalLM(config)`` (module
    docstring); equal to FlopCounterMode's count exactly (tested).

    Args:
        config: a ``transformers.LlamaConfig``.
        seq_len: tokens per sequence, at least 1.

    Returns:
        Forward and training FLOPs of the sequence and the parameter counts.
    """
    t = check_int("seq_len", seq_len, min=1)
    g = _llama_dims(config)
    p = llama_param_count(config)
    fwd = 2 * t * (p["block_matrices"] + g["vocab"] * g["d"]) + 4 * t * t * g["h"] * g["hd"] * g["layers"]
    return AnalyticFlops(t, fwd, 3 * fwd, p["total"], p["nonembed"])


def param_counts(model: nn.Module) -> dict[str, int]:
    """``total`` distinct parameters (tied weights once) and ``nonembed`` (minus ``nn.Embedding`` weights and any
    output head not tied to them).

    Args:
        model: any ``torch.nn.Module``.

    Returns:
        ``{"total": ..., "nonembed": ...}``.
    """
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    emb = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    embed = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    head = getattr(model, "lm_head", None) if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, nn.Linear) and id(head.weight) not in emb:
        embed += head.weight.numel()
    return {"total": total, "nonembed": total - embed}


def _forward(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=input_ids) if _takes_input_ids(model) else model(input_ids)
    return out.logits if hasattr(out, "logits") else out


def vocab_size(model: nn.Module) -> int | None:
    """Rows of the model's input embedding (``get_input_embeddings()``), or ``None`` when it has none."""
    get = getattr(model, "get_input_embeddings", None)
    try:
        emb = get() if callable(get) else None
    except (AttributeError, NotImplementedError):
        emb = None
    n = getattr(emb, "num_embeddings", None)
    return int(n) if n is not None else None


def check_token_ids(name: str, ids: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """``ids`` when every id lies in [0, vocab) of ``model``'s input embedding (not checked when the model has
    none); else a ``ValueError`` naming ``name``, the offending id and the vocabulary size, instead of torch's
    ``IndexError`` from inside the embedding."""
    vocab = vocab_size(model)
    if ids.numel() and vocab is not None:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"{name} holds the token id {bad}, outside the model's vocabulary [0, {vocab}) "
                f"(its input embedding has {vocab} rows)"
            )
    return ids


def _takes_input_ids(model: nn.Module) -> bool:
    import inspect

    try:
        return "input_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def count_flops(model: nn.Module, input_ids: torch.Tensor) -> int:
    """Forward FLOPs of ``model`` on ``input_ids`` as counted by ``FlopCounterMode`` (no gradients recorded).

    Args:
        model: a causal language model (``model(input_ids=...)`` or ``model(ids)``).
        input_ids: ``(B, T)`` token ids.

    Returns:
        FLOPs of the whole batch.
    """
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        _forward(model, input_ids)
    return int(fc.get_total_flops())


def count_train_flops(model: nn.Module, input_ids: torch.Tensor) -> int:
    """Forward + backward FLOPs of one next-token cross-entropy step on ``input_ids`` (FlopCounterMode). The
    gradients go through ``torch.autograd.grad``: the model's ``.grad`` fields are left untouched.

    Args:
        model: a causal language model with trainable floating-point parameters.
        input_ids: ``(B, T)`` token ids.

    Returns:
        FLOPs of the whole batch.

    Raises:
        ValueError: the model has no trainable floating-point parameter.
    """
    params = [p for p in model.parameters() if p.requires_grad and p.is_floating_point()]
    if not params:
        raise ValueError("count_train_flops needs a model with trainable floating-point parameters, found none")
    with torch.inference_mode(False), FlopCounterMode(display=False) as fc, torch.enable_grad():
        input_ids = input_ids.clone()  # an inference tensor cannot be saved for backward
        logits = _forward(model, input_ids)
        loss = nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).float(), input_ids[:, 1:].reshape(-1)
        )
        torch.autograd.grad(loss, params, allow_unused=True)
    return int(fc.get_total_flops())


class _LogitsOf(nn.Module):
    """``model(input_ids=x).logits`` as a plain ``forward(x)`` (fvcore traces with positional inputs)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return _forward(self.model, input_ids)


def fvcore_flops(model: nn.Module, input_ids: torch.Tensor) -> dict[str, Any]:
    """A second opinion from fvcore's ``FlopCountAnalysis`` (extra ``[fvcore]``; it traces the model with
    ``torch.jit``). fvcore counts one multiply-add as one flop, so ``flops = 2 x`` its total is comparable with
    :func:`count_flops`. It has no handler for ``aten::scaled_dot_product_attention`` and skips it (listed in
    ``unsupported``): with SDPA attention its figure lacks the 4 T² (h d_h) L attention term, with eager attention
    it counts the same as FlopCounterMode (tested)."""
    import warnings

    from torch.jit._trace import TracerWarning  # where it is defined (torch.jit does not export it)

    wrapped = _LogitsOf(model).eval()
    with warnings.catch_warnings(), torch.no_grad():
        # fvcore scripts a loss at import and traces with torch.jit, both deprecated in torch 2.x
        warnings.filterwarnings("ignore", message=r".*torch\.jit\..* is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", category=TracerWarning)
        from fvcore.nn import FlopCountAnalysis

        fa = FlopCountAnalysis(wrapped, (input_ids,))
        fa.unsupported_ops_warnings(False)
        fa.uncalled_modules_warnings(False)
        macs = int(fa.total())
        return {
            "macs": macs,
            "flops": 2 * macs,
            "by_operator": {k: int(v) for k, v in fa.by_operator().items()},
            "unsupported": dict(fa.unsupported_ops()),
        }
