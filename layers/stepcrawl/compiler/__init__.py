"""Pipeline -> Step Functions: the block plan, the ASL definition, and a Mermaid picture."""

from __future__ import annotations

from stepcrawl.compiler.asl import compile_pipeline, definition_json, placeholders_in, substitute
from stepcrawl.compiler.mermaid import to_mermaid
from stepcrawl.compiler.plan import Leaf, Parallel, Plan, Series, plan_dag

__all__ = [
    "Leaf",
    "Parallel",
    "Plan",
    "Series",
    "compile_pipeline",
    "definition_json",
    "placeholders_in",
    "plan_dag",
    "substitute",
    "to_mermaid",
]
