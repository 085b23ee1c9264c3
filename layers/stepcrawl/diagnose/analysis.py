"""What explains a run's failures and slowness, ranked, each cause with its share.

A pure function of :class:`~stepcrawl.diagnose.model.RunData`. Four kinds of cause, each with
its own *base* (what its shares are shares of):

- ``failures``: the failed URLs (failure records; a run without them, its failed page lines).
  Each failed URL is grouped by host, failure class, status code, reason, time window and
  task; a cause's share is the fraction of failed URLs in its group. Every dimension
  partitions the failures, so shares add up to 100 % within a dimension and *overlap across*
  dimensions: one 503 from ``a.example`` at 12:03 counts for that host, for ``transient``,
  for 503 and for that minute. ``combination`` (host, class, status, window) groups them
  jointly: its top entry is the single most common kind of failure.
- ``slowness``: the pages' time, in page-milliseconds: each page's fetch and parse time, plus,
  for a retried page, its earlier attempts (estimated as long as its last) and the backoff
  between them (the mean of the retry policy's full jitter). Grouped by stage (fetch, parse,
  retried attempts, retry backoff), status, outcome, window, host and task.
- ``waiting``: the crawl tasks' wall time: the start before the first page, windows in which
  no page was recorded, and scaler ticks that saw open breakers or throttling (local runs).
- ``backlog``: an unfinished crawl's URLs still waiting, by what they wait for.

Beside the causes, a count that is no share of anything: per crawl task, its rendered pages
where no item selector matched within ``render_timeout`` (:attr:`Diagnosis.render_unmatched`;
pages failed ``render_timeout`` or read as they were: content that never came, or selectors
that do not fit the pages).

``lift`` says how concentrated a cause is where the pages' own spread is known (windows,
tasks): its share over its share of the pages, so a window holding 10 % of the pages and 80 %
of the failures has a lift of 8, while a host that served every page explains nothing more
than "everything" does.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.diagnose.causes import (
    MIN_SHARE,
    PER_DIMENSION,
    Cause,
    Shares,
    Windows,
    auto_window,
    latency_text,
    lift,
    status_label,
    top_values,
)
from stepcrawl.diagnose.model import Failure, PageRecord, RunData
from stepcrawl.diagnose.suspects import Suspect, suspects

__all__ = ["BASES", "KINDS", "Diagnosis", "diagnose"]

KINDS: Final = ("failures", "slowness", "waiting", "backlog")
#: What each kind's shares are shares of.
BASES: Final = {
    "failures": "failed URLs",
    "slowness": "page time (fetch + parse + retries), ms",
    "waiting": "crawl wall time, s",
    "backlog": "URLs still waiting",
}
#: Ties in share go to the more specific dimension.
_SPECIFIC: Final = (
    "combination",
    "reason",
    "status",
    "host",
    "window",
    "class",
    "stage",
    "outcome",
    "task",
    "ticks",
    "reason_waiting",
)
_COMBINATIONS: Final = 3


@dataclass
class Diagnosis:
    """The ranked causes of one run."""

    run: str
    pipeline: str
    status: str
    window_seconds: float
    #: Per kind: the base's total (failed URLs, page-ms, wall seconds, waiting URLs).
    bases: dict[str, float]
    causes: list[Cause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Per crawl task (those with any): rendered pages where no item selector matched.
    render_unmatched: dict[str, int] = field(default_factory=dict)
    #: What most likely went wrong, across kinds (:mod:`stepcrawl.diagnose.suspects`).
    suspects: list[Suspect] = field(default_factory=list)

    def unmatched_line(self) -> str | None:
        """The rendered pages where no item selector matched, in words (None: there are none)."""
        if not self.render_unmatched:
            return None
        total = sum(self.render_unmatched.values())
        tasks = ", ".join(f"task {t}: {n}" for t, n in sorted(self.render_unmatched.items()))
        return (
            f"rendered pages where no item selector matched within render_timeout: {total} "
            f"({tasks})"
        )

    def ranked(self, kind: str | None = None, dimension: str | None = None) -> list[Cause]:
        """Causes (of one kind, one dimension) by share, highest first."""
        return [
            c
            for c in self.causes
            if (kind is None or c.kind == kind) and (dimension is None or c.dimension == dimension)
        ]

    def top(self, kind: str, dimension: str | None = None) -> Cause | None:
        found = self.ranked(kind, dimension)
        return found[0] if found else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "pipeline": self.pipeline,
            "status": self.status,
            "window_seconds": self.window_seconds,
            "bases": {k: {"of": BASES[k], "total": v} for k, v in self.bases.items()},
            "causes": [c.as_dict() for c in self.causes],
            "notes": list(self.notes),
            "render_unmatched": dict(self.render_unmatched),
            "suspects": [s.as_dict() for s in self.suspects],
        }


def diagnose(run: RunData, window: float | None = None) -> Diagnosis:
    """Rank what explains ``run``'s failures and slowness (see the module docstring)."""
    times = [p.at for p in run.pages if p.at is not None] + [f.at for f in run.failures if f.at]
    origin = run.started if run.started is not None else (min(times) if times else 0.0)
    span = (max(times) - origin) if times else (run.seconds or 0.0)
    width = float(window) if window else auto_window(max(span, 1.0))
    # Windows on the clock's multiples of their width (per-minute buckets start at :00).
    windows = Windows(math.floor(origin / width) * width, width)
    failed_pages = [p for p in run.pages if p.state == "failed"]
    failures = run.failures or [_as_failure(p) for p in failed_pages]
    slow = _slowness(run, windows)
    causes = [
        *_failures(run, failures, windows),
        *slow,
        *_waiting(run, windows),
        *_backlog(run),
    ]
    causes.sort(key=lambda c: (KINDS.index(c.kind), -c.share, _rank(c.dimension), c.value))
    notes = list(run.notes)
    if run.pages and all(p.host is None for p in run.pages if p.state == "done"):
        notes.append(
            "hosts are known for failed pages only (the task log keeps a fingerprint of each "
            "page, not its URL): slowness by host covers failed pages"
        )
    bases = {
        "failures": float(len(failures)),
        "slowness": round(sum(_page_ms(p, run) for p in run.pages), 1),
        "waiting": float(run.crawl_seconds or 0.0),
        "backlog": float(sum(sum(r.values()) for r in run.waiting.values())),
    }
    return Diagnosis(
        run=run.run,
        pipeline=run.pipeline,
        status=run.status,
        window_seconds=width,
        bases=bases,
        causes=causes,
        notes=notes,
        render_unmatched={
            t.id: t.render_unmatched for t in run.tasks.values() if t.render_unmatched
        },
        suspects=suspects(run),
    )


