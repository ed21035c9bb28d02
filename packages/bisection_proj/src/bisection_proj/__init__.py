"""Bisection Projection (Liang & Chen, ICML 2025): guaranteed-feasible neural-network solutions over general sets.

An interior-point network (IPNN) predicts interior points of the feasible set for each problem parameter θ;
infeasible predictions of a neural solver are repaired by bisection on the segment between them and the interior
points, which returns a feasible point whenever an interior point is feasible, for any compact set.
"""

import importlib.metadata

from bisection_proj import baselines, metrics, problems
from bisection_proj.bisection import BisectionInfo, BisectionProjector, ProjectionFailure, bisection_project
from bisection_proj.config import BisectionConfig, IPNNConfig
from bisection_proj.experiments import NNSolver, train_nn_solver
from bisection_proj.ipnn import IPNN, TrainHistory, train_ipnn, validity_rate
from bisection_proj.problems import Problem

__all__ = [
    "bisection_project",
    "BisectionProjector",
    "BisectionInfo",
    "BisectionConfig",
    "ProjectionFailure",
    "IPNN",
    "IPNNConfig",
    "train_ipnn",
    "TrainHistory",
    "validity_rate",
    "NNSolver",
    "train_nn_solver",
    "Problem",
    "problems",
    "baselines",
    "metrics",
]

__version__ = importlib.metadata.version("icml25-bisection-proj")
