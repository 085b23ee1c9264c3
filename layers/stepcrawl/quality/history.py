"""Where profiles live: the whole profile in the bucket, its signals in the table.

- the profile and its monitors' results, what ``stepcrawl profile``, reports and the console
  show: compressed in the task's record (:data:`PROFILE_ATTRIBUTE`, written by the update
  that ends a crawl task: no request of its own) when it is at most
  :data:`INLINE_PROFILE_BYTES`, else ``profiles/<pipeline>/<run>/<task>.json`` in the bucket
  (:func:`profile_object_key`; an ETL stage's always);
- one table item per run and task (``QUALITY#<pipeline>#<task>``, newest first, TTL
  :data:`HISTORY_TTL`): the run's signals, whether it passed its ``fail`` checks, and which
  checks it breached: what the next runs take their baseline from (a query of the first
  few) and what they resolve.

Both are written whole, with contents decided by the run's log, so a finish retried after a
crash writes the same again.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.quality.profile import Profile
from stepcrawl.quality.verdict import MonitorResult
from stepcrawl.storage import BlobStore, Table
from stepcrawl.table_keys import quality_key, quality_pk, task_key

__all__ = [
    "HISTORY_TTL",
    "INLINE_PROFILE_BYTES",
    "PROFILE_ATTRIBUTE",
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
#: The task record's attribute holding its compressed profile, when the profile is small.
PROFILE_ATTRIBUTE: Final = "profile"
#: Compressed bytes of a profile kept in the task record at most (a wider one goes to S3).
INLINE_PROFILE_BYTES: Final = 8_000


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
    *,
    inline: bool = False,
    failed: bool = False,
) -> bytes | None:
    """Store the run's profile and its history item. With ``inline`` (a crawl task, whose
    finisher writes its record anyway), a profile that compresses to at most
    :data:`INLINE_PROFILE_BYTES` is returned for the caller to put in the task record as
    :data:`PROFILE_ATTRIBUTE`; otherwise it goes to the bucket, and ``None`` is returned."""
    profile = stored.profile
    body = {
        **profile.as_dict(),
        "monitors": [r.as_dict() for r in stored.results],
        "baseline": stored.baseline,
        "baseline_runs": stored.baseline_runs,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    packed = zlib.compress(text, 9)
    kept: bytes | None = packed if inline and len(packed) <= INLINE_PROFILE_BYTES else None
    if kept is None:
        key = profile_object_key(profile.pipeline, profile.run, profile.task)
        blobs.put(key, text, content_type="application/json")
    breached = tuple(r.id for r in stored.results if r.breached)
    # A run joins later baselines only if its task succeeded: no `fail` check breached and
    # not failed otherwise (``failed``: too many failed pages).
    passed = not failed and not any(r.breached and r.severity == "fail" for r in stored.results)
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
    return kept


def read_history(
    table: Table, pipeline: str, task: str, *, limit: int, before: float | None = None
) -> list[PastRun]:
    """The task's last ``limit`` runs, newest first, each as last judged (``before``: as
    judged before that time, leaving out what a judgement at that time wrote itself)."""
    # Eventually consistent (half the read units): the runs compared were written minutes or
    # days before, not within the second such a read may lag by.
    items = table.query(quality_pk(pipeline, task), limit=2 * limit + 1, consistent=False)
    runs: dict[str, PastRun] = {}
    for item in items:
        if before is not None and float(item["at"]) >= before:
            continue
        # A run judged twice (re-driven, or a stage's message redelivered) saved two items:
        # the newest counts.
        if (run := str(item.get("run"))) not in runs:
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


def read_profile(
    table: Table, blobs: BlobStore, pipeline: str, run: str, task: str
) -> dict[str, Any] | None:
    """A stored profile as :func:`save_profile` wrote it (from the task record, else the
    bucket), or ``None``."""
    record = table.get(task_key(run, task), consistent=True) or {}
    if packed := record.get(PROFILE_ATTRIBUTE):
        inline: dict[str, Any] = json.loads(zlib.decompress(bytes(packed)))
        return inline
    try:
        body = blobs.get(profile_object_key(pipeline, run, task))
    except KeyError:
        return None
    data: dict[str, Any] = json.loads(body)
    return data


def baseline_runs(history: Sequence[PastRun], count: int) -> list[PastRun]:
    """The runs a baseline takes its median of: the last ``count`` that passed and fetched."""
    return [run for run in history if run.passed][:count]
