"""The functions' environment variables, one pydantic model per function.

The stack writes each function's variables from its model (``infra/functions.py``:
``Model(...).variables()``), the function reads them back through the same model
(:meth:`FunctionEnvironment.read`), and the tests check that what the synthesized template
gives each function is exactly what its model reads (``tests/infra``). So no module reads
``os.environ`` for a variable of ours: a missing or malformed one is a :class:`ConfigError`
naming every bad variable at once. :class:`PlatformEnvironment` is what Lambda itself sets
(whether the function runs on Lambda, traced or not, and where its AWS endpoint is).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from stepcrawl.errors import ConfigError
from stepcrawl.names import (
    ENV_ALERT_CHANNELS,
    ENV_ALERT_TOPIC_ARN,
    ENV_BUCKET,
    ENV_CHROMIUM,
    ENV_CONTROL_QUEUE_URL,
    ENV_FETCH_CONCURRENCY,
    ENV_FETCH_MAPPING,
    ENV_FETCH_QUEUE_URL,
    ENV_LOG_CHECKPOINT_ENTRIES,
    ENV_PARSE_MAPPING,
    ENV_PARSE_QUEUE_URL,
    ENV_PARTITION_SPLIT_URLS,
    ENV_PIPELINES_DIR,
    ENV_PROXY_SECRETS,
    ENV_RENDER_QUEUE_URL,
    ENV_SAMPLING_RULE,
    ENV_SCALER,
    ENV_SHARDS,
    ENV_STAGE,
    ENV_STALL_AFTER,
    ENV_TABLE,
    ENV_WINDOW,
)

__all__ = [
    "FUNCTION_ENVIRONMENTS",
    "ConsoleEnvironment",
    "FunctionEnvironment",
    "NotifierEnvironment",
    "PlatformEnvironment",
    "ProxyGrants",
    "ScalerEnvironment",
    "TableEnvironment",
    "WorkerEnvironment",
    "quiet_node_deprecation",
]

#: What Powertools takes for "true" in its switches (its ``strtobool``).
_TRUE: Final = frozenset({"1", "true", "t", "yes", "y", "on"})


class FunctionEnvironment(BaseModel):
    """A function's variables: each field's alias is its variable's name."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")
    #: Which function(s) this model is the environment of (the stack's names).
    functions: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Self:
        """The function's variables from ``environ`` (the process's environment if None);
        a :class:`ConfigError` naming every missing or malformed one."""
        env = os.environ if environ is None else environ
        names = {field.alias or name for name, field in cls.model_fields.items()}
        given = {name: env[name] for name in names if env.get(name)}
        try:
            return cls.model_validate(given)
        except ValidationError as invalid:
            problems = []
            for error in invalid.errors():
                name = str(error["loc"][0])
                if error["type"] == "missing":
                    problems.append(f"{name} is not set (the stack sets it)")
                else:
                    problems.append(f"{name}={given.get(name)!r}: {error['msg']}")
            raise ConfigError(f"{cls.__name__}: " + "; ".join(problems)) from None

    def variables(self) -> dict[str, str]:
        """The variables as the stack sets them (unset optional ones left out)."""
        out: dict[str, str] = {}
        for name, field in type(self).model_fields.items():
            value: Any = getattr(self, name)
            if value is None or value == ():
                continue
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            out[field.alias or name] = text
        return out


def _names(value: object) -> object:
    """A comma-separated list of names, as the stack writes one."""
    if isinstance(value, str):
        return tuple(part for part in value.split(",") if part)
    return value


class _EngineSettings(FunctionEnvironment):
    """The engine's deployable settings (``CrawlConfig`` checks their bounds)."""

    shards: int = Field(alias=ENV_SHARDS)
    window: int = Field(alias=ENV_WINDOW)
    fetch_concurrency: int = Field(alias=ENV_FETCH_CONCURRENCY)
    stall_after: float = Field(alias=ENV_STALL_AFTER)
    log_checkpoint_entries: int = Field(alias=ENV_LOG_CHECKPOINT_ENTRIES)
    partition_split_urls: int = Field(alias=ENV_PARTITION_SPLIT_URLS)