# ---- failures -------------------------------------------------------------------------------


def _failures(run: RunData, failures: Sequence[Failure], windows: Windows) -> list[Cause]:
    total = len(failures)
    if not total:
        return []
    pages_per_window = Counter(windows.of(p.at) for p in run.pages if p.at is not None)
    pages_per_task = Counter(p.task for p in run.pages)
    n_pages = len(run.pages)
    causes: list[Cause] = []

    def group(
        dimension: str,
        key: Callable[[Failure], str | None],
        detail: Callable[[str, list[Failure]], str],
        lift_of: Callable[[str, int], float | None] = lambda _v, _n: None,
    ) -> None:
        groups: dict[str, list[Failure]] = defaultdict(list)
        for failure in failures:
            value = key(failure)
            if value is not None:
                groups[value].append(failure)
        ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        for value, members in ranked[:PER_DIMENSION]:
            share = len(members) / total
            if share < MIN_SHARE:
                continue
            start = windows.start_of(value) if dimension == "window" else None
            causes.append(
                Cause(
                    "failures",
                    dimension,
                    value,
                    share,
                    float(len(members)),
                    detail(value, members),
                    lift_of(value, len(members)),
                    start,
                )
            )

    def pages_in(value: str) -> int:
        start = windows.start_of(value)
        return pages_per_window.get(start, 0) if start is not None else 0

    def window_lift(value: str, n: int) -> float | None:
        pages = pages_in(value)
        return lift(n / total, pages / n_pages) if pages and n_pages else None

    def window_detail(value: str, members: list[Failure]) -> str:
        pages = pages_in(value)
        rate = f"{pages} page(s) recorded in the window; " if pages else ""
        return rate + top_values(f.host for f in members)

    def task_lift(value: str, n: int) -> float | None:
        pages = pages_per_task.get(value, 0)
        return lift(n / total, pages / n_pages) if pages and n_pages else None

    group("host", lambda f: f.host or "(no host)", lambda _v, m: top_values(f.cls for f in m))
    group("class", lambda f: f.cls, lambda _v, m: top_values(f.reason for f in m))
    group("status", lambda f: status_label(f.status), lambda _v, m: top_values(f.host for f in m))
    group("reason", lambda f: f.reason or None, lambda _v, m: top_values(f.host for f in m))
    group("window", lambda f: windows.label(f.at) if f.at else None, window_detail, window_lift)
    if len({f.task for f in failures} | set(pages_per_task)) > 1:
        group("task", lambda f: f.task, lambda _v, m: top_values(f.cls for f in m), task_lift)
    # The joint groups: the most common kinds of failure, all four dimensions at once.
    joint = Counter(
        (f.host or "(no host)", f.cls, status_label(f.status), windows.label(f.at) if f.at else "")
        for f in failures
    )
    for (host, cls, status, label), n in joint.most_common(_COMBINATIONS):
        if n < 2 or n / total < MIN_SHARE:  # a single URL is not a pattern
            continue
        value = " · ".join(x for x in (host, cls, status, label) if x)
        causes.append(Cause("failures", "combination", value, n / total, float(n)))
    return causes


