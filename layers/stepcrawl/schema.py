"""The JSON Schema of pipeline files, generated from the pydantic models (one source of truth).

The committed copy under ``schemas/`` lets editors validate YAML as people type (point the
YAML language server at it); a test keeps it equal to what the models generate.
"""

from __future__ import annotations

from typing import Any

from stepcrawl.pipeline.models import Pipeline

__all__ = ["SCHEMA_ID", "pipeline_json_schema"]

SCHEMA_ID = "https://stepcrawl.dev/schemas/pipeline.schema.json"


def pipeline_json_schema() -> dict[str, Any]:
    """Draft 2020-12 schema for pipeline YAML/JSON files."""
    body = Pipeline.model_json_schema(by_alias=True, mode="validation")
    # Discriminators have defaults in Python (CrawlTask(id=...) is a crawl) but a file must
    # say which kind it means, as the loader demands: make editors demand it too.
    for name, definition in body.get("$defs", {}).items():
        for tag in ("type", "kind", "op"):
            if name.endswith(("Task", "Target", "Op")) and tag in definition.get("properties", {}):
                required = definition.setdefault("required", [])
                if tag not in required:
                    required.append(tag)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **body,
        "title": "stepcrawl pipeline",
        "description": "A DAG of crawl and ETL tasks; see docs/pipelines.md.",
    }