class WorkerEnvironment(_EngineSettings):
    """dispatch, fetch, parse, sweeper and render: the engine's resources and settings."""

    functions: ClassVar[tuple[str, ...]] = ("dispatch", "fetch", "parse", "sweeper", "render")

    table: str = Field(alias=ENV_TABLE)
    bucket: str = Field(alias=ENV_BUCKET)
    fetch_queue_url: str = Field(alias=ENV_FETCH_QUEUE_URL)
    parse_queue_url: str = Field(alias=ENV_PARSE_QUEUE_URL)
    control_queue_url: str | None = Field(None, alias=ENV_CONTROL_QUEUE_URL)
    pipelines_dir: str = Field("pipelines", alias=ENV_PIPELINES_DIR)
    #: Where browser pages go (``render: browser`` deployed): the feeders' and render's.
    render_queue_url: str | None = Field(None, alias=ENV_RENDER_QUEUE_URL)
    #: Where finishing tasks publish data-quality alerts (infra/alerting.py); none: logged.
    alert_topic_arn: str | None = Field(None, alias=ENV_ALERT_TOPIC_ARN)
    #: The secrets the fetcher may read for proxies (``infra/access.py``): fetch's allow-list.
    proxy_secrets: tuple[str, ...] = Field((), alias=ENV_PROXY_SECRETS)
    #: The Chromium to render with (render's image sets it; unset: found on PATH).
    chromium: str | None = Field(None, alias=ENV_CHROMIUM)

    _split_names = field_validator("proxy_secrets", mode="before")(_names)


class ScalerEnvironment(_EngineSettings):
    """The scaler: its memory's table, the queues it measures, the mappings it sets, its
    thresholds and the sampling rule it follows the telemetry level with."""

    functions: ClassVar[tuple[str, ...]] = ("scaler",)

    table: str = Field(alias=ENV_TABLE)
    fetch_queue_url: str = Field(alias=ENV_FETCH_QUEUE_URL)
    parse_queue_url: str = Field(alias=ENV_PARSE_QUEUE_URL)
    fetch_mapping: str = Field(alias=ENV_FETCH_MAPPING)
    parse_mapping: str = Field(alias=ENV_PARSE_MAPPING)
    #: The deployed thresholds as JSON (``scaling.aws.settings_json``; unset: the defaults).
    scaler_settings: str = Field("{}", alias=ENV_SCALER)
    #: The stage's X-Ray sampling rule (unset: the scaler sets no rate).
    sampling_rule: str | None = Field(None, alias=ENV_SAMPLING_RULE)


class NotifierEnvironment(FunctionEnvironment):
    """The notifier: its delivery records' table, the channels' secret names, the stage."""

    functions: ClassVar[tuple[str, ...]] = ("notify",)

    table: str = Field(alias=ENV_TABLE)
    alert_channels: tuple[str, ...] = Field((), alias=ENV_ALERT_CHANNELS)
    stage: str | None = Field(None, alias=ENV_STAGE)

    _split_channels = field_validator("alert_channels", mode="before")(_names)


class ConsoleEnvironment(WorkerEnvironment):
    """The console's API function: the workers' environment plus the stage it shows."""

    functions: ClassVar[tuple[str, ...]] = ("console",)

    stage: str = Field(alias=ENV_STAGE)


class TableEnvironment(FunctionEnvironment):
    """The table alone: what read-only commands need inside a function's shell
    (``stepcrawl failures`` with the function's environment, ``runtime.table_from_env``)."""

    table: str = Field(alias=ENV_TABLE)


class ProxyGrants(FunctionEnvironment):
    """The secrets the fetcher may read for proxies (``infra/access.py`` sets the list on the
    fetch function); ``None``: no list set (a fetcher outside a deployed function)."""

    proxy_secrets: tuple[str, ...] | None = Field(None, alias=ENV_PROXY_SECRETS)

    _split_names = field_validator("proxy_secrets", mode="before")(_names)


class PlatformEnvironment(FunctionEnvironment):
    """What Lambda (or local mode's Lambda) sets: not ours, read through one model too."""

    function_name: str | None = Field(None, alias="AWS_LAMBDA_FUNCTION_NAME")
    task_root: str | None = Field(None, alias="LAMBDA_TASK_ROOT")
    trace_disabled: str = Field("", alias="POWERTOOLS_TRACE_DISABLED")
    endpoint_url: str | None = Field(None, alias="AWS_ENDPOINT_URL")
    region: str | None = Field(None, alias="AWS_DEFAULT_REGION")

    @property
    def on_lambda(self) -> bool:
        """Whether this is a Lambda sandbox (its task root is set)."""
        return bool(self.task_root)

    @property
    def traced_by_config(self) -> bool:
        """Whether Powertools' switch leaves tracing on."""
        return self.trace_disabled.lower() not in _TRUE

    @property
    def tracing(self) -> bool:
        """Whether Powertools' Tracer records: in a Lambda function, unless switched off."""
        return self.function_name is not None and self.traced_by_config


def quiet_node_deprecation() -> None:
    """jsii (the runtime of the CDK app ``stepcrawl run`` synthesizes) warns on every synth
    once Node 20 nears its end of life; it reads this switch from the process environment."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


#: Each function's model, by the stack's function name.
FUNCTION_ENVIRONMENTS: Final[Mapping[str, type[FunctionEnvironment]]] = {
    function: model
    for model in (WorkerEnvironment, ScalerEnvironment, NotifierEnvironment, ConsoleEnvironment)
    for function in model.functions
}
