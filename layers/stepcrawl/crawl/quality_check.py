"""A finishing crawl task's data profile and monitors: built, judged, kept, alerted.

:func:`judge_task` runs once every claimed URL is recorded, before the task answers
(:func:`~stepcrawl.crawl.accounting.maybe_finish`): it reads the task's log (the exact counts
each entry carries and the names of its items parts), samples a bounded number of parts
(:mod:`stepcrawl.quality.profile`), judges the task's monitors against the median of its last
successful runs, stores the profile and its history item, and publishes one alert per check
whose state changed since the task's previous run: FIRING when it breaches, RESOLVED when a
breached one holds again. Everything it writes is decided by the log and the history before
this run, so a finish retried after a crash writes and publishes the same again (the
notifier posts a change once, docs/alerts.md).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.cursors import leaves, partitions_of
from stepcrawl.crawl.paths import items_part_key
from stepcrawl.names import DATA_QUALITY_KIND
from stepcrawl.pipeline import CrawlTask, Monitors, Pipeline
from stepcrawl.quality.counters import schema_of
from stepcrawl.quality.history import (
    PROFILE_ATTRIBUTE,
    PastRun,
    StoredProfile,
    baseline_runs,
    profile_object_key,
    read_history,
    save_profile,
)
from stepcrawl.quality.profile import SAMPLE_ITEMS, SAMPLE_PARTS, Profile, Sample, build_profile
from stepcrawl.quality.stream import StreamProfile
from stepcrawl.quality.verdict import MonitorResult, baseline_of, evaluate

__all__ = ["Judgement", "judge_profile", "judge_stage", "judge_task", "quality_alerts"]

logger = logging.getLogger("stepcrawl.quality")

#: Runs in the baseline of a task that declares no monitors (``Monitors.baseline``'s default).
DEFAULT_BASELINE: Final = Monitors.model_fields["baseline"].default


@dataclass(frozen=True)
class Judgement:
    profile: Profile
    results: list[MonitorResult]
    #: the compressed profile for the task record (``None``: stored in the bucket)
    packed: bytes | None = None

    def record_fields(self) -> dict[str, Any]:
        """What the update that ends the task sets on its record besides its state."""
        return {PROFILE_ATTRIBUTE: self.packed} if self.packed is not None else {}

    @property
    def failed(self) -> list[MonitorResult]:
        """The breached checks of severity ``fail``: the task fails with them."""
        return [r for r in self.results if r.breached and r.severity == "fail"]

    def summary(self) -> dict[str, list[str]]:
        """What the task's answer carries: the ids of the checks breached, and failed."""
        return {
            "breached": [r.id for r in self.results if r.breached],
            "failed": [r.id for r in self.failed],
        }

    def cause(self) -> str:
        return "data quality: " + "; ".join(r.describe() for r in self.failed)


def judge_task(
    services: CrawlServices,
    pipeline: Pipeline,
    run: str,
    task: str,
    record: Mapping[str, Any],
    *,
    failed: bool = False,
) -> Judgement | None:
    """The finishing task's profile and checks (``None``: not a crawl task); ``failed``: the
    task fails anyway (too many failed pages), so its run joins no baseline."""
    crawl = pipeline.task(task)
    if not isinstance(crawl, CrawlTask):
        return None
    schema = schema_of(crawl)
    # The container's view of the log (read on from where it stopped: a warm parse container
    # reads next to nothing) holds the exact counts and the parts of the sample.
    # With partitions (crawl/proposing.py), their views one at a time: the counts summed,
    # the sample the first parts by the same hash among theirs.
    count = partitions_of(record)
    counts: Counter[int] = Counter()
    ranked: set[tuple[bytes, str]] = set()
    total_parts = 0
    for name in (part.log(task) for part in leaves(record)):
        log = services.task_logs.get(run, name)
        with log.lock:
            log.refresh(services.table, services.blobs)
            counts.update(log.quality)
            ranked.update(log.sample_parts)
            total_parts += log.parts
        if count > 1:
            services.task_logs.forget(run, name)
    parts = [name for _, name in sorted(ranked)[:SAMPLE_PARTS]]
    sample = _sample(services, pipeline.name, run, task, parts, total_parts)
    at = float(record.get("finished_at") or services.clock())
    pages = (int(record.get("ok", 0)), int(record.get("failed", 0)))
    profile = build_profile(
        (pipeline.name, run, task), at, schema, schema.named(counts), pages, sample
    )
    return judge_profile(
        services,
        profile,
        crawl.monitors,
        inline=True,
        failed=failed,
        counts_items=not crawl.incremental,
    )


