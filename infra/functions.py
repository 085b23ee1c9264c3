"""The Lambda functions: shared defaults (:class:`StepcrawlFunction`) and the workers.

Every function: Python 3.12 on arm64, ``handler.handler`` from ``functions/<name>/``, the
library and pipelines layers, JSON logs into its own log group with a retention, active X-Ray
tracing, Powertools settings, and the stepcrawl environment (names from
:mod:`stepcrawl.names`, never retyped). Each has its own role that starts empty: its log
group's write grant and, elsewhere (:mod:`infra.access`), the grants its work needs.

dispatch, fetch and parse each consume one queue through an event-source mapping with
partial batch responses and a starting ``MaximumConcurrency`` (context), which the scaler sets
from then on for fetch and parse. The sweeper and the scaler run every minute from EventBridge
Scheduler: the sweeper feeds starved shards, heartbeats running crawl tasks and answers a token
whose finisher died, so a crawl cannot hang on a lost message; the scaler sets fetch's and
parse's concurrency and the feed window (docs/scaling.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

from infra.config import REPO_ROOT, StackConfig
from infra.queues import WorkQueue, WorkQueues
from infra.retention import retention_days
from infra.storage import Storage
from infra.tracing import sampling_rule_name
from stepcrawl.environment import FUNCTION_ENVIRONMENTS
from stepcrawl.functions_spec import FUNCTION_MEMORY_MB
from stepcrawl.names import (
    ENV_ALERT_CHANNELS,
    ENV_BUCKET,
    ENV_CONTROL_QUEUE_URL,
    ENV_FETCH_MAPPING,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_MAPPING,
    ENV_PARSE_QUEUE_URL,
    ENV_PIPELINES_DIR,
    ENV_SAMPLING_RULE,
    ENV_SCALER,
    ENV_STAGE,
    ENV_TABLE,
    METRICS_NAMESPACE,
)
from stepcrawl.scaling.aws import settings_json
from stepcrawl.scaling.scaler import SCALER_FUNCTION

__all__ = [
    "DISPATCH",
    "FETCH",
    "FUNCTIONS_DIR",
    "NOTIFY",
    "PARSE",
    "SCALER",
    "SCALE_RATE",
    "SWEEPER",
    "SWEEP_RATE",
    "StepcrawlFunction",
    "WorkerSpec",
    "Workers",
]

FUNCTIONS_DIR: Final = REPO_ROOT / "functions"


@dataclass(frozen=True)
class WorkerSpec:
    """How one worker runs and consumes its queue."""

    name: str
    timeout: Duration
    memory_mb: int
    batch_size: int = 0  # 0: not fed by a queue
    batching_window: Duration | None = None


#: Control queue -> one task start per invocation; ETL stages run here, hence the timeout.
DISPATCH: Final = WorkerSpec(
    "dispatch", Duration.minutes(5), FUNCTION_MEMORY_MB["dispatch"], batch_size=1
)
#: Fetch queue -> up to 20 URLs fetched concurrently (30 s per page at most, robots first).
FETCH: Final = WorkerSpec(
    "fetch",
    Duration.minutes(2),
    FUNCTION_MEMORY_MB["fetch"],
    batch_size=20,
    batching_window=Duration.seconds(1),
)
#: Parse queue -> 5 bundles of pages; CPU-bound, so more memory (= more CPU).
PARSE: Final = WorkerSpec("parse", Duration.minutes(1), FUNCTION_MEMORY_MB["parse"], batch_size=5)
#: Every running crawl task once per minute; a sweep never needs longer than its period.
SWEEPER: Final = WorkerSpec("sweeper", Duration.minutes(1), FUNCTION_MEMORY_MB["sweeper"])
SWEEP_RATE: Final = "rate(1 minute)"
#: The scaler decides once a minute (its settings' ``tick``): Lambda's own metrics and the
#: functions' EMF metrics arrive at one-minute resolution.
SCALER: Final = WorkerSpec(
    SCALER_FUNCTION, Duration.minutes(1), FUNCTION_MEMORY_MB[SCALER_FUNCTION]
)
SCALE_RATE: Final = "rate(1 minute)"
#: Alarm changes and failed runs (SNS) -> chat messages; a post may retry for up to a minute.
NOTIFY: Final = WorkerSpec("notify", Duration.seconds(90), FUNCTION_MEMORY_MB["notify"])


class StepcrawlFunction(Construct):
    """A worker function with stepcrawl's shared defaults; ``function`` is the Lambda."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: WorkerSpec,
        config: StackConfig,
        environment: dict[str, str],
        layers: list[lambda_.ILayerVersion],
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention_days(config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        # An own role instead of the default one with AWSLambdaBasicExecutionRole (logs:* on
        # every log group): this one may write to its own log group and nothing else yet.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"stepcrawl {spec.name} function",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            handler="handler.handler",
            code=lambda_.Code.from_asset(
                str(FUNCTIONS_DIR / spec.name), exclude=["__pycache__", "*.pyc"]
            ),
            layers=layers,
            role=self.role,
            timeout=spec.timeout,
            memory_size=spec.memory_mb,
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            log_group=self.log_group,
            environment={
                **environment,
                "POWERTOOLS_SERVICE_NAME": spec.name,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            },
            description=f"stepcrawl {spec.name} ({config.stage})",
        )


