"""Names shared by the library, the CDK app, local mode and tests, so they cannot drift.

Placeholders are ``${Name}`` tokens in a compiled state-machine definition; CDK fills them with
``DefinitionSubstitutions`` and local mode with :func:`stepcrawl.compiler.substitute`.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CANCELLED_ERROR",
    "CONTROL_MESSAGE_VERSION",
    "DATA_QUALITY_ERROR",
    "DATA_QUALITY_KIND",
    "ENV_ALERT_CHANNELS",
    "ENV_ALERT_TOPIC_ARN",
    "ENV_BUCKET",
    "ENV_CHROMIUM",
    "ENV_CONTROL_QUEUE_URL",
    "ENV_FETCH_CONCURRENCY",
    "ENV_FETCH_MAPPING",
    "ENV_FETCH_QUEUE_URL",
    "ENV_LOCAL_SECRETS",
    "ENV_LOG_CHECKPOINT_ENTRIES",
    "ENV_PARSE_MAPPING",
    "ENV_PARSE_QUEUE_URL",
    "ENV_PARTITION_SPLIT_URLS",
    "ENV_PIPELINES_DIR",
    "ENV_PROXY_SECRETS",
    "ENV_RENDER_QUEUE_URL",
    "ENV_SAMPLING_RULE",
    "ENV_SCALER",
    "ENV_SHARDS",
    "ENV_STAGE",
    "ENV_STALL_AFTER",
    "ENV_TABLE",
    "ENV_WINDOW",
    "ERROR_PREFIX",
    "MAX_RECEIVE_COUNT",
    "METRICS_NAMESPACE",
    "METRIC_BACKLOG_CHUNKS_DRAINED",
    "METRIC_BREAKER_OPEN_HOSTS",
    "METRIC_BREAKER_TRANSITIONS",
    "METRIC_BUNDLES",
    "METRIC_CONCURRENCY",
    "METRIC_COST_MICRO_USD",
    "METRIC_FEED_WINDOW",
    "METRIC_FETCH_DEFERRED",
    "METRIC_FETCH_ERRORS",
    "METRIC_FETCH_LATENCY",
    "METRIC_FETCH_RETRIES",
    "METRIC_FETCH_THROTTLED",
    "METRIC_FRONTIER_BACKLOG",
    "METRIC_HEARTBEATS",
    "METRIC_ITEMS",
    "METRIC_JSONLD_SKIPPED",
    "METRIC_LINKS_ADMITTED",
    "METRIC_LINKS_DISCOVERED",
    "METRIC_MESSAGES_FAILED",
    "METRIC_PAGES_BY_STATUS",
    "METRIC_PAGES_BY_STATUS_CLASS",
    "METRIC_PAGES_FAILED",
    "METRIC_PAGES_FETCHED",
    "METRIC_PAGES_RECORDED",
    "METRIC_PAGES_UNCHANGED",
    "METRIC_PARSE_LATENCY",
    "METRIC_RUNNING_TASKS",
    "METRIC_SCALER_DECISIONS",
    "METRIC_SWEEP_ERRORS",
    "METRIC_TELEMETRY_SHED",
    "METRIC_URLS_FED",
    "METRIC_URLS_STALLED",
    "OUTPUT_BUCKET_NAME",
    "OUTPUT_CONSOLE_URL",
    "OUTPUT_CONSOLE_USER_POOL_ID",
    "OUTPUT_CONTROL_DLQ_URL",
    "OUTPUT_CONTROL_QUEUE_URL",
    "OUTPUT_FETCH_DLQ_URL",
    "OUTPUT_FETCH_QUEUE_URL",
    "OUTPUT_PARSE_DLQ_URL",
    "OUTPUT_PARSE_QUEUE_URL",
    "OUTPUT_RENDER_QUEUE_URL",
    "OUTPUT_STATE_MACHINE_ARN_PREFIX",
    "OUTPUT_TABLE_NAME",
    "PIPELINE_ALARM_SUFFIXES",
    "PLACEHOLDERS",
    "PLACEHOLDER_CONTROL_QUEUE_URL",
    "PLACEHOLDER_TABLE_NAME",
    "REPLACED_ERROR",
    "STALL_KIND",
    "TASK_FAILED_ERROR",
    "TOO_MANY_FAILURES_ERROR",
    "error_name",
]

PLACEHOLDER_CONTROL_QUEUE_URL: Final = "ControlQueueUrl"
PLACEHOLDER_TABLE_NAME: Final = "TableName"
PLACEHOLDERS: Final = (PLACEHOLDER_CONTROL_QUEUE_URL, PLACEHOLDER_TABLE_NAME)

#: Receives of a message before SQS moves it to its queue's dead-letter queue (the stack's
#: redrive policy); a fetch message failing this often is recorded failed before that.
MAX_RECEIVE_COUNT: Final = 5

#: Schema version of the message a task state sends to the control queue.
CONTROL_MESSAGE_VERSION: Final = 1

#: Error name a run fails with when one of its tasks failed (the cause names the task).
TASK_FAILED_ERROR: Final = "Stepcrawl.TaskFailed"
#: Prefix of every error name stepcrawl gives Step Functions (what a ``Catch`` can match).
ERROR_PREFIX: Final = "Stepcrawl."
#: Error of a run stopped by ``stepcrawl cancel``.
CANCELLED_ERROR: Final = "Stepcrawl.Cancelled"
#: Error of a crawl task whose failed pages exceed its ``max_error_ratio``.
TOO_MANY_FAILURES_ERROR: Final = "Stepcrawl.TooManyFailures"
#: Error of a crawl task a ``fail`` data-quality monitor failed (docs/pipelines.md).
DATA_QUALITY_ERROR: Final = "Stepcrawl.DataQuality"
#: ``kind`` of a data-quality alert on the alert topic (alerts/events.py, QualityChange).
DATA_QUALITY_KIND: Final = "stepcrawl.data_quality"
#: ``kind`` of a stalled crawl task's alert on the alert topic (crawl/stalls.py, StallChange).
STALL_KIND: Final = "stepcrawl.stall"
#: Error of a run stopped by a newer one of its pipeline (``overlap: replace``).
REPLACED_ERROR: Final = "Stepcrawl.Replaced"


def error_name(error: BaseException) -> str:
    """The error name a task fails with for ``error``: ``Stepcrawl.<its class>``."""
    return f"{ERROR_PREFIX}{type(error).__name__}"


# Environment of the Lambda functions (set by the CDK stack and by local mode).
ENV_TABLE: Final = "STEPCRAWL_TABLE"
ENV_BUCKET: Final = "STEPCRAWL_BUCKET"
ENV_FETCH_QUEUE_URL: Final = "STEPCRAWL_FETCH_QUEUE_URL"
#: Where a task admitted outside dispatch (a finished task gave its slot back) is handed to
#: dispatch, which has the timeout an ETL stage needs.
ENV_CONTROL_QUEUE_URL: Final = "STEPCRAWL_CONTROL_QUEUE_URL"
ENV_PARSE_QUEUE_URL: Final = "STEPCRAWL_PARSE_QUEUE_URL"
ENV_PIPELINES_DIR: Final = "STEPCRAWL_PIPELINES_DIR"
ENV_SHARDS: Final = "STEPCRAWL_SHARDS"
ENV_WINDOW: Final = "STEPCRAWL_WINDOW"
ENV_FETCH_CONCURRENCY: Final = "STEPCRAWL_FETCH_CONCURRENCY"
ENV_STALL_AFTER: Final = "STEPCRAWL_STALL_AFTER"
ENV_LOG_CHECKPOINT_ENTRIES: Final = "STEPCRAWL_LOG_CHECKPOINT_ENTRIES"
ENV_PARTITION_SPLIT_URLS: Final = "STEPCRAWL_PARTITION_SPLIT_URLS"
#: The scaler's thresholds (:class:`stepcrawl.scaling.ScalerSettings` as JSON).
ENV_SCALER: Final = "STEPCRAWL_SCALER"
#: The notifier's channels: names of Secrets Manager secrets (or ``ssm:<parameter>``), never
#: the webhook URLs themselves (docs/alerts.md).
ENV_ALERT_CHANNELS: Final = "STEPCRAWL_ALERT_CHANNELS"
#: The alert topic's ARN: where a finishing task publishes its data-quality alerts.
ENV_ALERT_TOPIC_ARN: Final = "STEPCRAWL_ALERT_TOPIC_ARN"
#: The deployment's stage (state machines are ``stepcrawl-<stage>-<pipeline>``).
ENV_STAGE: Final = "STEPCRAWL_STAGE"
#: The fetch function's proxy secrets (comma-separated names or ARNs, as the deployed
#: pipelines' ``proxy.secret`` name them): the only secrets it is granted and may read.
ENV_PROXY_SECRETS: Final = "STEPCRAWL_PROXY_SECRETS"
#: Local cloud only: a JSON file ``{secret name: value}`` stored in the emulator's Secrets
#: Manager when the cloud starts (``stepcrawl run`` / ``serve``; docs/local.md).
ENV_LOCAL_SECRETS: Final = "STEPCRAWL_LOCAL_SECRETS"
#: The event source mappings the scaler sets (their UUIDs).
ENV_FETCH_MAPPING: Final = "STEPCRAWL_FETCH_MAPPING"
ENV_PARSE_MAPPING: Final = "STEPCRAWL_PARSE_MAPPING"
#: The name of the stage's X-Ray sampling rule (its runs' traces), whose rate the scaler
#: lowers while telemetry is shed (:mod:`stepcrawl.telemetry.shedding`); unset: left alone.
ENV_SAMPLING_RULE: Final = "STEPCRAWL_SAMPLING_RULE"
#: The render queue (``render: browser`` pages; crawl/render.py): the feeders send those
#: pages there, the render function consumes it. Unset: no render function is deployed.
ENV_RENDER_QUEUE_URL: Final = "STEPCRAWL_RENDER_QUEUE_URL"
#: The Chromium executable the render function drives (default: the first of chromium,
#: chromium-browser, google-chrome on PATH; fetch/browser.py).
ENV_CHROMIUM: Final = "STEPCRAWL_CHROMIUM"

# CloudWatch metrics (EMF through Powertools).
METRICS_NAMESPACE: Final = "stepcrawl"
METRIC_PAGES_FETCHED: Final = "PagesFetched"
METRIC_PAGES_FAILED: Final = "PagesFailed"
METRIC_PAGES_RECORDED: Final = "PagesRecorded"
#: Pages of incremental tasks recorded unchanged (a 304, or the same items' fingerprint).
METRIC_PAGES_UNCHANGED: Final = "PagesUnchanged"
METRIC_ITEMS: Final = "Items"
#: JSON-LD scripts of recorded pages skipped because they are not JSON (structured data).
METRIC_JSONLD_SKIPPED: Final = "JsonLdSkipped"
METRIC_BUNDLES: Final = "ParseBundles"
METRIC_BREAKER_TRANSITIONS: Final = "BreakerTransitions"
#: Fetches answered 429/503 or with Retry-After, and fetches that failed transiently (5xx,
#: timeouts, connection errors): the target's health, which the scaler backs off from.
METRIC_FETCH_THROTTLED: Final = "FetchThrottled"
METRIC_FETCH_ERRORS: Final = "FetchErrors"
#: The scaler's output per function (dimension ``function``): the MaximumConcurrency it set,
#: its decisions (dimension ``direction``: up, down, hold) and the feed window.
METRIC_CONCURRENCY: Final = "MaximumConcurrency"
METRIC_SCALER_DECISIONS: Final = "ScalerDecisions"
METRIC_FEED_WINDOW: Final = "FeedWindow"
#: 1 while the functions' telemetry is shed (WARNING logs, reduced trace rate), else 0.
METRIC_TELEMETRY_SHED: Final = "TelemetryShed"
#: The rest of the catalogue (:mod:`stepcrawl.telemetry.catalogue` says what each one means,
#: its unit, its dimensions and who emits it; docs/operations.md lists them).
METRIC_FETCH_LATENCY: Final = "FetchLatency"
METRIC_PAGES_BY_STATUS_CLASS: Final = "PagesByStatusClass"
METRIC_PAGES_BY_STATUS: Final = "PagesByStatus"
METRIC_FETCH_RETRIES: Final = "FetchRetries"
METRIC_FETCH_DEFERRED: Final = "FetchDeferred"
METRIC_BREAKER_OPEN_HOSTS: Final = "BreakerOpenHosts"
METRIC_MESSAGES_FAILED: Final = "MessagesFailed"
METRIC_LINKS_DISCOVERED: Final = "LinksDiscovered"
METRIC_LINKS_ADMITTED: Final = "LinksAdmitted"
METRIC_PARSE_LATENCY: Final = "ParseLatency"
METRIC_COST_MICRO_USD: Final = "CostMicroUsd"
METRIC_URLS_FED: Final = "UrlsFed"
METRIC_BACKLOG_CHUNKS_DRAINED: Final = "BacklogChunksDrained"
METRIC_FRONTIER_BACKLOG: Final = "FrontierBacklog"
METRIC_RUNNING_TASKS: Final = "RunningTasks"
METRIC_URLS_STALLED: Final = "UrlsStalled"
METRIC_HEARTBEATS: Final = "Heartbeats"
METRIC_SWEEP_ERRORS: Final = "SweepErrors"

#: The alarms of one pipeline are named ``stepcrawl-<stage>-<pipeline><suffix>`` (infra/alarms.py):
#: the notifier reads the pipeline back from the name, since a composite alarm (the SLO burns)
#: carries no metric to read it from.
PIPELINE_ALARM_SUFFIXES: Final = (
    "-slo-fast-burn",
    "-slo-slow-burn",
    "-slo-fast-long",
    "-slo-fast-short",
    "-slo-slow-long",
    "-slo-slow-short",
    "-stale",
)

# CloudFormation outputs of the stack: infra/stack.py declares them, every client of a
# deployment (stepcrawl.deployment, local mode's report) finds the resources by them.
OUTPUT_TABLE_NAME: Final = "TableName"
OUTPUT_BUCKET_NAME: Final = "BucketName"
OUTPUT_CONTROL_QUEUE_URL: Final = "ControlQueueUrl"
OUTPUT_CONTROL_DLQ_URL: Final = "ControlDeadLetterQueueUrl"
OUTPUT_FETCH_QUEUE_URL: Final = "FetchQueueUrl"
#: Only where a deployed pipeline renders pages (render: browser; infra/render.py).
OUTPUT_RENDER_QUEUE_URL: Final = "RenderQueueUrl"
OUTPUT_FETCH_DLQ_URL: Final = "FetchDeadLetterQueueUrl"
OUTPUT_PARSE_QUEUE_URL: Final = "ParseQueueUrl"
OUTPUT_PARSE_DLQ_URL: Final = "ParseDeadLetterQueueUrl"
#: The console on AWS (the ``console`` context flag): its address and its sign-in's user pool.
OUTPUT_CONSOLE_URL: Final = "ConsoleUrl"
OUTPUT_CONSOLE_USER_POOL_ID: Final = "ConsoleUserPoolId"
#: One output per pipeline: this prefix + the pipeline's construct name (``my-shop`` ->
#: ``StateMachineArnMyShop``); its value is the state machine's ARN.
OUTPUT_STATE_MACHINE_ARN_PREFIX: Final = "StateMachineArn"