def _as_failure(page: PageRecord) -> Failure:
    return Failure(
        task=page.task,
        url=page.url or "",
        host=page.host or "",
        cls=page.outcome,
        status=page.status,
        reason="",
        attempts=page.attempts,
        depth=0,
        at=page.at or 0.0,
    )


# ---- slowness -------------------------------------------------------------------------------


def _page_ms(page: PageRecord, run: RunData) -> float:
    earlier = max(0, page.attempts - 1)
    return page.fetch_ms * (1 + earlier) + page.parse_ms + run.retry.expected_wait_ms(page.attempts)


def _slowness(run: RunData, windows: Windows) -> list[Cause]:
    pages = [p for p in run.pages if p.state != "skipped"]
    total = sum(_page_ms(p, run) for p in pages)
    if total <= 0:
        return []
    shares = Shares("slowness", total, windows)
    shares.add("stage", *_stages(run, pages))
    for dimension, key in (
        ("status", lambda p: status_label(p.status)),
        ("outcome", lambda p: p.outcome),
        ("task", lambda p: p.task),
    ):
        groups = _group_pages(pages, key)
        if dimension == "task" and len(groups) < 2:
            continue
        shares.add(dimension, *_group_shares(run, groups, total, len(pages)))
    timed = [p for p in pages if p.at is not None]
    by_window = _group_pages(timed, lambda p: windows.label(p.at))
    shares.add("window", *_group_shares(run, by_window, total, len(timed)))
    # Hosts are known for failed pages only: no lift against the pages' own spread.
    by_host = _group_pages([p for p in pages if p.host], lambda p: p.host or "")
    shares.add(
        "host",
        {v: sum(_page_ms(p, run) for p in g) for v, g in by_host.items()},
        {
            v: f"{len(g)} failed page(s); " + latency_text(p.fetch_ms for p in g)
            for v, g in by_host.items()
        },
    )
    return shares.causes


def _stages(run: RunData, pages: Sequence[PageRecord]) -> tuple[dict[str, float], dict[str, str]]:
    """The pages' time by stage (fetch, parse, retried attempts, retry backoff), and what
    each stage's figure is."""
    retried = [p for p in pages if p.attempts > 1]
    amounts = {
        "fetch": sum(p.fetch_ms for p in pages),
        "parse": sum(p.parse_ms for p in pages),
        "retried attempts (est.)": sum(p.fetch_ms * (p.attempts - 1) for p in retried),
        "retry backoff (est.)": sum(run.retry.expected_wait_ms(p.attempts) for p in retried),
    }
    details = {
        "fetch": latency_text(p.fetch_ms for p in pages if p.fetch_ms),
        "parse": latency_text(p.parse_ms for p in pages if p.parse_ms),
        "retried attempts (est.)": f"{len(retried)} page(s) retried, each earlier attempt "
        "counted as long as its last",
        "retry backoff (est.)": f"{sum(p.attempts - 1 for p in retried)} retries at the mean "
        f"of a full-jitter backoff from {run.retry.base_delay:g}s",
    }
    return amounts, details


