"""The states of a URL (as a task's log records it) and of a crawl task record.

::

    URL:   pending ──fetched and recorded──▶ done | failed
           pending ──over max_pages──▶ skipped            failed ──redrive──▶ pending

    task:  running ──claimed == finished, one caller wins──▶ finishing ──token answered──▶
           succeeded | failed                              failed/succeeded ──redrive──▶ running
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TaskState", "UrlState"]


class UrlState(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class TaskState(StrEnum):
    RUNNING = "running"
    FINISHING = "finishing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
