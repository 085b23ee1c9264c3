"""The scaler's :class:`~stepcrawl.scaling.signals.Platform` on AWS APIs (boto3 clients).

Reads the queues' attributes (SQS), the functions' metrics (CloudWatch
``GetMetricStatistics``) and the mappings (Lambda ``GetEventSourceMapping``), and sets
``MaximumConcurrency`` with ``UpdateEventSourceMapping``; while telemetry is shed it lowers
the stage's X-Ray sampling rule (``UpdateSamplingRule``, :class:`XRaySampling`). The same code
runs locally against the emulator, whose CloudWatch receives the functions' EMF lines through
:class:`~stepcrawl.emulator.metrics.EmfForwarder` (and which has no sampling rules: the rate is
skipped there, with a logged reason, while the log levels still follow the level).

``STEPCRAWL_SCALER`` holds :class:`~stepcrawl.scaling.ScalerSettings`' fields and, under
``shedding``, :class:`~stepcrawl.telemetry.shedding.SheddingSettings` (:func:`parse_settings`).

AWS errors leave as :mod:`stepcrawl.errors` classes
(:func:`~stepcrawl.storage.aws.errors.map_client_errors`, as the storage backends' do): a
throttled read fails the tick as a ``RetryableError``, a missing queue or mapping as a
``ConfigError``. Only the sampling rule never raises: the tick's scaling matters more.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field

from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.environment import ScalerEnvironment
from stepcrawl.errors import ConfigError, StepcrawlError
from stepcrawl.names import (
    ENV_SAMPLING_RULE,
    ENV_SCALER,
    METRICS_NAMESPACE,
)
from stepcrawl.scaling.policy import FETCH, PARSE, ScalerSettings
from stepcrawl.scaling.scaler import Emit, SamplingOutcome, ScalerRun, run_scaler
from stepcrawl.scaling.signals import QueueStats
from stepcrawl.storage.aws import DynamoTable
from stepcrawl.storage.aws.errors import error_code, map_client_errors
from stepcrawl.telemetry.shedding import SHEDDING_KEY, SheddingSettings

__all__ = [
    "AwsPlatform",
    "ScalerEvent",
    "XRaySampling",
    "parse_settings",
    "scale_from_env",
    "settings_from_env",
    "settings_json",
    "shedding_from_env",
]

logger = logging.getLogger("stepcrawl.scaler")

_QUEUE_ATTRIBUTES: Final = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


class AwsPlatform:
    """``queue_urls`` and ``mappings`` (event source mapping UUIDs) by function name."""

    def __init__(
        self,
        *,
        sqs: Any,
        cloudwatch: Any,
        lambda_client: Any,
        queue_urls: Mapping[str, str],
        mappings: Mapping[str, str],
    ) -> None:
        self.sqs, self.cloudwatch, self.lambda_client = sqs, cloudwatch, lambda_client
        self.queue_urls, self.mappings = queue_urls, mappings

    def queue(self, function: str) -> QueueStats:
        url = self.queue_urls[function]
        with map_client_errors(url):
            raw = self.sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=list(_QUEUE_ATTRIBUTES)
            )
        visible, in_flight, delayed = (int(raw["Attributes"].get(n, 0)) for n in _QUEUE_ATTRIBUTES)
        return QueueStats(visible, in_flight, delayed, oldest_age=self._oldest_age(url))

    def _oldest_age(self, url: str) -> float:
        now = datetime.now(UTC).timestamp()
        with map_client_errors(f"AWS/SQS ApproximateAgeOfOldestMessage of {url}"):
            points = self.cloudwatch.get_metric_statistics(
                Namespace="AWS/SQS",
                MetricName="ApproximateAgeOfOldestMessage",
                Dimensions=[{"Name": "QueueName", "Value": url.rsplit("/", 1)[-1]}],
                StartTime=_when(now - 300),
                EndTime=_when(now),
                Period=60,
                Statistics=["Maximum"],
            )["Datapoints"]
        latest = max(points, key=lambda p: p["Timestamp"], default=None)
        return float(latest["Maximum"]) if latest else 0.0

    def metric_sum(self, name: str, service: str, start: float, end: float) -> float:
        # The series of the function alone (``service``), all pipelines and tasks together:
        # every catalogue metric is also printed with that dimension set.
        period = max(60, 60 * math.ceil((end - start) / 60))
        with map_client_errors(f"{METRICS_NAMESPACE} {name} of {service}"):
            points = self.cloudwatch.get_metric_statistics(
                Namespace=METRICS_NAMESPACE,
                MetricName=name,
                Dimensions=[{"Name": "service", "Value": service}],
                StartTime=_when(start),
                EndTime=_when(end),
                Period=period,
                Statistics=["Sum"],
            )["Datapoints"]
        return sum(float(p["Sum"]) for p in points)

    def _mapping(self, function: str) -> dict[str, Any]:
        uuid = self.mappings[function]
        with map_client_errors(f"event source mapping {uuid} of {function}"):
            mapping: dict[str, Any] = self.lambda_client.get_event_source_mapping(UUID=uuid)
        return mapping

    def concurrency(self, function: str) -> int:
        scaling = self._mapping(function).get("ScalingConfig") or {}
        return int(scaling.get("MaximumConcurrency", 2))

    def batch_size(self, function: str) -> int:
        return int(self._mapping(function).get("BatchSize", 10))

    def set_concurrency(self, function: str, value: int) -> None:
        uuid = self.mappings[function]
        with map_client_errors(f"event source mapping {uuid} of {function}"):
            self.lambda_client.update_event_source_mapping(
                UUID=uuid, ScalingConfig={"MaximumConcurrency": value}
            )


#: Error codes of an endpoint that has no sampling rules at all (moto answers 404 "Not yet
#: implemented"): setting the rate there is skipped, not retried every tick.
_UNSUPPORTED: Final = frozenset({"404", "NotImplemented", "UnknownOperationException"})


def _unsupported(error: ClientError) -> bool:
    """An endpoint without sampling rules at all (not a failure to retry)."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return error_code(error) in _UNSUPPORTED or status == 404


