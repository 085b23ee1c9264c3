"""Where profiles live: the whole profile in the bucket, its signals in the table.

- ``profiles/<pipeline>/<run>/<task>.json``: the profile and its monitors' results, what
  ``stepcrawl profile``, reports and the console show (:func:`profile_object_key`);
- one table item per run and task (``QUALITY#<pipeline>#<task>``, newest first, TTL
  :data:`HISTORY_TTL`): the run's signals, whether it passed its ``fail`` checks, and which
  checks it breached: what the next runs take their baseline from (a query of the first
  few) and what they resolve.

Both are written whole, with contents decided by the run's log, so a finish retried after a
crash writes the same again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.quality.profile import Profile
from stepcrawl.quality.verdict import MonitorResult
from stepcrawl.storage import BlobStore, Table
from stepcrawl.table_keys import quality_key, quality_pk

__all__ = [
    "HISTORY_TTL",
    "PastRun",
    "StoredProfile",
    "baseline_runs",
    "profile_object_key",
    "read_history",
    "read_profile",
    "save_profile",
]

#: Seconds a run's profile stays in the table's history (the baseline's memory).
HISTORY_TTL: Final = 180 * 86400


def profile_object_key(pipeline: str, run: str, task: str) -> str:
    return f"profiles/{pipeline}/{run}/{task}.json"


@dataclass(frozen=True)
class PastRun:
    """What the history keeps of one run of a task."""

    run: str
    at: float
    passed: bool  # no `fail` check breached
    signals: dict[str, float]
    breached: tuple[str, ...]  # ids of the checks it breached


@dataclass(frozen=True)
class StoredProfile:
    profile: Profile
    results: list[MonitorResult]
    baseline: dict[str, float]
    baseline_runs: list[str]


def save_profile(
    table: Table,
    blobs: BlobStore,
    stored: StoredProfile,
) -> PastRun:
    """Store the run's profile (object, then history item); what the history now holds."""
    profile = stored.profile
    body = {
        **profile.as_dict(),
        "monitors": [r.as_dict() for r in stored.results],
        "baseline": stored.baseline,
        "baseline_runs": stored.baseline_runs,
    }
    blobs.put(
        profile_object_key(profile.pipeline, profile.run, profile.task),
        json.dumps(body, indent=1, sort_keys=True).encode(),
        content_type="application/json",
    )
    breached = tuple(r.id for r in stored.results if r.breached)
    passed = not any(r.breached and r.severity == "fail" for r in stored.results)
    past = PastRun(profile.run, profile.at, passed, profile.signals(), breached)
    pk, sk = quality_key(profile.pipeline, profile.task, profile.at, profile.run)
    table.put(
        {
            "pk": pk,
            "sk": sk,
            "run": past.run,
            "at": past.at,
            "passed": past.passed,
            "pages": profile.pages,
            "signals": past.signals,
            "breached": list(past.breached),
            "expires_at": int(profile.at) + HISTORY_TTL,
        }
    )
    return past


def read_history(
    table: Table, pipeline: str, task: str, *, limit: int, exclude: str = ""
) -> list[PastRun]:
    """The task's last ``limit`` runs, newest first (``exclude``: a run left out, the one
    being judged)."""
    items = table.query(quality_pk(pipeline, task), limit=2 * limit + 1, consistent=True)
    runs: dict[str, PastRun] = {}
    for item in items:
        # A stage run again (a redelivered message) saved its run twice: the newest counts.
        if (run := str(item.get("run"))) != exclude and run not in runs:
            runs[run] = _past(item)
    return list(runs.values())[:limit]


def _past(item: dict[str, Any]) -> PastRun:
    return PastRun(
        run=str(item["run"]),
        at=float(item["at"]),
        passed=bool(item.get("passed", True)),
        signals={k: float(v) for k, v in dict(item.get("signals") or {}).items()},
        breached=tuple(str(b) for b in item.get("breached") or ()),
    )


def read_profile(blobs: BlobStore, pipeline: str, run: str, task: str) -> dict[str, Any] | None:
    """A stored profile as :func:`save_profile` wrote it, or ``None``."""
    try:
        body = blobs.get(profile_object_key(pipeline, run, task))
    except KeyError:
        return None
    data: dict[str, Any] = json.loads(body)
    return data


def baseline_runs(history: Sequence[PastRun], count: int) -> list[PastRun]:
    """The runs a baseline takes its median of: the last ``count`` that passed and fetched."""
    return [run for run in history if run.passed][:count]