def _group_shares(
    run: RunData, groups: Mapping[str, Sequence[PageRecord]], total: float, pages: int
) -> tuple[dict[str, float], dict[str, str], dict[str, float | None]]:
    """Per group of pages: its time, its pages and latency, and its lift (its share of the
    time over its share of the ``pages``)."""
    amounts = {v: sum(_page_ms(p, run) for p in g) for v, g in groups.items()}
    details = {
        v: f"{len(g)} page(s); " + latency_text(p.fetch_ms for p in g) for v, g in groups.items()
    }
    lifts = {v: lift(amounts[v] / total, len(g) / pages) for v, g in groups.items()}
    return amounts, details, lifts


def _group_pages(
    pages: Iterable[PageRecord], key: Callable[[PageRecord], str]
) -> dict[str, list[PageRecord]]:
    groups: dict[str, list[PageRecord]] = defaultdict(list)
    for page in pages:
        groups[key(page)].append(page)
    return groups


# ---- waiting --------------------------------------------------------------------------------


def _waiting(run: RunData, windows: Windows) -> list[Cause]:
    wall = run.crawl_seconds or 0.0
    if wall <= 0:
        return []
    causes: list[Cause] = []

    def add(dimension: str, value: str, seconds: float, detail: str) -> None:
        seconds = min(seconds, wall)
        if seconds / wall >= MIN_SHARE:
            causes.append(
                Cause("waiting", dimension, value, seconds / wall, round(seconds, 2), detail)
            )

    times = sorted(p.at for p in run.pages if p.at is not None)
    if times and run.started is not None:
        # Commit times are whole seconds: a start under a second is not told apart.
        before = max(0.0, times[0] - run.started - 1.0)
        add(
            "stage",
            "before the first page",
            before,
            "deploying the run's tasks, seeds, robots.txt, the first fetch and parse",
        )
    if times:
        busy = {windows.of(t) for t in times}
        first, last = windows.of(times[0]), windows.of(times[-1])
        count = round((last - first) / windows.width) + 1
        idle = [s for s in (first + i * windows.width for i in range(count)) if s not in busy]
        if idle:
            add(
                "window",
                "no page recorded",
                len(idle) * windows.width,
                f"{len(idle)} of {count} {windows.width:g}s windows without a page: "
                "politeness, retry backoff, paused or open hosts, the feed window",
            )
    if len(run.ticks) > 1:
        gaps = [b.t - a.t for a, b in zip(run.ticks, run.ticks[1:], strict=False) if b.t > a.t]
        every = statistics.median(gaps) if gaps else 0.0
        opened = [t for t in run.ticks if t.open_breakers > 0]
        throttled = [t for t in run.ticks if t.throttle_ratio > 0]
        n = len(run.ticks)
        if opened:
            add(
                "ticks",
                "breakers open",
                len(opened) * every,
                f"{len(opened)} of {n} scaler ticks saw open breakers (at most "
                f"{max(t.open_breakers for t in opened)} hosts)",
            )
        if throttled:
            add(
                "ticks",
                "throttled (429 / Retry-After)",
                len(throttled) * every,
                f"{len(throttled)} of {n} scaler ticks saw throttling (up to "
                f"{max(t.throttle_ratio for t in throttled):.0%} of fetches)",
            )
    return causes


def _backlog(run: RunData) -> list[Cause]:
    totals: Counter[str] = Counter()
    for reasons in run.waiting.values():
        totals.update(reasons)
    total = sum(totals.values())
    return [
        Cause(
            "backlog",
            "reason_waiting",
            reason,
            n / total,
            float(n),
            ", ".join(f"{t}: {r[reason]}" for t, r in run.waiting.items() if r.get(reason)),
        )
        for reason, n in totals.most_common()
        if total
    ]


# ---- helpers --------------------------------------------------------------------------------


def _rank(dimension: str) -> int:
    return _SPECIFIC.index(dimension) if dimension in _SPECIFIC else len(_SPECIFIC)