def judge_stage(
    services: CrawlServices, profiled: StreamProfile, where: tuple[str, str, str]
) -> Judgement:
    """An ETL stage's profile, judged by the default checks against its last runs."""
    return judge_profile(services, profiled.profile(where, services.clock()), None)


def judge_profile(
    services: CrawlServices,
    profile: Profile,
    monitors: Monitors | None,
    *,
    inline: bool = False,
    failed: bool = False,
    counts_items: bool = True,
) -> Judgement:
    """Judge ``profile`` against the task's last runs, store it, alert its changes.

    ``counts_items`` is off for an incremental task: it re-parses only the pages that
    changed, so its item count says how much changed, not how much there is."""
    runs = monitors.baseline if monitors is not None else DEFAULT_BASELINE
    # Judged before this judgement's own time: a finish retried after a crash (the same
    # ``finished_at``) measures changes as the first try did and publishes them again (the
    # notifier posts a change once); a task re-driven after it ended (a later one) from its
    # own last judgement.
    found = read_history(
        services.table, profile.pipeline, profile.task, limit=2 * runs + 2, before=profile.at
    )
    # The baseline is the runs before this one.
    own = next((r for r in found if r.run == profile.run), None)
    history = [r for r in found if r.run != profile.run]
    base = baseline_runs(history, runs)
    baseline = baseline_of(r.signals for r in base)
    results = evaluate(monitors, profile.signals(), baseline, counts_items=counts_items)
    stored = StoredProfile(profile, results, baseline, [r.run for r in base])
    packed = save_profile(services.table, services.blobs, stored, inline=inline, failed=failed)
    previous = own or (history[0] if history else None)
    for alert in quality_alerts(profile, results, previous, baseline):
        _publish(services, alert, inline=packed is not None)
    return Judgement(profile, results, packed)


def _sample(
    services: CrawlServices, pipeline: str, run: str, task: str, parts: Sequence[str], total: int
) -> Sample:
    """Items of ``parts`` (the log's sample: at most :data:`SAMPLE_PARTS`, first by a hash of
    their names), at most :data:`SAMPLE_ITEMS`."""
    items: list[dict[str, Any]] = []
    read = 0
    for name in parts:
        if len(items) >= SAMPLE_ITEMS:
            break
        read += 1
        body = services.blobs.get(items_part_key(pipeline, run, task, name))
        for line in body.splitlines():
            if len(items) >= SAMPLE_ITEMS:
                break
            if line.strip():
                items.append(json.loads(line))
    return Sample(items, read, total)


def quality_alerts(
    profile: Profile,
    results: Sequence[MonitorResult],
    previous: PastRun | None,
    baseline: Mapping[str, float],
) -> list[dict[str, Any]]:
    """The alert topic's messages for checks whose state changed since ``previous``."""
    was = set(previous.breached) if previous is not None else set()
    out: list[dict[str, Any]] = []
    for result in results:
        if result.breached == (result.id in was):
            continue
        out.append(
            {
                "kind": DATA_QUALITY_KIND,
                "state": "FIRING" if result.breached else "RESOLVED",
                "pipeline": profile.pipeline,
                "run": profile.run,
                "task": profile.task,
                "at": profile.at,
                "previous_run": previous.run if previous is not None else None,
                **result.as_dict(),
                "command": f"stepcrawl profile {profile.run} --task {profile.task} --compare 3",
                "baseline_items": baseline.get("items"),
            }
        )
    return out


def _publish(services: CrawlServices, message: dict[str, Any], *, inline: bool) -> None:
    if services.alerts is None:
        logger.warning("data quality %s (no alert topic): %s", message["state"], message)
        return
    # Where the profile is, for the message's console link (the AWS adapters' names): the
    # task record in the table when it rides there, else its object in the bucket.
    where: dict[str, Any] = {"table": getattr(services.table, "name", None)}
    if not inline:
        key = profile_object_key(message["pipeline"], message["run"], message["task"])
        where = {"bucket": getattr(services.blobs, "bucket", None), "profile_key": key}
    subject = f"[{message['state']}] {message['pipeline']}: data quality of {message['task']}"
    services.alerts.publish({**message, **where}, subject=subject)
