"""DP-TS-UCB (Hu, Huang, Zhang, Lécuyer & Hegde, ICML 2025): private bandits with an exact GDP ledger.

>>> from dp_ts_ucb import DPTSUCB
>>> from dp_ts_ucb.envs import BernoulliBandit
>>> env, pol = BernoulliBandit([0.9, 0.4], seed=1), DPTSUCB(n_arms=2, horizon=1000, alpha=1.0, seed=0)
>>> for _ in range(1000):
...     a = pol.select(); pol.update(a, env.pull(a))
>>> round(pol.ledger.mu_bound, 3)
1.007
"""

import importlib.metadata

from dp_ts_ucb.adapter import MABAdapter
from dp_ts_ucb.baselines import DPSE, UCB1, AdaPUCB, MTSGaussian, TSGaussian
from dp_ts_ucb.config import DPTSUCBConfig
from dp_ts_ucb.envs import BernoulliBandit, TruncatedGaussianBandit
from dp_ts_ucb.experiments import SimResult, simulate
from dp_ts_ucb.policies import DPTSUCB, BanditPolicy
from dp_ts_ucb.privacy import GDPLedger, PureDPLedger

__version__ = importlib.metadata.version("icml25-dp-ts-ucb")

__all__ = [
    "DPTSUCB",
    "DPTSUCBConfig",
    "UCB1",
    "TSGaussian",
    "MTSGaussian",
    "DPSE",
    "AdaPUCB",
    "BanditPolicy",
    "BernoulliBandit",
    "TruncatedGaussianBandit",
    "GDPLedger",
    "PureDPLedger",
    "MABAdapter",
    "SimResult",
    "simulate",
]
