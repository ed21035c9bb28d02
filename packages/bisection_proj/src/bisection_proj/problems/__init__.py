"""The paper's parametric test problems, generated as in the official code: ``ConvexQP``, ``ConvexQCQP``,
``SOCP``, ``JCCIM``, the 2-D ``toys`` and, with the ``[opf]`` extra, ``ACOPF``."""

from __future__ import annotations

from typing import Any

from bisection_proj.problems import toys
from bisection_proj.problems.base import Problem
from bisection_proj.problems.jccim import JCCIM
from bisection_proj.problems.linear import SOCP, ConvexQCQP, ConvexQP, LinearEqualityProblem
from bisection_proj.problems.polytope import Polytope

__all__ = ["Problem", "LinearEqualityProblem", "ConvexQP", "ConvexQCQP", "SOCP", "JCCIM", "Polytope", "toys", "ACOPF"]


def __getattr__(name: str) -> Any:
    if name == "ACOPF":  # needs the [opf] extra (PYPOWER); imported on first use
        from bisection_proj.problems.acopf import ACOPF

        return ACOPF
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
