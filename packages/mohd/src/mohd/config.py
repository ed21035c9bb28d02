"""``MoHDConfig``: Llama's fields plus every switch of the Mixture of Hidden-Dimensions Transformer.

Only the paper's abstract is certain (no code was released). The switches marked *reconstruction* in the README are
our reading of the abstract's parameter accounting; every one is a field here, serialised with ``save_pretrained``.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from icml25_shared.validate import ArgumentTypeError, check_bool, check_choice, check_float, check_int

__all__ = [
    "MoHDConfig",
    "Placement",
    "Router",
    "GateNorm",
    "Scaling",
    "Fusion",
    "FusionSite",
    "Impl",
]

Placement = Literal["residual", "ffn"]
Router = Literal["linear", "centroid"]
GateNorm = Literal["auto", "topk", "softmax"]
Scaling = Literal["inverse_ratio", "sqrt", "learned", "gate_sum", "none"]
Fusion = Literal["monarch", "group", "blockdiag", "none"]
FusionSite = Literal["input", "output"]
Impl = Literal["auto", "masked", "gather", "grouped"]

_CHOICES: dict[str, Any] = {
    "placement": Placement,
    "router": Router,
    "gate_norm": GateNorm,
    "scaling": Scaling,
    "fusion": Fusion,
    "fusion_site": FusionSite,
    "impl": Impl,
}


def _largest_divisor_at_most_sqrt(n: int) -> int:
    """The largest divisor ``b`` of ``n`` with ``b <= sqrt(n)`` (the default number of Monarch blocks)."""
    return max(b for b in range(1, math.isqrt(n) + 1) if n % b == 0)


# The choice fields are annotated ``str`` for transformers' strict dataclass (whose own ``Literal`` check raises an
# error that is not a ``ValueError``); their allowed values are the ``Literal`` aliases above, checked in
# ``__post_init__`` with messages naming the field and the value (wrong types: ``ArgumentTypeError``).
@strict
class MoHDConfig(LlamaConfig):
    """Configuration of a Mixture of Hidden-Dimensions (MoHD) decoder: a Llama whose hidden dimension is split into
    ``num_subdims`` sub-dimensions (groups), ``num_shared`` of them always active and ``num_routed`` of the others
    chosen per token by a router (abstract; Sec. 3 of the paper).

    Every Llama field keeps its meaning (``hidden_size`` H, ``num_attention_heads``, ``num_key_value_heads``,
    ``head_dim``, ``intermediate_size`` F, ...). With ``placement="residual"`` (default) H is split: every projection
    that reads the residual stream uses only the active groups' columns, every projection that writes it only their
    rows, so each projection has exactly the fraction ``delta = (num_shared + num_routed) / num_subdims`` of its
    weights activated per token. Build an expanded model from a Llama with :meth:`from_llama`.
    """

    model_type = "mohd"

    num_subdims: int = 16
    """N: number of sub-dimensions (groups) the split width (H, or F with ``placement="ffn"``) is cut into."""
    num_shared: int = 6
    """N_s: groups 0..N_s-1, active for every token (the paper's *shared sub-dimensions*)."""
    num_routed: int = 2
    """K: specialized groups the router activates per token (token-choice top-K, no capacity, no drops)."""
    placement: str = "residual"
    """``"residual"`` (reconstruction: split H, attention and FFN sparse) or ``"ffn"`` (split only the FFN width F)."""
    router: str = "linear"
    """``"linear"``: logits ``W_r h`` over the N - N_s specialized groups; ``"centroid"``: softmax over N centroids,
    top-K among the specialized ones."""
    gate_norm: str = "auto"
    """Gates of the chosen groups: ``"topk"`` ``K p_j / sum_topK p``, ``"softmax"`` ``(N - N_s) p_j``; ``"auto"`` is
    topk for K >= 2 and softmax for K = 1 (renormalising one gate would make it 1 and starve the router)."""
    scaling: str = "inverse_ratio"
    """Activation scaling alpha: ``"inverse_ratio"`` 1/delta, ``"sqrt"`` delta^-1/2, ``"learned"`` a per-group
    scalar (init 1/delta), ``"gate_sum"`` N / sum_i g_i per token, ``"none"`` 1."""
    fusion: str = "monarch"
    """Group fusion mixing features across groups: ``"monarch"`` (Monarch matrix, H(H/b + b) parameters),
    ``"group"`` (N x N), ``"blockdiag"`` (per-group d_s x d_s), ``"none"``. Identity at init."""
    fusion_site: str = "input"
    """``"input"``: fuse the normed input before the sparse read (keeps every projection delta-sparse);
    ``"output"``: fuse the sublayer output before the sparse write (write projections then compute all rows)."""
    monarch_blocks: int | None = None
    """b, the number of Monarch blocks; must divide H; default the largest divisor of H that is <= sqrt(H)."""
    write_gate: bool = False
    """Scale the written groups by their gates g instead of the binary active mask."""
    router_aux_loss_coef: float = 1e-2
    """Coefficient of the load-balancing loss added to the LM loss (HF MoE models use 1e-3)."""
    output_router_logits: bool = False
    """Return every sublayer's router logits (always computed; the aux loss is added whenever labels are given)."""
    aux_loss_sync: bool = False
    """All-reduce the router statistics over the default process group before the aux loss (data parallel)."""
    impl: str = "auto"
    """``"masked"``: dense matmuls on zeroed inputs (the oracle); ``"gather"``: shared groups as one GEMM and the
    specialized groups dispatched like MoE experts in fixed-shape tiles (batch-invariant); ``"grouped"``: the same
    with one GEMM per group sized by the routing (faster, not batch-invariant: a token's float32 round-off may
    depend on the rest of the batch); ``"auto"`` = gather."""

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        for name, alias in _CHOICES.items():
            check_choice(name, getattr(self, name), get_args(alias))
        # numpy scalars pass the strict type check; store them as Python numbers (JSON-serialisable)
        self.num_subdims = n = check_int("num_subdims", self.num_subdims, min=1)
        self.num_shared = ns = check_int("num_shared", self.num_shared, min=0, max=n)
        self.num_routed = k = check_int("num_routed", self.num_routed, min=0)
        if ns + k > n:
            raise ValueError(
                f"num_routed must be <= num_subdims - num_shared = {n - ns}, got num_routed={k} "
                f"(num_subdims={n}, num_shared={ns})"
            )
        if k == 0 and ns < n:
            raise ValueError(
                f"num_routed must be >= 1 when there are specialized groups (num_subdims - num_shared = {n - ns}), "
                "got 0"
            )
        if self.gate_norm == "topk" and k == 1:
            raise ValueError(
                "gate_norm must not be 'topk' with num_routed=1 (the gate would be 1 and the router "
                "would get no gradient); use 'softmax' or 'auto'"
            )
        split = self.split_size
        if split % n:
            what = "hidden_size" if self.placement == "residual" else "intermediate_size"
            raise ValueError(f"{what} must be divisible by num_subdims={n}, got {what}={split}")
        if self.monarch_blocks is not None:
            self.monarch_blocks = b = check_int("monarch_blocks", self.monarch_blocks, min=1)
            if self.hidden_size % b:
                raise ValueError(f"monarch_blocks must divide hidden_size={self.hidden_size}, got {b}")
        self.router_aux_loss_coef = check_float("router_aux_loss_coef", self.router_aux_loss_coef, min=0.0)
        for name in ("attention_bias", "mlp_bias"):
            if getattr(self, name):
                raise ValueError(
                    f"{name} must be False (MoHD's sparse read and write use bias-free projections), got True"
                )
        for name in ("write_gate", "output_router_logits", "aux_loss_sync"):
            check_bool(name, getattr(self, name))

    def validate_architecture(self) -> None:
        """Llama requires ``hidden_size % num_attention_heads == 0``; MoHD keeps the attention width
        ``num_attention_heads * head_dim`` fixed while H grows, so only the KV grouping is checked."""
        if self.num_attention_heads % (self.num_key_value_heads or self.num_attention_heads):
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be divisible by "
                f"num_key_value_heads={self.num_key_value_heads}"
            )

    # ------------------------------------------------------------------------------------------------------------
    @property
    def split_size(self) -> int:
        """The width cut into groups: H for ``placement="residual"``, F for ``"ffn"``."""
        return self.hidden_size if self.placement == "residual" else self.intermediate_size

    @property
    def subdim_size(self) -> int:
        """d_s, the width of one group."""
        return self.split_size // self.num_subdims

    @property
    def num_specialized(self) -> int:
        """N - N_s, the routed (specialized) groups."""
        return self.num_subdims - self.num_shared

    @property
    def active_ratio(self) -> float:
        """delta = (N_s + K) / N, the fraction of groups active per token."""
        return (self.num_shared + self.num_routed) / self.num_subdims

    @property
    def resolved_gate_norm(self) -> str:
        """``gate_norm`` with ``"auto"`` resolved (topk for K >= 2, softmax for K = 1)."""
        if self.gate_norm != "auto":
            return self.gate_norm
        return "topk" if self.num_routed >= 2 else "softmax"

    @property
    def resolved_monarch_blocks(self) -> int:
        """b: ``monarch_blocks`` or the largest divisor of H that is <= sqrt(H)."""
        return self.monarch_blocks or _largest_divisor_at_most_sqrt(self.hidden_size)

    @property
    def resolved_impl(self) -> str:
        """``impl`` with ``"auto"`` resolved to ``"gather"``."""
        return "gather" if self.impl == "auto" else self.impl

    @classmethod
    def from_llama(
        cls,
        llama_config: LlamaConfig,
        expansion: int = 1,
        num_subdims: int = 16,
        num_shared: int = 6,
        num_routed: int = 2,
        **switches: Any,
    ) -> MoHDConfig:
        """A MoHD config from a Llama config: H multiplied by ``expansion``, inner widths (``head_dim`` x heads, KV
        heads, ``intermediate_size``) kept, so activated projection parameters equal the Llama's when
        ``delta = 1/expansion`` (the paper's "expansion at constant activation cost")."""
        expansion = check_int("expansion", expansion, min=1)
        if not isinstance(llama_config, LlamaConfig):
            raise ArgumentTypeError(
                f"llama_config must be a transformers LlamaConfig, got {type(llama_config).__name__}"
            )
        d = llama_config.to_dict()
        for key in ("model_type", "transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype"):
            d.pop(key, None)
        d["head_dim"] = llama_config.head_dim
        if getattr(llama_config, "_attn_implementation", None) is not None:
            d["attn_implementation"] = llama_config._attn_implementation
        d["hidden_size"] = llama_config.hidden_size * expansion
        d.update(num_subdims=num_subdims, num_shared=num_shared, num_routed=num_routed, **switches)
        return cls(**d)