class Workers(Construct):
    """dispatch, fetch and parse, each fed by its queue, the scheduled sweeper and scaler, and
    the notifier (subscribed to the alert topic by :mod:`infra.alerting`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        storage: Storage,
        queues: WorkQueues,
        layers: list[lambda_.ILayerVersion],
        pipelines_dir: str,
        schedule_group: scheduler.IScheduleGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        environment = {
            ENV_TABLE: storage.table.table_name,
            ENV_BUCKET: storage.bucket.bucket_name,
            ENV_FETCH_QUEUE_URL: queues.fetch.queue.queue_url,
            ENV_PARSE_QUEUE_URL: queues.parse.queue.queue_url,
            ENV_CONTROL_QUEUE_URL: queues.control.queue.queue_url,
            ENV_PIPELINES_DIR: pipelines_dir,
            **config.engine.to_env(),
        }

        def function(
            spec: WorkerSpec, variables: dict[str, str] | None = None, *, shared: bool = True
        ) -> lambda_.Function:
            """The function ``spec`` with the workers' variables (``shared``) and its own."""
            # Through the function's environment model (stepcrawl.environment), which the
            # function reads them back with: a variable it does not declare fails the synth.
            model = FUNCTION_ENVIRONMENTS[spec.name]
            given = {**(environment if shared else {}), **(variables or {})}
            return StepcrawlFunction(
                self,
                spec.name.capitalize(),
                spec=spec,
                config=config,
                environment=model.model_validate(given).variables(),
                layers=layers,
            ).function

        def every(
            spec: WorkerSpec, target: lambda_.Function, rate: str, description: str
        ) -> scheduler.Schedule:
            """``target`` on ``rate``, never retried (the next run is the retry)."""
            target.configure_async_invoke(retry_attempts=0)
            return scheduler.Schedule(
                self,
                f"{spec.name.capitalize()}Schedule",
                schedule_name=spec.name,
                schedule_group=schedule_group,
                description=description,
                schedule=scheduler.ScheduleExpression.expression(rate),
                target=targets.LambdaInvoke(
                    target, retry_attempts=0, max_event_age=Duration.minutes(1)
                ),
            )

        def worker(
            spec: WorkerSpec, queue: WorkQueue, max_concurrency: int
        ) -> tuple[lambda_.Function, sources.SqsEventSource]:
            made = function(spec)
            source = sources.SqsEventSource(
                queue.queue,
                batch_size=spec.batch_size,
                max_batching_window=spec.batching_window,
                max_concurrency=max_concurrency,
                report_batch_item_failures=True,
            )
            # Also grants the function sqs:ReceiveMessage/DeleteMessage/... on this queue.
            made.add_event_source(source)
            return made, source

        self.dispatch, _ = worker(DISPATCH, queues.control, config.dispatch_max_concurrency)
        self.fetch, self.fetch_mapping = worker(FETCH, queues.fetch, config.fetch_max_concurrency)
        self.parse, self.parse_mapping = worker(PARSE, queues.parse, config.parse_max_concurrency)

        # A failed or late sweep is not retried: the next one is a minute away.
        self.sweeper = function(SWEEPER)
        self.sweep_schedule = every(
            SWEEPER,
            self.sweeper,
            SWEEP_RATE,
            "stepcrawl sweeper: feed starved shards, heartbeat and finish crawls",
        )

        self.scaler = function(
            SCALER,
            {
                ENV_FETCH_MAPPING: self.fetch_mapping.event_source_mapping_id,
                ENV_PARSE_MAPPING: self.parse_mapping.event_source_mapping_id,
                ENV_SCALER: settings_json(config.scaler, config.shedding),
                ENV_SAMPLING_RULE: sampling_rule_name(config.prefix),
            },
        )
        # The channels' secrets by name only (docs/alerts.md); Lambda retries a failed
        # delivery twice, and the notifier's records keep it from posting twice.
        self.notify = function(
            NOTIFY,
            {
                ENV_TABLE: storage.table.table_name,
                ENV_ALERT_CHANNELS: ",".join(config.alert_webhook_secrets),
                ENV_STAGE: config.stage,
            },
            shared=False,  # its table and its channels: nothing of the engine's
        )
        # A late tick is worthless: the next one, a minute away, measures afresh.
        self.scale_schedule = every(
            SCALER,
            self.scaler,
            SCALE_RATE,
            "stepcrawl scaler: fetch and parse concurrency and the feed window",
        )
