"""The periodic sweep (EventBridge, every minute): the safety net of every running crawl.

For each running crawl task it advances the task (:func:`~stepcrawl.crawl.advance.advance_task`):
it feeds the shards that have a backlog (a feed refused because the window was full or a lease
was held, or a feeder that died holding its lease, is made up here), drains the backlog of a
task stopped at its cost limit, and calls :func:`~stepcrawl.crawl.accounting.maybe_finish`,
which sends the task's heartbeat when due and answers a token whose finisher died.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.errors import StepcrawlError
from stepcrawl.keys import RUNNING_PK

__all__ = ["SweepReport", "sweep_running"]

logger = logging.getLogger("stepcrawl.sweeper")


@dataclass
class SweepReport:
    tasks: int = 0
    sent: int = 0
    finished: int = 0
    errors: int = 0


def sweep_running(services: CrawlServices) -> SweepReport:
    """Sweep every running crawl task once."""
    report = SweepReport()
    for entry in _by_priority(services, services.table.query(RUNNING_PK, consistent=True)):
        report.tasks += 1
        run, task = str(entry["run"]), str(entry["task"])
        try:
            pipeline = services.registry.get(str(entry["pipeline"]), str(entry["version"]))
            advanced = advance_task(services, pipeline, run, task)
            report.sent += advanced.sent
            report.finished += advanced.finished
        except StepcrawlError:
            # One broken task (e.g. its pipeline version is gone) must not stop the others.
            report.errors += 1
            logger.exception("sweeping %s/%s failed", run, task)
    return report


def _by_priority(services: CrawlServices, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most urgent tasks first: the window they share goes to them first."""

    def priority(entry: dict[str, Any]) -> tuple[int, str]:
        try:
            pipeline = services.registry.get(str(entry["pipeline"]), str(entry["version"]))
            return (pipeline.task(str(entry["task"])).priority, str(entry["sk"]))
        except (StepcrawlError, KeyError):
            return (1_000_000, str(entry["sk"]))

    return sorted(entries, key=priority)