class XRaySampling:
    """The stage's X-Ray sampling rule (``rule``: its name or ARN; ``None``: no rule, so the
    rate is skipped and only the log levels follow the telemetry level). ``told``: the
    reasons already logged (a container's, kept across its ticks): "skipped" once, not once
    a tick."""

    def __init__(self, xray: Any, rule: str | None, *, told: set[str] | None = None) -> None:
        self.xray, self.rule = xray, rule
        self.told = set() if told is None else told

    def _tell_once(self, reason: str) -> None:
        if reason not in self.told:
            self.told.add(reason)
            logger.info("sampling rule not set: %s", reason)

    def set_rate(self, rate: float) -> SamplingOutcome:
        if not self.rule:
            self._tell_once(f"{ENV_SAMPLING_RULE} is not set")
            return "skipped"
        try:
            with map_client_errors(f"sampling rule {self.rule}", answers=_unsupported) as call:
                self.xray.update_sampling_rule(
                    SamplingRuleUpdate={"RuleName": self.rule, "FixedRate": rate}
                )
        except (StepcrawlError, BotoCoreError) as error:
            # Mapped AWS errors, and botocore's errors the mapping leaves as they are (a stub,
            # a bug): never raised, the rate is tried again on the next tick.
            logger.warning("sampling rule %s not set to %s: %s", self.rule, rate, error)
            return "failed"
        if call.answered is not None:
            unsupported = call.answered
            self._tell_once(
                f"the endpoint has no X-Ray sampling rules ({error_code(unsupported)}: "
                f"{unsupported})"
            )
            return "skipped"
        logger.info("sampling rule %s set to FixedRate %s", self.rule, rate)
        return "set"


class ScalerEvent(BaseModel):
    """The scheduled event (``{}`` from EventBridge Scheduler). ``tick`` overrides the
    settings' tick: local mode runs the scaler on a faster clock than a minute."""

    model_config = ConfigDict(extra="ignore")

    tick: float | None = Field(None, gt=0, le=3600)


