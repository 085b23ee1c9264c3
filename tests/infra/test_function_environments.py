"""Each function's environment in the template is what its model (stepcrawl.environment) reads:
no variable the model does not declare, none it requires missing."""

from __future__ import annotations

from typing import Any

import pytest

from stepcrawl.environment import FUNCTION_ENVIRONMENTS, FunctionEnvironment, WorkerEnvironment
from stepcrawl.errors import ConfigError
from stepcrawl.names import ENV_SHARDS, ENV_TABLE

#: What Powertools reads (its own settings, not ours).
POWERTOOLS = frozenset({"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"})


def declared(model: type[FunctionEnvironment]) -> tuple[set[str], set[str]]:
    """(every variable the model reads, the ones it requires)."""
    every = {field.alias or name for name, field in model.model_fields.items()}
    required = {
        field.alias or name for name, field in model.model_fields.items() if field.is_required()
    }
    return every, required


def environments(synth: Any) -> dict[str, dict[str, Any]]:
    """Function (its Powertools service name) -> its variables in the template."""
    found = {}
    for function in synth.resources("AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if "POWERTOOLS_SERVICE_NAME" in variables:
            found[str(variables["POWERTOOLS_SERVICE_NAME"])] = variables
    return found


@pytest.mark.parametrize(
    "settings", [{}, {"console": {"enabled": True}}], ids=["default", "console"]
)
def test_every_function_gets_exactly_what_its_model_reads(
    synthesize: Any, settings: dict[str, Any]
) -> None:
    found = environments(synthesize(**settings))
    expected = {"dispatch", "fetch", "parse", "sweeper", "scaler", "notify"}
    assert expected <= set(found)
    for function, variables in found.items():
        model = FUNCTION_ENVIRONMENTS[function]
        every, required = declared(model)
        names = set(variables) - POWERTOOLS
        assert names <= every, f"{function}: {sorted(names - every)} not read by {model.__name__}"
        assert required <= names, f"{function}: {sorted(required - names)} missing"


def test_a_missing_or_malformed_variable_is_named() -> None:
    with pytest.raises(ConfigError) as raised:
        WorkerEnvironment.read({ENV_TABLE: "t", ENV_SHARDS: "four"})
    message = str(raised.value)
    assert f"{ENV_SHARDS}='four'" in message
    assert "STEPCRAWL_BUCKET is not set" in message
    assert "STEPCRAWL_WINDOW is not set" in message


def test_what_the_stack_writes_reads_back_the_same() -> None:
    written = {
        "STEPCRAWL_TABLE": "t",
        "STEPCRAWL_BUCKET": "b",
        "STEPCRAWL_FETCH_QUEUE_URL": "f",
        "STEPCRAWL_PARSE_QUEUE_URL": "p",
        "STEPCRAWL_PIPELINES_DIR": "/opt/pipelines",
        "STEPCRAWL_SHARDS": "4",
        "STEPCRAWL_WINDOW": "256",
        "STEPCRAWL_FETCH_CONCURRENCY": "32",
        "STEPCRAWL_STALL_AFTER": "180.0",
        "STEPCRAWL_LOG_CHECKPOINT_ENTRIES": "4000",
        "STEPCRAWL_PARTITION_SPLIT_URLS": "1000000",
        "STEPCRAWL_PROXY_SECRETS": "a,b",
    }
    env = WorkerEnvironment.read(written)
    assert env.proxy_secrets == ("a", "b")
    assert env.shards == 4
    assert env.variables() == written
