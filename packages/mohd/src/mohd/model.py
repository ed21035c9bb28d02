"""``MoHDModel`` / ``MoHDForCausalLM``: the transformers-native MoHD decoder, registered with the Auto classes.

The embedding, final norm and LM head read and write all of H (dense); every decoder sublayer is a
:class:`~mohd.layer.MoHDSublayer`. Outputs follow HF's MoE models: ``loss`` includes ``router_aux_loss_coef *
aux_loss`` when labels are given, ``aux_loss`` is the load-balancing loss averaged over the routed sublayers (``None``
when no sublayer routes, the dense limit; tokens masked out by a 2-D ``attention_mask`` are left out of it, as in
HF Mixtral), and
``router_logits`` (one tensor of shape (B*T, N - N_s) per routed sublayer) is returned with ``output_router_logits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import MoeCausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding
from transformers.utils.generic import ModelOutput

from icml25_shared.validate import check_finite, check_tensor
from mohd.config import MoHDConfig
from mohd.fusion import BlockDiagFusion, GroupFusion, MonarchFusion
from mohd.layer import MoHDDecoderLayer, MoHDSublayer
from mohd.routing import Routing, SubDimRouter, load_balancing_loss

__all__ = ["MoHDPreTrainedModel", "MoHDModel", "MoHDForCausalLM", "MoHDModelOutputWithPast"]


@dataclass
class MoHDModelOutputWithPast(ModelOutput):
    """Output of :class:`MoHDModel`."""

    last_hidden_state: torch.FloatTensor | None = None
    cache: Cache | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    aux_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


class MoHDPreTrainedModel(PreTrainedModel):
    """Weights init (Llama's for projections and embeddings, router N(0, 0.02), fusion identity, learned alpha
    1/delta) and the transformers plumbing shared by the MoHD models."""

    config: MoHDConfig
    config_class = MoHDConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["MoHDDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, SubDimRouter):
            std = self.config.initializer_range if module.kind == "linear" else self.config.hidden_size**-0.5
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, MonarchFusion):
            init.copy_(module.right, torch.eye(module.block_size).expand_as(module.right))
            init.copy_(module.left, torch.eye(module.blocks).expand_as(module.left))
        elif isinstance(module, GroupFusion):
            init.copy_(module.weight, torch.eye(module.num_groups))
        elif isinstance(module, BlockDiagFusion):
            init.copy_(module.weight, torch.eye(module.group_size).expand_as(module.weight))
        elif isinstance(module, MoHDSublayer) and hasattr(module, "alpha"):
            init.constant_(module.alpha, 1.0 / module.delta)


class MoHDModel(MoHDPreTrainedModel):
    """The MoHD decoder stack (no LM head)."""

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList([MoHDDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()

    @property
    def vocab_size(self) -> int:
        """Rows of the input embedding (read from the module, so ``resize_token_embeddings`` is followed)."""
        return self.embed_tokens.num_embeddings

    @vocab_size.setter
    def vocab_size(self, value: int) -> None:  # transformers' resize_token_embeddings assigns it after resizing
        if value != self.embed_tokens.num_embeddings:
            raise ValueError(
                f"vocab_size follows the embedding ({self.embed_tokens.num_embeddings} rows), got {value}; "
                "use resize_token_embeddings"
            )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        use_cache: bool | None = None,
        *,
        output_hidden_states: bool | None = None,
        output_router_logits: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Any,
    ) -> MoHDModelOutputWithPast | tuple:
        """Hidden states, the KV cache, the mean load-balancing loss (``None`` without routed sublayers) and
        (optionally) the router logits; a tuple of the set fields with ``return_dict=False``."""
        cache = cache if cache is not None else past_key_values
        return_dict = kwargs.pop("return_dict", None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("exactly one of input_ids and inputs_embeds must be given")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if output_router_logits is None:
            output_router_logits = self.config.output_router_logits
        if inputs_embeds is None:
            assert input_ids is not None  # exactly one of the two is given (checked above)
            check_tensor("input_ids", input_ids, ndim=2, dtype="integer")
            if input_ids.shape[1] == 0:
                raise ValueError(
                    f"input_ids must hold at least one token per sequence, got shape {tuple(input_ids.shape)} "
                    "(batch, 0)"
                )
            vocab = self.vocab_size
            if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
                raise ValueError(
                    f"input_ids must lie in [0, vocab_size={vocab}), got values in "
                    f"[{int(input_ids.min())}, {int(input_ids.max())}]"
                )
            embeds: Tensor = self.embed_tokens(input_ids)
        else:
            check_tensor("inputs_embeds", inputs_embeds, ndim=3, dtype="floating")
            if inputs_embeds.shape[1] == 0:
                raise ValueError(
                    f"inputs_embeds must hold at least one position per sequence, got shape "
                    f"{tuple(inputs_embeds.shape)} (batch, 0, hidden)"
                )
            if inputs_embeds.shape[-1] != self.config.hidden_size:
                raise ValueError(
                    f"inputs_embeds must have hidden_size={self.config.hidden_size} features, got shape "
                    f"{tuple(inputs_embeds.shape)}"
                )
            check_finite("inputs_embeds", inputs_embeds)
            embeds = inputs_embeds.to(self.embed_tokens.weight.dtype)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        past = cache.get_seq_length() if cache is not None else 0
        if isinstance(attention_mask, Tensor) and attention_mask.ndim == 2:
            want = (embeds.shape[0], past + embeds.shape[1])
            if tuple(attention_mask.shape) != want:  # else the causal mask is padded or cut without a word
                raise ValueError(
                    f"attention_mask must have shape (batch, cached + new positions) = {want}, got "
                    f"{tuple(attention_mask.shape)}"
                )
        if position_ids is None:
            arange = torch.arange(embeds.shape[1], device=embeds.device)
            position_ids = cast(torch.LongTensor, (arange + past).unsqueeze(0))
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=position_ids,
        )
        hidden = embeds
        position_embeddings = self.rotary_emb(hidden, position_ids=position_ids)
        all_hidden: list[Tensor] = [hidden] if output_hidden_states else []
        routings: list[Routing] = []
        for layer in self.layers[: self.config.num_hidden_layers]:
            hidden, layer_routings = layer(
                hidden,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                cache=cache,
                **kwargs,
            )
            routings += [r for r in layer_routings if r.logits is not None]
            if output_hidden_states:
                all_hidden.append(hidden)
        hidden = self.norm(hidden)
        if output_hidden_states:  # as Llama: the last entry is the final normed state (= last_hidden_state)
            all_hidden[-1] = hidden
        aux = None
        if routings:
            if isinstance(attention_mask, Tensor) and attention_mask.ndim == 2:
                # padded tokens left out of the balance statistics, as in HF Mixtral's load-balancing loss
                keep = attention_mask[:, -embeds.shape[1] :].reshape(-1)
                aux = torch.stack([self._masked_aux(r, keep) for r in routings]).mean()
            else:
                aux = torch.stack([r.aux_loss for r in routings]).mean()
        output = MoHDModelOutputWithPast(
            last_hidden_state=hidden,
            cache=cache if use_cache else None,
            hidden_states=cast(tuple[torch.FloatTensor, ...], tuple(all_hidden)) if output_hidden_states else None,
            aux_loss=cast(torch.FloatTensor | None, aux),
            router_logits=cast(tuple[torch.FloatTensor, ...], tuple(r.logits for r in routings))
            if output_router_logits
            else None,
        )
        return output if return_dict else output.to_tuple()

    def _masked_aux(self, routing: Routing, keep: Tensor) -> Tensor:
        """The load-balancing loss of one routed sublayer over the tokens with ``keep`` = 1."""
        assert routing.probs is not None  # routed sublayers keep their probabilities
        n_spec = routing.probs.shape[-1]
        n_shared = routing.gates.shape[-1] - n_spec
        return load_balancing_loss(routing.probs, routing.index - n_shared, n_spec, sync=routing.sync, weight=keep)


class MoHDForCausalLM(MoHDPreTrainedModel, GenerationMixin):
    """MoHD decoder with an LM head; ``generate()`` with the KV cache, ``save_pretrained``/``from_pretrained``.

    Example::

        >>> from transformers import LlamaConfig
        >>> from mohd import MoHDConfig, MoHDForCausalLM
        >>> llama = LlamaConfig(vocab_size=65, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        ...                     num_attention_heads=4)
        >>> model = MoHDForCausalLM(MoHDConfig.from_llama(llama, expansion=2, num_subdims=8, num_shared=3,
        ...                                                num_routed=1))
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MoHDConfig) -> None:
        super().__init__(config)
        self.model = MoHDModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        *,
        output_hidden_states: bool | None = None,
        output_router_logits: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Any,
    ) -> MoeCausalLMOutputWithPast | tuple:
        """Logits, and with ``labels`` the loss ``LM + router_aux_loss_coef * aux_loss`` (labels shifted inside, as
        in every HF causal LM). The positional arguments are ``LlamaForCausalLM.forward``'s, in its order; the
        others are keyword-only."""
        return_dict = kwargs.pop("return_dict", None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache if cache is not None else past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            output_router_logits=output_router_logits,
            return_dict=True,
            **kwargs,
        )
        hidden = out.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden[:, keep, :])
        loss = None
        if labels is not None:
            check_tensor("labels", labels, dtype="integer")
            if tuple(labels.shape) != tuple(logits.shape[:2]):
                raise ValueError(
                    f"labels must have the shape of the scored positions (batch, positions) = "
                    f"{tuple(logits.shape[:2])}, got {tuple(labels.shape)}"
                )
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
            if self.config.router_aux_loss_coef and out.aux_loss is not None:
                loss = loss + self.config.router_aux_loss_coef * out.aux_loss.to(loss.device)
        output = MoeCausalLMOutputWithPast(
            loss=loss,
            aux_loss=out.aux_loss,
            logits=logits,
            cache=out.cache,
            hidden_states=out.hidden_states,
            router_logits=out.router_logits,
        )
        # as every transformers model: a plain tuple of the fields that are set (Llama's order without routing)
        return output if return_dict else output.to_tuple()


AutoConfig.register("mohd", MoHDConfig, exist_ok=True)
AutoModel.register(MoHDConfig, MoHDModel, exist_ok=True)
AutoModelForCausalLM.register(MoHDConfig, MoHDForCausalLM, exist_ok=True)
