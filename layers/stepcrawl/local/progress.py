"""The live view of a run (rich): per task its state, pages done, backlog, items, errors, pages/s.

A task the state machine has sent but that holds none of its run's ``parallelism`` slots yet
shows as ``waiting (parallelism)``.

Fed by :meth:`~stepcrawl.deployment.Deployment.wait` ticks, i.e. by the same reads that
``stepcrawl status`` makes, so what the view shows is what a client of the stack can see; its
figures are the run view's (:class:`~stepcrawl.diagnose.runview.TaskProgress`).
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from stepcrawl.diagnose.runview import TaskProgress
from stepcrawl.run_status import RunStatus, TaskStatus

__all__ = ["RunProgress", "status_table"]

_STYLE = {
    "running": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",  # its run was stopped (crawl/stopping.py)
    "pending": "dim",
    "waiting": "cyan",
}


def status_table(status: RunStatus) -> Table:
    """One row per task; crawl tasks with their counters."""
    table = Table(
        "task",
        "type",
        "state",
        "pages done",
        "backlog",
        "items",
        "errors",
        "pages/s",
        "time",
        title=f"{status.pipeline} · run {status.run} · {status.status}",
        title_justify="left",
    )
    for task in status.tasks.values():
        table.add_row(task.id, task.type, _state(task), *_numbers(task))
    return table


def _state(task: TaskStatus) -> str:
    # A waiting task has been sent by the state machine but holds no slot of its run yet.
    shown = f"{task.state} ({task.waiting_on})" if task.waiting_on else task.state
    if task.in_flight is not None:  # waiting on nothing the engine can see (crawl/waiting.py)
        shown += (
            f" ({task.in_flight.urls} URLs in flight for {task.in_flight.idle_seconds:.0f} s, "
            "nothing queued)"
        )
    return f"[{_STYLE.get(task.state, '')}]{shown}[/]"


def _numbers(task: TaskStatus) -> tuple[str, str, str, str, str, str]:
    progress = TaskProgress.of(task)
    seconds = progress.seconds
    elapsed = "" if seconds is None else f"{seconds:.1f}s"
    if task.type != "crawl" or not progress.started:
        return ("", "", "", "", "", elapsed)
    # "Pages done" counts every URL recorded (``finished``: the cost guard's skipped ones
    # too), not only the fetched ``pages``.
    finished = progress.finished
    rate = progress.rate(finished)
    unchanged = progress.unchanged  # incremental tasks (crawl/incremental.py)
    return (
        f"{finished} ({unchanged} unchanged)" if unchanged else str(finished),
        str(progress.backlog),
        str(progress.items),
        str(progress.errors),
        "" if rate is None else f"{rate:.1f}",
        elapsed,
    )


class RunProgress:
    """A rich ``Live`` table refreshed on every tick; silent when not a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.last: RunStatus | None = None
        self._live = Live(console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> RunProgress:
        if self.console.is_terminal:
            self._live.start()
        return self

    def update(self, status: RunStatus) -> None:
        self.last = status
        if self.console.is_terminal:
            self._live.update(status_table(status), refresh=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.console.is_terminal:
            self._live.stop()
