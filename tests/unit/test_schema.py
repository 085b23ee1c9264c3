"""The committed JSON Schema matches the models, and it really validates pipeline files."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from stepcrawl.schema import pipeline_json_schema

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schemas" / "pipeline.schema.json"


def test_committed_schema_is_up_to_date() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed == pipeline_json_schema(), (
        "schemas/pipeline.schema.json is stale: run "
        "`stepcrawl schema -o schemas/pipeline.schema.json`"
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(pipeline_json_schema())


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_example_pipelines_satisfy_the_schema(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(pipeline_json_schema()).validate(data)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(nmae="x"),
        lambda d: d["tasks"][0].update(sedes=["https://x/"]),
        lambda d: d["tasks"][0].update(type="crawler"),
        lambda d: d.update(name="Not Valid"),
        lambda d: d["tasks"][0].update(priority="high"),
    ],
    ids=["top-level typo", "task typo", "unknown type", "bad name", "bad priority"],
)
def test_schema_rejects_what_an_editor_should_flag(mutate: object) -> None:
    data = yaml.safe_load((ROOT / "pipelines" / "books.yaml").read_text(encoding="utf-8"))
    mutate(data)  # type: ignore[operator]
    validator = jsonschema.Draft202012Validator(pipeline_json_schema())
    assert list(validator.iter_errors(data)), "the editor would accept a broken pipeline"
