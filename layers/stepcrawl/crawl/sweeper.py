"""The periodic sweep (EventBridge, every minute): the safety net of every running crawl.

For each running crawl task it advances the task (:func:`~stepcrawl.crawl.advance.advance_task`):
it feeds the shards that have a backlog (a feed refused because the window was full or a lease
was held, or a feeder that died holding its lease, is made up here), drains the backlog of a
task stopped at its cost limit, and calls :func:`~stepcrawl.crawl.accounting.maybe_finish`,
which sends the task's heartbeat when due and answers a token whose finisher died.

Then it settles every run with tasks waiting for, or holding, one of its ``parallelism`` slots
(:func:`~stepcrawl.crawl.admission.sweep_admissions`): it gives back the slot of a task whose
finisher died before doing so, starts again an admitted task whose start did not complete,
admits waiting tasks into free slots (a caller that freed one and died before admitting the
next), and heartbeats the waiting tasks, whose task states would otherwise time out on their
``HeartbeatSeconds``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.crawl.admission import sweep_admissions
from stepcrawl.crawl.advance import advance_task
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.dispatch import hand_over
from stepcrawl.errors import StepcrawlError
from stepcrawl.table_keys import RUNNING_PK

__all__ = ["SweepReport", "sweep_running"]

logger = logging.getLogger("stepcrawl.sweeper")


@dataclass
class SweepReport:
    tasks: int = 0
    sent: int = 0
    finished: int = 0
    errors: int = 0
    #: Tasks admitted into free slots or started again, and heartbeats sent to waiting ones.
    admitted: int = 0
    heartbeats: int = 0
    #: The entries of the running crawl tasks swept (the stall watch reads them again).
    running: list[dict[str, Any]] = field(default_factory=list)


def sweep_running(services: CrawlServices) -> SweepReport:
    """Sweep every running crawl task once, then the admissions of every run."""
    report = SweepReport()
    report.running = services.table.query(RUNNING_PK, consistent=True)
    for entry in _by_priority(services, report.running):
        report.tasks += 1
        run, task = str(entry["run"]), str(entry["task"])
        try:
            pipeline = services.registry.get(str(entry["pipeline"]), str(entry["version"]))
            advanced = advance_task(services, pipeline, run, task, sweep=True)
            report.sent += advanced.sent
            report.finished += advanced.finished
        except StepcrawlError:
            # One broken task (e.g. its pipeline version is gone) must not stop the others.
            report.errors += 1
            logger.exception("sweeping %s/%s failed", run, task)
    admissions = sweep_admissions(services, hand_over)
    report.admitted = admissions.started
    report.heartbeats = admissions.heartbeats
    report.errors += admissions.errors
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
