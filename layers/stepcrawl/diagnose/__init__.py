"""`stepcrawl diagnose`: what explains a run's failures and slowness, ranked by share.

:func:`diagnose` is a pure function of a :class:`RunData`; :mod:`stepcrawl.diagnose.sources`
builds one from a local run's files or from a deployed stack (AWS or local, alike).
See docs/diagnose.md. What it reads of a run's tasks, their progress as their records and
logs say it, is the run view (:mod:`stepcrawl.diagnose.runview`), which the reports, the
console and the terminal's live table read too.
"""

from __future__ import annotations

from stepcrawl.diagnose.analysis import BASES, KINDS, Diagnosis, diagnose
from stepcrawl.diagnose.causes import Cause, auto_window
from stepcrawl.diagnose.model import (
    Failure,
    PageRecord,
    RetryPolicy,
    RunData,
    ScalingTick,
    TaskInfo,
)
from stepcrawl.diagnose.suspects import Suspect, suspects

__all__ = [
    "BASES",
    "KINDS",
    "Cause",
    "Diagnosis",
    "Failure",
    "PageRecord",
    "RetryPolicy",
    "RunData",
    "ScalingTick",
    "Suspect",
    "TaskInfo",
    "auto_window",
    "diagnose",
    "suspects",
]
