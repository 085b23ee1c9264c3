"""Concurrency scaling of the fetch and parse functions: the policy and its simulation.

The scaler Lambda measures, :func:`decide` decides, the Lambda actuates; the simulation runs
the same :func:`decide` against a modelled queue and target (``docs/scaling.md``).
"""

from __future__ import annotations

from stepcrawl.scaling.policy import (
    FETCH,
    PARSE,
    REASONS,
    Decision,
    ScalerMemory,
    ScalerSettings,
    Signals,
    decide,
    water_level,
)

__all__ = [
    "FETCH",
    "PARSE",
    "REASONS",
    "Decision",
    "ScalerMemory",
    "ScalerSettings",
    "Signals",
    "decide",
    "water_level",
]
