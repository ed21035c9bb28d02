"""Reward-Guided Speculative Decoding (ICML 2025): step-level draft/target mixing with a process reward model,
on transformers or any OpenAI-compatible server."""

from importlib.metadata import version as _version

from rsd import weighting
from rsd.backends import Backend, HFBackend, OpenAIBackend
from rsd.config import RSDConfig
from rsd.decoder import RewardGuidedDecoder, RSDOutput, Step
from rsd.flops import CallRecord, FlopCounter, ModelCost
from rsd.functional import expected_reward, mixture_distribution, optimal_weights, rejection_probability
from rsd.prm import PRM, CallablePRM, HFProcessRewardModel

__version__ = _version("icml25-rsd")

__all__ = [
    "PRM",
    "Backend",
    "CallRecord",
    "CallablePRM",
    "FlopCounter",
    "HFBackend",
    "HFProcessRewardModel",
    "ModelCost",
    "OpenAIBackend",
    "RSDConfig",
    "RSDOutput",
    "RewardGuidedDecoder",
    "Step",
    "expected_reward",
    "mixture_distribution",
    "optimal_weights",
    "rejection_probability",
    "weighting",
]
