"""Pipeline schema, files and task graph: what a user writes and how it is checked."""

from __future__ import annotations

from stepcrawl.pipeline.crawl_rules import ExtractRule, FieldRule, FollowRule
from stepcrawl.pipeline.crawl_task import CrawlTask
from stepcrawl.pipeline.etl_tasks import (
    DynamoDBTarget,
    LoadTask,
    MergeSpec,
    S3Target,
    TransformTask,
    ValidateTask,
)
from stepcrawl.pipeline.graph import Dag, TaskNode, check_graph
from stepcrawl.pipeline.loading import discover, load_pipeline, pipeline_from_data
from stepcrawl.pipeline.models import Pipeline, Schedule, Task
from stepcrawl.pipeline.monitors import Monitors
from stepcrawl.pipeline.settings import Defaults, Limits, Politeness, RetryPolicy, TaskSettings
from stepcrawl.pipeline.transforms import Condition, TransformOp

__all__ = [
    "Condition",
    "CrawlTask",
    "Dag",
    "Defaults",
    "DynamoDBTarget",
    "ExtractRule",
    "FieldRule",
    "FollowRule",
    "Limits",
    "LoadTask",
    "MergeSpec",
    "Monitors",
    "Pipeline",
    "Politeness",
    "RetryPolicy",
    "S3Target",
    "Schedule",
    "Task",
    "TaskNode",
    "TaskSettings",
    "TransformOp",
    "TransformTask",
    "ValidateTask",
    "check_graph",
    "discover",
    "load_pipeline",
    "pipeline_from_data",
]
