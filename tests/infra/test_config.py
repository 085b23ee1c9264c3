"""Context settings: defaults, cdk.json agreement, parsing of `-c` strings, validation."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template
from infra.config import DEFAULTS, REPO_ROOT, ContextError, StackConfig
from infra.retention import RETENTION_BY_DAYS

from stepcrawl.crawl.context import DEPLOYED_SETTINGS, CrawlConfig


def config(**context: Any) -> StackConfig:
    return StackConfig.from_context(context.get)


def test_cdk_json_sets_only_known_keys(cdk_context: dict[str, Any]) -> None:
    # Defaults live in one place (DEFAULTS, and CrawlConfig for the engine's keys); cdk.json
    # holds CDK's feature flags and only the stepcrawl keys a deployment overrides.
    ours = {k for k in cdk_context if not k.startswith("@")}
    assert ours <= set(DEFAULTS)


def test_the_deploy_guide_lists_every_key_with_its_default() -> None:
    guide = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", guide, re.MULTILINE))
    assert set(documented) == set(DEFAULTS)
    for key, default in DEFAULTS.items():
        shown = documented[key] if isinstance(default, str) else json.loads(documented[key])
        assert shown == default, key


def test_engine_defaults_and_bounds_come_from_the_library() -> None:
    assert {k: DEFAULTS[k] for k in DEPLOYED_SETTINGS} == {
        k: getattr(CrawlConfig(), k) for k in DEPLOYED_SETTINGS
    }
    # What the stack puts in the functions' environment is what they read back.
    got = config(shards="16", window=1024)
    assert CrawlConfig.from_env(got.engine.to_env()) == got.engine


def test_defaults() -> None:
    got = config()
    assert got.stage == "dev"
    assert got.prefix == "stepcrawl-dev"
    assert got.pipelines_dir == (REPO_ROOT / "pipelines").resolve()
    assert got.log_retention_days == 14
    assert (got.dispatch_max_concurrency, got.fetch_max_concurrency) == (5, 10)
    assert got.parse_max_concurrency == 5
    assert (got.engine.shards, got.engine.window, got.engine.fetch_concurrency) == (4, 256, 32)
    assert got.alert_webhook_secrets == ()


def test_command_line_strings_are_parsed(tmp_path: Any) -> None:
    got = config(
        stage="prod",
        pipelines_dir=str(tmp_path),
        log_retention_days="30",
        fetch_max_concurrency="50",
        shards="8",
        alert_webhook_secrets='["stepcrawl/wecom", "stepcrawl/slack"]',
    )
    assert (got.stage, got.pipelines_dir, got.log_retention_days) == ("prod", tmp_path, 30)
    assert (got.fetch_max_concurrency, got.engine.shards) == (50, 8)
    assert got.alert_webhook_secrets == ("stepcrawl/wecom", "stepcrawl/slack")
    assert config(alert_webhook_secrets="stepcrawl/wecom").alert_webhook_secrets == (
        "stepcrawl/wecom",
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("stage", "Prod", "lower-case"),
        ("stage", "a" * 17, "1-16"),
        ("pipelines_dir", "no/such/dir", "not a directory"),
        ("log_retention_days", 10, "does not offer 10"),
        ("log_retention_days", "two weeks", "expected an integer"),
        ("fetch_max_concurrency", 1, "out of range 2-1000"),
        ("parse_max_concurrency", 1001, "out of range 2-1000"),
        ("dispatch_max_concurrency", True, "expected an integer"),
        ("shards", 0, "greater than or equal to 1"),
        ("window", "wide", "valid integer"),
        ("fetch_concurrency", True, "expected a number"),
        ("stall_after", 0, "greater than 0"),
        ("stall_after", "soon", "valid number"),
        ("log_checkpoint_entries", 1, "greater than or equal to 2"),
        ("alert_webhook_secrets", [""], "list of Secrets Manager"),
        ("alert_webhook_secrets", {"a": 1}, "list of Secrets Manager"),
        ("scaler", {"level_low": 0.9}, "level_low must be below level_high"),
        ("scaler", {"qps_high": -1}, "scaler.qps_high"),
        ("scaler", {"tick": 60, "bogus": 1}, "scaler.bogus"),
        ("scaler", "{not json", "is not JSON"),
        ("scaler", [1], "must be an object"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ContextError, match=key) as error:
        config(**{key: value})
    assert message in str(error.value)


def test_every_retention_choice_synthesizes_to_its_days() -> None:
    stack = Stack(App(), "Retention")
    for days, member in RETENTION_BY_DAYS.items():
        logs.LogGroup(stack, f"L{days}", retention=member)
    groups = Template.from_stack(stack).find_resources("AWS::Logs::LogGroup")
    assert sorted(g["Properties"]["RetentionInDays"] for g in groups.values()) == sorted(
        RETENTION_BY_DAYS
    )
