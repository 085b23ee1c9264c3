"""The states of a URL (as a task's log records it) and of a crawl task record.

::

    URL:   pending ──fetched and recorded──▶ done | failed
           pending ──over max_pages──▶ skipped            failed ──redrive──▶ pending

    task:  running ──claimed == finished, one caller wins──▶ finishing ──token answered──▶
           succeeded | failed                              failed/succeeded ──redrive──▶ running

    admission (a task of a run and its slot, one way only; see crawl/admission.py):
           waiting ──a slot is free, first by (priority, id)──▶ admitted ──token answered──▶
           released
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AdmissionState", "TaskState", "UrlState"]


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
    CANCELLED = "cancelled"  # its run was stopped (crawl/stopping.py): nothing leaves it


class AdmissionState(StrEnum):
    """Where a task stands with the run's ``parallelism`` slots. Each step is taken by one
    conditional write, so a task takes a slot once and gives it back once."""

    WAITING = "waiting"
    ADMITTED = "admitted"
    RELEASED = "released"
