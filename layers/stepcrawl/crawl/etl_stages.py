"""ETL tasks run by dispatch: transform, validate and load over the items of upstream tasks.

Outputs have deterministic keys (``items/<pipeline>/<run>/<task>/parts/part-NNNNN.jsonl``), so
a redelivered control message re-runs the stage over the same inputs, overwrites the same
objects and answers the token again (Step Functions keeps the first answer). A
:class:`~stepcrawl.errors.FatalError` (bad data, ``on_error: fail``, too many invalid items)
or a :class:`~stepcrawl.errors.ConfigError` (a load target that does not exist) fails the
task; anything else is raised for SQS to redeliver.

A stage runs while its task holds one of the run's ``parallelism`` slots
(:mod:`stepcrawl.crawl.admission`) and gives it back once the token is answered, not before:
a crash in between leaves the slot taken and the stage is run again (by the redelivered
message, or the sweep once its lease lapsed), answering again (Step Functions keeps the first
answer) and then releasing, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from stepcrawl.crawl.admission import release
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.items import task_items
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.crawl.paths import items_prefix, quarantine_prefix
from stepcrawl.crawl.quality_check import judge_stage
from stepcrawl.errors import ConfigError, FatalError
from stepcrawl.etl import (
    ItemWriter,
    LoadContext,
    TransformStats,
    load_dynamodb,
    load_s3,
    run_transform,
    run_validate,
)
from stepcrawl.names import error_name
from stepcrawl.pipeline import (
    DynamoDBTarget,
    LoadTask,
    Pipeline,
    TransformTask,
    ValidateTask,
)
from stepcrawl.quality.stream import StreamProfile

__all__ = ["run_stage"]

Item = dict[str, Any]


def run_stage(
    services: CrawlServices,
    pipeline: Pipeline,
    task: TransformTask | ValidateTask | LoadTask,
    message: ControlMessage,
) -> None:
    """Run an ETL task to the end, answer its token and give its slot back."""
    run = message.run_id
    try:
        summary = _run(services, pipeline, task, run)
    except (FatalError, ConfigError) as error:
        # A ConfigError here is the deployment's or the user's (a load target that does not
        # exist, access denied): a redelivery cannot fix it, so the task fails with its reason.
        services.tokens.fail(message.task_token, error_name(error), str(error))
    else:
        services.tokens.succeed(message.task_token, summary)
    release(services, run, task.id)


def _run(
    services: CrawlServices,
    pipeline: Pipeline,
    task: TransformTask | ValidateTask | LoadTask,
    run: str,
) -> dict[str, Any]:
    inputs = {
        name: task_items(services.table, services.blobs, pipeline, run, name)
        for name in task.consumes
    }
    output = items_prefix(pipeline.name, run, task.id) + "parts/"
    # The stage's data profile (quality/stream.py): a transform's output, the items a
    # validate stage checked; judged by the default checks against the stage's last runs.
    profiled = StreamProfile(task.id)
    where = (pipeline.name, run, task.id)
    if isinstance(task, TransformTask):
        stats = TransformStats()
        with ItemWriter(services.blobs, output) as writer:
            written = writer.write_all(profiled.watch(run_transform(task, inputs, stats=stats)))
        return {
            "items_in": stats.items_in,
            "items_out": written,
            "merged": stats.merged,
            "dropped": dict(stats.dropped),
            "errors": dict(stats.errors),
            "quality": judge_stage(services, profiled, where).summary(),
        }
    items = _chain(inputs)
    if isinstance(task, ValidateTask):
        quarantine = quarantine_prefix(pipeline.name, run, task.id)
        with (
            ItemWriter(services.blobs, output) as valid,
            ItemWriter(services.blobs, quarantine) as invalid,
        ):
            outcome = run_validate(task, profiled.watch(items), valid=valid, quarantine=invalid)
        if outcome.exceeds_ratio:
            raise FatalError(f"{outcome.summary()}; invalid items are in {quarantine}")
        return {
            "items": outcome.items,
            "valid": outcome.valid,
            "invalid": outcome.invalid,
            "quality": judge_stage(services, profiled, where).summary(),
        }
    context = LoadContext(pipeline=pipeline.name, run=run, task=task.id)
    if isinstance(task.target, DynamoDBTarget):
        stats_load = load_dynamodb(task.target, items, services.table_writer(task.target.table))
    else:
        if task.target.bucket is not None:
            raise ConfigError(
                f"task {task.id}: loading into another bucket ({task.target.bucket}) needs "
                "that bucket's permissions in the stack; leave bucket unset for now"
            )
        stats_load = load_s3(task.target, items, services.blobs, context)
    return {
        "items_in": stats_load.items_in,
        "written": stats_load.written,
        "rejected": dict(stats_load.rejected),
        "objects": list(stats_load.objects),
    }


def _chain(inputs: dict[str, Callable[[], Iterator[Item]]]) -> Iterator[Item]:
    for source in inputs.values():
        yield from source()
