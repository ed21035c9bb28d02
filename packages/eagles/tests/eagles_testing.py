"""Helpers shared by the eagles tests."""

from __future__ import annotations

from eagles.config import EaglesConfig
from eagles.experiments import Setup
from eagles.partition import random_clients


def small_config(**kw) -> EaglesConfig:
    base = dict(
        hidden_channels=8,
        num_layers=2,
        expert_hidden=4,
        local_epochs=2,
        keep_ratios=(0.9, 0.6, 0.3),
        top_s=2,
        threshold_lr=0.05,
        lr=0.01,
        bands=(0.9, 0.7, 0.5, 0.3),
    )
    base.update(kw)
    return EaglesConfig(**base)


def small_setup(**kw) -> Setup:
    """A three-client Cora reproduction setup small enough for the default run; ``kw`` overrides its fields."""
    base = dict(
        seeds=(0,),
        num_clients=3,
        rounds=2,
        max_pretrain_rounds=10,
        hidden_channels=16,
        expert_hidden=2,
        local_epochs=3,
        threshold_lr=5e-3,
        target_band=0.8,
    )
    return Setup(**(base | kw))


def small_clients(data, c=3, seed=0):
    return random_clients(data, c, seed)
