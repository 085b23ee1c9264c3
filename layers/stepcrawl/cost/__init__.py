"""What a page costs on AWS: the dated price table and the cost model that prices counts."""

from __future__ import annotations

from stepcrawl.cost.model import (
    SERVICES,
    Assumptions,
    Counts,
    Estimate,
    FunctionCounts,
    estimate,
    significant,
)
from stepcrawl.cost.prices import PRICES, PRICES_CHECKED, REGION, Prices
from stepcrawl.cost.transitions import transitions_on_success

__all__ = [
    "PRICES",
    "PRICES_CHECKED",
    "REGION",
    "SERVICES",
    "Assumptions",
    "Counts",
    "Estimate",
    "FunctionCounts",
    "Prices",
    "estimate",
    "significant",
    "transitions_on_success",
]