class _Shedding(BaseModel):
    """Validates the ``shedding`` key, so that an error's location starts with it."""

    model_config = ConfigDict(extra="forbid")

    shedding: SheddingSettings = Field(default_factory=SheddingSettings)


def parse_settings(data: Mapping[str, Any]) -> tuple[ScalerSettings, SheddingSettings]:
    """The scaler settings object (the stack's ``scaler`` context, ``STEPCRAWL_SCALER``):
    :class:`ScalerSettings`' fields, and :class:`SheddingSettings` under ``shedding``.

    Raises pydantic's ``ValidationError``; a shedding field's location is
    ``("shedding", <field>)``, so that a synth error names it as ``scaler.shedding.<field>``.
    """
    rest = {key: value for key, value in data.items() if key != SHEDDING_KEY}
    scaler = ScalerSettings.model_validate(rest)
    shedding = _Shedding.model_validate({SHEDDING_KEY: data.get(SHEDDING_KEY) or {}}).shedding
    return scaler, shedding


def settings_json(scaler: ScalerSettings, shedding: SheddingSettings | None = None) -> str:
    """What the stack sets ``STEPCRAWL_SCALER`` to (:func:`parse_settings` reads it back)."""
    data = scaler.model_dump(mode="json")
    data[SHEDDING_KEY] = (shedding or SheddingSettings()).model_dump(mode="json")
    return json.dumps(data, sort_keys=True)


def _settings(environ: Mapping[str, str]) -> tuple[ScalerSettings, SheddingSettings]:
    raw = environ.get(ENV_SCALER) or "{}"
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ConfigError(f"{ENV_SCALER} must hold a JSON object, not {raw!r}")
    return parse_settings(data)


def settings_from_env(environ: Mapping[str, str], tick: float | None = None) -> ScalerSettings:
    """The deployed thresholds (``ENV_SCALER``, JSON; unset: the defaults); with ``tick``,
    every duration scaled with it, so that a faster clock keeps the same policy."""
    settings, _ = _settings(environ)
    if tick is None or tick == settings.tick:
        return settings
    scale = tick / settings.tick
    durations = (
        "cooldown_up",
        "cooldown_down",
        "cooldown_throttled",
        "throttle_hold",
        "clock_slack",
    )
    update: dict[str, Any] = {"tick": tick}
    update.update({name: getattr(settings, name) * scale for name in durations})
    return ScalerSettings.model_validate({**settings.model_dump(), **update})


def shedding_from_env(environ: Mapping[str, str], tick: float | None = None) -> SheddingSettings:
    """The deployed shedding thresholds, their hold times scaled as :func:`settings_from_env`
    scales the scaler's durations (``shed_after`` 30 s becomes 1.5 s at a 3 s tick)."""
    settings, shedding = _settings(environ)
    if tick is None or tick == settings.tick:
        return shedding
    return shedding.scaled(tick / settings.tick)


def scale_from_env(
    env: ScalerEnvironment,
    event: ScalerEvent,
    *,
    now: float,
    emit: Emit | None = None,
    told: set[str] | None = None,
) -> ScalerRun:
    """One tick of the scaler with the stack's resources (``env``, read by the handler:
    the handler's one call); ``told`` is the container's record of what its sampling rule
    already logged once."""
    platform = AwsPlatform(
        sqs=boto3.client("sqs"),
        cloudwatch=boto3.client("cloudwatch"),
        lambda_client=boto3.client("lambda"),
        queue_urls={FETCH: env.fetch_queue_url, PARSE: env.parse_queue_url},
        mappings={FETCH: env.fetch_mapping, PARSE: env.parse_mapping},
    )
    settings = {ENV_SCALER: env.scaler_settings}
    return run_scaler(
        DynamoTable(env.table),
        platform,
        settings_from_env(settings, event.tick),
        now=now,
        deployed_window=CrawlConfig.from_env(env.variables()).window,
        fetch_batch_size=platform.batch_size(FETCH),
        emit=emit,
        shedding=shedding_from_env(settings, event.tick),
        sampling=XRaySampling(boto3.client("xray"), env.sampling_rule, told=told),
    )
