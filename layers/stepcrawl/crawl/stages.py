"""ETL tasks run by dispatch: transform, validate, load (wired to :mod:`stepcrawl.etl`)."""

from __future__ import annotations

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import ControlMessage
from stepcrawl.errors import FatalError
from stepcrawl.pipeline import LoadTask, Pipeline, TransformTask, ValidateTask

__all__ = ["run_stage"]


def run_stage(
    services: CrawlServices,
    pipeline: Pipeline,
    task: TransformTask | ValidateTask | LoadTask,
    message: ControlMessage,
) -> None:
    """Run an ETL task and answer its token."""
    del pipeline, message
    services.tokens.fail("", "Stepcrawl.NotImplemented", f"{task.type} stages are not wired yet")
    raise FatalError(f"{task.type} stages are not wired yet")
