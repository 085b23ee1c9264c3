"""cdk-nag (AwsSolutionsChecks, a CDK validation plugin since cdk-nag 3) passes, for reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Validations
from aws_cdk.assertions import Annotations, Match, Template
from infra.app import build_app

CRAWL_AND_LOAD = """name: {name}
tasks:
  - id: crawl
    type: crawl
    seeds: [https://example.com/]
  - id: out
    type: load
    depends_on: [crawl]
    target: {{kind: s3, bucket: someone-elses-bucket}}
"""


def report(outdir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((outdir / "validation-report.json").read_text())
    return data


def acknowledgments(stack) -> dict[tuple[str, str], str]:
    """(construct path, rule id) -> reason of every acknowledgment made in the stack."""
    found = {}
    for construct in stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                for rule, reason in entry.data.items():
                    found[(construct.node.path, rule)] = reason
    return found


def test_no_unacknowledged_findings_and_no_annotations(default) -> None:
    (plugin,) = report(default.outdir)["pluginReports"]
    assert plugin["pluginName"] == "AwsSolutions"
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    annotations = Annotations.from_stack(default.stack)
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []


def test_every_acknowledgment_has_a_reason_and_matches_a_finding(default) -> None:
    made = acknowledgments(default.stack)
    assert made
    for (path, rule), reason in made.items():
        assert rule.startswith("AwsSolutions::AwsSolutions-"), rule
        assert len(reason) > 40, (path, rule)
    (plugin,) = report(default.outdir)["pluginReports"]
    used = {(v["acknowledgedAt"], v["acknowledgedId"]) for v in plugin["suppressedViolations"]}
    assert set(made) == used  # no stale acknowledgment lingers after a fix
    rules = {rule.split("::")[1].split("[")[0] for _, rule in made}
    assert rules == {"AwsSolutions-S1", "AwsSolutions-L1", "AwsSolutions-IAM5"}


def test_a_new_wildcard_grant_fails_the_synth(cdk_context, tmp_path: Path) -> None:
    """The acknowledgments are exact: widening fetch to the whole bucket is caught."""
    _app, stack = build_app(
        {**cdk_context, "aws:cdk:bundling-stacks": []}, outdir=str(tmp_path / "out")
    )
    stack.storage.bucket.grant_read(stack.workers.fetch)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        Template.from_stack(stack)
    (plugin,) = report(tmp_path / "out")["pluginReports"]
    rules = {v["ruleName"] for v in plugin["violations"]}
    assert any(r.startswith("AwsSolutions-IAM5[Resource::<StorageBucket") for r in rules), rules


def test_loading_into_another_bucket_fails_the_synth(cdk_context, tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "elsewhere.yaml").write_text(CRAWL_AND_LOAD.format(name="elsewhere"))
    context = {
        **cdk_context,
        "aws:cdk:bundling-stacks": [],
        "pipelines_dir": str(pipelines),
    }
    _app, stack = build_app(context, outdir=str(tmp_path / "out"))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        Template.from_stack(stack)
    text = (tmp_path / "out" / "validation-report.json").read_text()
    assert "loading into another bucket (someone-elses-bucket)" in text
