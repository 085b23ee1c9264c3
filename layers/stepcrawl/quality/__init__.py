"""Data quality: each run's data profile of a crawl task, and its monitors judged.

The engine (:mod:`stepcrawl.crawl.quality_check`) sums the exact counts its log carries
(:mod:`~stepcrawl.quality.counters`), builds the profile with a bounded sample of items
(:mod:`~stepcrawl.quality.profile`), judges the task's monitors against it and the baseline of
its last runs (:mod:`~stepcrawl.quality.verdict`), and keeps both
(:mod:`~stepcrawl.quality.history`).
This package holds the pure parts and the storage of profiles; it knows nothing of the log.
"""

from __future__ import annotations

from stepcrawl.quality.history import (
    PastRun,
    StoredProfile,
    profile_object_key,
    read_history,
    read_profile,
)
from stepcrawl.quality.profile import Profile
from stepcrawl.quality.verdict import MonitorResult, evaluate

__all__ = [
    "MonitorResult",
    "PastRun",
    "Profile",
    "StoredProfile",
    "evaluate",
    "profile_object_key",
    "read_history",
    "read_profile",
]
