"""Tiny random-init ``SamModel`` / ``Sam2Model`` (64-px images, decoder width 32) shared by the tests."""

from __future__ import annotations

import torch
from transformers import Sam2Config, Sam2Model, SamConfig, SamModel

D = 32
IMAGE = 64


def tiny_sam(seed: int = 0, d: int = D) -> SamModel:
    """SamModel: ViT with 1 layer, 8-px patches (8x8 embedding), decoder width d."""
    torch.manual_seed(seed)
    vision = dict(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE,
        patch_size=8,
        output_channels=d,
        mlp_dim=64,
        window_size=4,
        global_attn_indexes=[0],
        num_pos_feats=d // 2,
    )
    prompt = dict(hidden_size=d, image_size=IMAGE, patch_size=8, mask_input_channels=4)
    decoder = dict(hidden_size=d, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64, iou_head_hidden_dim=32)
    cfg = SamConfig(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder)
    return SamModel(cfg).eval()


def tiny_sam2(seed: int = 0, d: int = D, **decoder_kw) -> Sam2Model:
    """Sam2Model: a 5-block Hiera, 4x4 embedding, decoder width d."""
    torch.manual_seed(seed)
    backbone = dict(
        model_type="sam2_hiera_det_model",
        hidden_size=8,
        image_size=[IMAGE, IMAGE],
        blocks_per_stage=[1, 1, 2, 1],
        embed_dim_per_stage=[8, 16, 32, 64],
        num_attention_heads_per_stage=[1, 1, 1, 1],
        window_size_per_stage=[4, 4, 4, 4],
        global_attention_blocks=[3],
        window_positional_embedding_background_size=[2, 2],
    )
    vision = dict(
        backbone_config=backbone,
        backbone_channel_list=[64, 32, 16, 8],
        backbone_feature_sizes=[[16, 16], [8, 8], [4, 4]],
        fpn_hidden_size=d,
    )
    prompt = dict(hidden_size=d, image_size=IMAGE, patch_size=16, mask_input_channels=4)
    decoder = dict(hidden_size=d, mlp_dim=64, num_attention_heads=2, iou_head_hidden_dim=32, **decoder_kw)
    cfg = Sam2Config(vision_config=vision, prompt_encoder_config=prompt, mask_decoder_config=decoder)
    return Sam2Model(cfg).eval()


def inputs(b: int = 2, p: int = 3, n: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random pixel values and n-point prompts, B images x P prompts."""
    g = torch.Generator().manual_seed(seed)
    return {
        "pixel_values": torch.randn(b, 3, IMAGE, IMAGE, generator=g),
        "input_points": torch.rand(b, p, n, 2, generator=g) * (IMAGE - 1),
        "input_labels": torch.ones(b, p, n, dtype=torch.long),
    }
