"""Names shared by the library, the CDK app, local mode and tests, so they cannot drift.

Placeholders are ``${Name}`` tokens in a compiled state-machine definition; CDK fills them with
``DefinitionSubstitutions`` and local mode with :func:`stepcrawl.compiler.substitute`.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONTROL_MESSAGE_VERSION",
    "ENV_BUCKET",
    "ENV_FETCH_CONCURRENCY",
    "ENV_FETCH_QUEUE_URL",
    "ENV_PARSE_QUEUE_URL",
    "ENV_PIPELINES_DIR",
    "ENV_SHARDS",
    "ENV_TABLE",
    "ENV_WINDOW",
    "METRICS_NAMESPACE",
    "METRIC_BREAKER_TRANSITIONS",
    "METRIC_BUNDLES",
    "METRIC_ITEMS",
    "METRIC_PAGES_FAILED",
    "METRIC_PAGES_FETCHED",
    "METRIC_PAGES_RECORDED",
    "PLACEHOLDERS",
    "PLACEHOLDER_CONTROL_QUEUE_URL",
    "PLACEHOLDER_TABLE_NAME",
    "RUN_LOCK_SK",
    "TASK_FAILED_ERROR",
    "pipeline_pk",
]

PLACEHOLDER_CONTROL_QUEUE_URL: Final = "ControlQueueUrl"
PLACEHOLDER_TABLE_NAME: Final = "TableName"
PLACEHOLDERS: Final = (PLACEHOLDER_CONTROL_QUEUE_URL, PLACEHOLDER_TABLE_NAME)

#: Schema version of the message a task state sends to the control queue.
CONTROL_MESSAGE_VERSION: Final = 1

#: Sort key of the pipeline-run lock item (partition key: :func:`pipeline_pk`).
RUN_LOCK_SK: Final = "RUNLOCK"

#: Error name a run fails with when one of its tasks failed (the cause names the task).
TASK_FAILED_ERROR: Final = "Stepcrawl.TaskFailed"


def pipeline_pk(pipeline: str) -> str:
    """Partition key of items that belong to a pipeline as a whole (typed key prefix)."""
    return f"PIPELINE#{pipeline}"


# Environment of the Lambda functions (set by the CDK stack and by local mode).
ENV_TABLE: Final = "STEPCRAWL_TABLE"
ENV_BUCKET: Final = "STEPCRAWL_BUCKET"
ENV_FETCH_QUEUE_URL: Final = "STEPCRAWL_FETCH_QUEUE_URL"
ENV_PARSE_QUEUE_URL: Final = "STEPCRAWL_PARSE_QUEUE_URL"
ENV_PIPELINES_DIR: Final = "STEPCRAWL_PIPELINES_DIR"
ENV_SHARDS: Final = "STEPCRAWL_SHARDS"
ENV_WINDOW: Final = "STEPCRAWL_WINDOW"
ENV_FETCH_CONCURRENCY: Final = "STEPCRAWL_FETCH_CONCURRENCY"

# CloudWatch metrics (EMF through Powertools); the stack's alarms use the same names.
METRICS_NAMESPACE: Final = "stepcrawl"
METRIC_PAGES_FETCHED: Final = "PagesFetched"
METRIC_PAGES_FAILED: Final = "PagesFailed"
METRIC_PAGES_RECORDED: Final = "PagesRecorded"
METRIC_ITEMS: Final = "Items"
METRIC_BUNDLES: Final = "ParseBundles"
METRIC_BREAKER_TRANSITIONS: Final = "BreakerTransitions"
