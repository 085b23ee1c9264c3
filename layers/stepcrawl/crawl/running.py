"""A container's view of the running crawl tasks: who shares the fetch window, and how much.

:mod:`stepcrawl.crawl.fairness` reads it (the running-task index and the task records, at
most every ``VIEW_TTL`` seconds); it lives on the container's services
(``CrawlServices.running``), so each container keeps its own, as on Lambda, and nothing is
kept at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RunningTask", "RunningView"]


@dataclass(frozen=True)
class RunningTask:
    """A running crawl task as the view holds it."""

    run: str
    task: str
    pipeline: str
    version: str
    priority: int
    pending: int  # claimed - finished on its record: its backlog and its URLs in flight

    @property
    def key(self) -> str:
        return f"{self.run}#{self.task}"


@dataclass
class RunningView:
    """The running tasks as last read (``at``: when; None: never), and when each was last
    handed a feed by this container (task key -> time), which outlives the re-reads."""

    at: float | None = None
    tasks: list[RunningTask] = field(default_factory=list)
    handed: dict[str, float] = field(default_factory=dict)

    def refresh(self, now: float, tasks: list[RunningTask]) -> None:
        self.at, self.tasks = now, tasks
