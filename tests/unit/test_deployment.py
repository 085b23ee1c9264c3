"""Reading a run from outside: tasks from the definition, run ids, latency percentiles, and
AWS errors as stepcrawl.errors classes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from stepcrawl.compiler import compile_pipeline
from stepcrawl.deployment import Deployment
from stepcrawl.errors import AccessDeniedError, ConfigError, RequestRejectedError, ThrottledError
from stepcrawl.pipeline import load_pipeline
from stepcrawl.run_status import TaskDef, new_run_id, tasks_of_definition
from stepcrawl.telemetry.percentiles import percentiles

ROOT = Path(__file__).resolve().parents[2]
ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:stepcrawl-test-books"


def test_tasks_come_from_the_compiled_definition() -> None:
    pipeline = load_pipeline(ROOT / "pipelines" / "demo-shop.yaml")
    tasks = tasks_of_definition(compile_pipeline(pipeline))
    assert tasks == {
        "crawl_shop": TaskDef("crawl"),
        "clean_products": TaskDef("transform", ("crawl_shop",)),
        "check_products": TaskDef("validate", ("clean_products",)),
        "export_products": TaskDef("load", ("check_products",)),
    }


def test_run_ids_sort_by_time_and_are_valid_execution_names() -> None:
    early = new_run_id(datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
    late = new_run_id(datetime(2026, 11, 30, 3, 1, tzinfo=UTC))
    assert early < late
    assert re.fullmatch(r"20261130T030000-[0-9a-f]{6}", early)
    assert new_run_id() != new_run_id()


def test_percentiles() -> None:
    assert percentiles([]) is None
    assert percentiles([5.0]) == {"p50": 5.0, "p95": 5.0, "p99": 5.0}
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == pytest.approx({"p50": 50.5, "p95": 95.0, "p99": 99.0}, abs=0.11)
    skewed = [1.0] * 98 + [500.0, 1000.0]  # the tail shows only in p99
    assert percentiles(skewed) == pytest.approx({"p50": 1.0, "p95": 1.0, "p99": 505.0}, abs=0.1)


class _Client:
    """A boto3 client stand-in: each method answers from ``answers`` or raises its
    ``ClientError`` code."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers

    def __getattr__(self, name: str) -> Any:
        def call(**_request: Any) -> Any:
            answer = self.answers[name]
            if isinstance(answer, str):
                raise ClientError({"Error": {"Code": answer, "Message": "no"}}, name)
            return answer

        return call


STACK = {"Stacks": [{"Outputs": [{"OutputKey": "StateMachineArnBooks", "OutputValue": ARN}]}]}


def _deployment(**stepfunctions: Any) -> Deployment:
    clients = {
        "cloudformation": _Client(describe_stacks=STACK),
        "stepfunctions": _Client(**stepfunctions),
    }
    return Deployment("test", client=clients.__getitem__)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ValidationError", ConfigError),  # CloudFormation: no such stack
        ("AccessDenied", AccessDeniedError),
        ("Throttling", ThrottledError),
    ],
)
def test_deployment_raises_the_mapped_errors_not_client_errors(
    code: str, expected: type[Exception]
) -> None:
    clients = {"cloudformation": _Client(describe_stacks=code)}
    with pytest.raises(expected) as raised:
        Deployment("test", client=clients.__getitem__)
    assert not isinstance(raised.value, ClientError)


def test_deployment_answers_known_codes_and_maps_the_rest() -> None:
    with pytest.raises(ConfigError, match="run r1 already exists"):
        _deployment(start_execution="ExecutionAlreadyExists").start("books", "r1")
    with pytest.raises(ThrottledError, match="stepcrawl-test-books"):
        _deployment(start_execution="ThrottlingException").start("books", "r1")
    with pytest.raises(ConfigError, match="no run r1 in stepcrawl-test"):
        _deployment(describe_execution="ExecutionDoesNotExist").execution_arn("r1")
    with pytest.raises(RequestRejectedError):
        _deployment(describe_execution="SomethingElse").execution_arn("r1")
