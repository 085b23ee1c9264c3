"""What `stepcrawl diagnose` reads about a run, whichever source it came from.

One typed model for a local run's files (``report.json`` and its neighbours) and for a
deployed stack's run (its failure records and task logs), so that the analysis
(:mod:`stepcrawl.diagnose.analysis`) is one pure function tested on synthetic runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from stepcrawl.crawl.failures import Failure

__all__ = ["Failure", "PageRecord", "RetryPolicy", "RunData", "ScalingTick", "TaskInfo"]


@dataclass(frozen=True)
class PageRecord:
    """One recorded page of a crawl task: its log line and when it was committed.

    ``at`` is the commit's time (epoch seconds, to the second: the log keeps it as the
    entry's expiry); ``host`` and ``url`` are known for failed pages only (from their failure
    records): the task log keeps a fingerprint, not the URL, of every page.
    """

    task: str
    state: str  # done | failed | skipped
    status: int | None = None
    failure: str = ""
    attempts: int = 1
    size: int = 0
    fetch_ms: float = 0.0
    parse_ms: float = 0.0
    at: float | None = None
    host: str | None = None
    url: str | None = None

    @property
    def outcome(self) -> str:
        """``ok`` for a fetched page, else its failure class (``fatal`` when unrecorded)."""
        if self.state == "done":
            return "ok"
        return self.failure or ("skipped" if self.state == "skipped" else "fatal")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PageRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class ScalingTick:
    """One scaler tick of a local run (``report.json`` ``scaling``): the concurrency each
    function got, and what the scaler saw of the fetch side."""

    t: float  # seconds since the local cloud started
    concurrency: dict[str, int]
    open_breakers: int = 0
    throttle_ratio: float = 0.0
    backlog: int = 0

    @classmethod
    def from_report(cls, tick: Mapping[str, Any]) -> ScalingTick:
        decisions = [d for d in tick.get("decisions", []) if isinstance(d, Mapping)]
        concurrency = {
            str(d["function"]): int(d.get("concurrency") or 0) for d in decisions if "function" in d
        }
        fetch: Mapping[str, Any] = next((d for d in decisions if d.get("function") == "fetch"), {})
        return cls(
            t=float(tick.get("t", 0.0)),
            concurrency=concurrency,
            open_breakers=int(fetch.get("open_breakers") or 0),
            throttle_ratio=float(fetch.get("throttle_ratio") or 0.0),
            backlog=int(fetch.get("backlog") or 0),
        )


@dataclass(frozen=True)
class TaskInfo:
    """A task of the run: what it is, how it ended, how long it ran, and (a crawl task that
    renders) its rendered pages where no item selector matched (fetch/render_options.py)."""

    id: str
    type: str
    state: str = "succeeded"
    seconds: float | None = None
    render_unmatched: int = 0


@dataclass(frozen=True)
class RetryPolicy:
    """The retry backoff the estimate of retry waits assumes (the defaults of
    docs/resilience.md: full jitter, so a wait averages half its cap)."""

    base_delay: float = 1.0
    max_delay: float = 300.0

    def expected_wait_ms(self, attempts: int) -> float:
        """The mean total backoff before the last of ``attempts`` attempts."""
        return sum(
            min(self.max_delay, self.base_delay * 2.0 ** (n - 1)) / 2 * 1000.0
            for n in range(1, max(1, attempts))
        )


@dataclass
class RunData:
    """Everything the analysis reads about one run."""

    run: str
    pipeline: str = ""
    status: str = ""
    seconds: float | None = None
    #: When the run started (epoch seconds), if known; else its first page's time is used.
    started: float | None = None
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    pages: list[PageRecord] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    ticks: list[ScalingTick] = field(default_factory=list)
    #: Per unfinished crawl task: URLs waiting in its backlog, by reason.
    waiting: dict[str, dict[str, int]] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: Per crawl task: its data-quality checks that breached (quality/verdict.py, as stored
    #: with its profile: ``id``, ``monitor``, ``subject``, ``value``, ``baseline``...).
    quality: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Per crawl task: URLs claimed but neither queued, in a backlog nor recorded while
    #: nothing moved (crawl/waiting.py), if any.
    in_flight: dict[str, int] = field(default_factory=dict)
    #: What the source could not provide (said in the diagnosis).
    notes: list[str] = field(default_factory=list)

    @property
    def crawl_seconds(self) -> float | None:
        """The crawl tasks' wall time, added up (else the run's)."""
        crawls = [t.seconds for t in self.tasks.values() if t.type == "crawl" and t.seconds]
        return sum(crawls) if crawls else self.seconds
