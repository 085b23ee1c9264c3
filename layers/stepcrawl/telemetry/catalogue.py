"""The metric catalogue: every CloudWatch metric stepcrawl emits, what it means, and how to
emit one.

One entry per metric (the names are the ``METRIC_*`` constants of :mod:`stepcrawl.names`):
its unit, the statistic to read it with, the functions that print it (their ``service``
dimension), its dimension sets, what it means and what to do when it moves. The library, the
stack (dashboards, alarms) and the tests read this list; ``docs/operations.md`` holds it as a
table (``python -m stepcrawl.telemetry.catalogue_table`` prints it), and
``tests/unit/test_metric_catalogue.py`` fails when a name is emitted but not here, or here but
never emitted.

**Dimensions** stay low-cardinality: ``service`` (the function: Powertools' name for it) is
on every metric, and the others come from :data:`DIMENSIONS`: the pipeline and task ids of a
deployment, and small fixed value sets (status class, a bounded set of status codes, failure
class, breaker state). Never a URL, a host or a run id: each distinct set of dimension values
is a custom metric CloudWatch bills by the month.

**Emitting** is :mod:`~stepcrawl.telemetry.recorder`'s (every call checked against this
list, and aggregated), printing it :mod:`~stepcrawl.telemetry.emf`'s, and the table in the
docs :mod:`~stepcrawl.telemetry.catalogue_table`'s: this module is the list alone.

A metric with several dimension sets is printed once with all of them (EMF's ``Dimensions``
is a list of sets): CloudWatch then keeps one series per set, e.g. ``PagesFetched`` by
``service`` alone (what the scaler reads) and by ``service, pipeline, task``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from stepcrawl import names

__all__ = [
    "BY_NAME",
    "CATALOGUE",
    "DIMENSIONS",
    "FAILURE_CLASSES",
    "FUNCTIONS",
    "STATUS_CLASSES",
    "STATUS_CODES",
    "Dimension",
    "MetricSpec",
    "failure_class",
    "status_class",
    "status_code",
]

Unit = Literal["Count", "Milliseconds", "None"]
Statistic = Literal["Sum", "Maximum", "Average", "p95"]

#: The functions that print metrics (their ``service`` dimension). render runs the fetch stage
#: for ``render: browser`` pages, so it prints what fetch prints, under its own name.
FUNCTIONS: Final = ("dispatch", "fetch", "render", "parse", "sweeper", "scaler")

#: The status classes of ``PagesByStatusClass`` (``none``: no response at all).
STATUS_CLASSES: Final = ("2xx", "3xx", "4xx", "5xx", "other", "none")
#: The status codes ``PagesByStatus`` names; any other code counts as ``other``, no
#: response as ``none``: a site answering 299 must not create a metric.
STATUS_CODES: Final = (
    *("200", "204", "206"),
    *("301", "302", "303", "304", "307", "308"),
    *("400", "401", "403", "404", "405", "408", "410", "429"),
    *("500", "502", "503", "504"),
    *("other", "none"),
)
#: Failure classes of a page (docs/resilience.md); anything else counts as ``other``.
FAILURE_CLASSES: Final = (
    "fatal",
    "transient",
    "throttle",
    "parser",
    "host_down",
    "internal_error",
    "sitemap",  # a sitemap document that could not be read (crawl/sitemaps.py)
    "other",
)


@dataclass(frozen=True)
class Dimension:
    """A dimension: its values (``None``: the deployment's own ids, few by construction)."""

    values: tuple[str, ...] | None
    meaning: str


#: Every dimension a metric may have besides ``service``.
DIMENSIONS: Final[Mapping[str, Dimension]] = {
    "pipeline": Dimension(None, "the pipeline's name"),
    "task": Dimension(None, "the crawl task's id in its pipeline (not the run)"),
    "status_class": Dimension(STATUS_CLASSES, "the response's status class"),
    "status": Dimension(STATUS_CODES, "the response's status, from a bounded set"),
    "class": Dimension(FAILURE_CLASSES, "failure class (docs/resilience.md)"),
    "to": Dimension(("open", "half_open", "closed"), "the breaker state entered"),
    "function": Dimension(("fetch", "parse"), "the function the scaler set"),
    "direction": Dimension(("up", "down", "hold"), "the scaler's decision"),
}

_TASK: Final = ("pipeline", "task")


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the catalogue."""

    name: str
    unit: Unit
    #: How to read it: ``Sum`` metrics are counters (summed within an invocation before they
    #: are printed); the others are samples (every value is printed, up to 99 per line).
    statistic: Statistic
    emitted_by: tuple[str, ...]
    #: Its dimension sets, ``service`` left out (it is in every set); ``()`` is ``service``
    #: alone. The first set holds every dimension a call passes.
    dimensions: tuple[tuple[str, ...], ...]
    meaning: str
    action: str

    @property
    def keys(self) -> frozenset[str]:
        """The dimensions every emission passes."""
        return frozenset(self.dimensions[0])

    @property
    def summed(self) -> bool:
        return self.statistic == "Sum"


def _spec(
    name: str,
    unit: Unit,
    statistic: Statistic,
    emitted_by: tuple[str, ...],
    dimensions: tuple[tuple[str, ...], ...],
    meaning: str,
    action: str,
) -> MetricSpec:
    return MetricSpec(name, unit, statistic, emitted_by, dimensions, meaning, action)


_BY_TASK: Final = (_TASK, ())  # per task, and the function's total
#: The functions that run the fetch stage (crawl/fetch_stage.py): fetch, and render.
_FETCH_STAGE: Final = ("fetch", "render")

#: Every metric stepcrawl emits (namespace :data:`~stepcrawl.names.METRICS_NAMESPACE`).
CATALOGUE: Final[tuple[MetricSpec, ...]] = (
    # ---------------------------------------------------------------- fetch
    _spec(
        names.METRIC_PAGES_FETCHED,
        "Count",
        "Sum",
        _FETCH_STAGE,
        _BY_TASK,
        "fetch attempts that got an outcome (every attempt, retries included); the scaler "
        "reads it (service alone) as fetch's QPS",
        "falls to 0 while the backlog is not empty: check fetch's errors, MessagesFailed and "
        "the breakers",
    ),
    _spec(
        names.METRIC_FETCH_THROTTLED,
        "Count",
        "Sum",
        _FETCH_STAGE,
        _BY_TASK,
        "attempts answered 429/503 or with Retry-After; the scaler backs off on its ratio",
        "a rising ratio to PagesFetched: the target pushes back; lower qps_high or the "
        "task's politeness.delay",
    ),
    _spec(
        names.METRIC_FETCH_ERRORS,
        "Count",
        "Sum",
        _FETCH_STAGE,
        _BY_TASK,
        "attempts that failed transiently (5xx, timeouts, connection errors); the scaler "
        "backs off on its ratio",
        "a rising ratio: the target (or the network) is failing; see BreakerTransitions",
    ),
    _spec(
        names.METRIC_FETCH_LATENCY,
        "Milliseconds",
        "p95",
        _FETCH_STAGE,
        _BY_TASK,
        "time of each attempt (all redirects, not robots.txt), one sample per URL",
        "p95 up: a slow target; more concurrency will not help; timeouts follow",
    ),
    _spec(
        names.METRIC_PAGES_BY_STATUS_CLASS,
        "Count",
        "Sum",
        _FETCH_STAGE,
        (("pipeline", "task", "status_class"), ("status_class",)),
        "attempts by the response's status class (none: no response)",
        "4xx up: the task's links or rules point at missing pages; 5xx or none up: the "
        "target fails (see FetchErrors)",
    ),
    _spec(
        names.METRIC_PAGES_BY_STATUS,
        "Count",
        "Sum",
        _FETCH_STAGE,
        (("status",),),
        "attempts by status code (a bounded set; other codes: other); all tasks together",
        "which code moved, when PagesByStatusClass did (403: blocked? 429: throttled)",
    ),
    _spec(
        names.METRIC_FETCH_RETRIES,
        "Count",
        "Sum",
        _FETCH_STAGE,
        (("pipeline", "task", "class"), ("class",)),
        "URLs sent back for another attempt (class transient or throttle)",
        "high against PagesFetched: the target fails often; PagesFailed follows once "
        "retry.max_attempts is spent",
    ),
    _spec(
        names.METRIC_FETCH_DEFERRED,
        "Count",
        "Sum",
        _FETCH_STAGE,
        _BY_TASK,
        "URLs the fetch stage put back unfetched: their host paused (Retry-After) or its "
        "breaker not closed",
        "steadily high: a host is down or pausing us; its URLs wait (host_down after "
        "politeness.give_up_after)",
    ),
    _spec(
        names.METRIC_BREAKER_TRANSITIONS,
        "Count",
        "Sum",
        _FETCH_STAGE,
        (("to",), ()),
        "per-host circuit breaker changes caused by fetch outcomes (to: open, closed); the "
        "scaler reads the total",
        "to=open rising: hosts are failing; see FetchErrors and `stepcrawl failures --class "
        "host_down`",
    ),
    _spec(
        names.METRIC_BREAKER_OPEN_HOSTS,
        "Count",
        "Maximum",
        _FETCH_STAGE,
        ((),),
        "hosts of a fetch batch whose breaker was open or half-open (a sample per batch: the "
        "Maximum is a lower bound of the hosts held back)",
        "above 0 for long: hosts are down; their URLs end host_down after politeness.give_up_after",
    ),
    _spec(
        names.METRIC_MESSAGES_FAILED,
        "Count",
        "Sum",
        (*_FETCH_STAGE, "parse"),
        ((),),
        "SQS messages a batch handed back (partial batch response): SQS redelivers them, then "
        "moves them to the dead-letter queue",
        "any sustained value: read the function's log (the exception is logged); then the "
        "dead-letter queue",
    ),
    # ---------------------------------------------------------------- parse
    _spec(
        names.METRIC_BUNDLES,
        "Count",
        "Sum",
        ("parse",),
        ((),),
        "parse messages (bundles of fetched pages) handled, whatever their outcome; the "
        "scaler reads it as parse's drain rate",
        "below the parse queue's arrivals for long: parse falls behind (the scaler should "
        "raise its concurrency)",
    ),
    _spec(
        names.METRIC_PAGES_RECORDED,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "pages recorded in their task's log (done or failed, each once; a redelivered bundle "
        "counts again); the scaler reads the total",
        "the crawl's progress: flat while the task runs means it is stuck (see the backlog "
        "and the queues' age)",
    ),
    _spec(
        names.METRIC_PAGES_FAILED,
        "Count",
        "Sum",
        ("parse",),
        (("pipeline", "task", "class"), ("class",)),
        "pages recorded failed, by failure class (fatal, transient, throttle, parser, "
        "host_down, internal_error)",
        "against PagesRecorded: the error ratio a task fails on (limits.max_error_ratio); "
        "`stepcrawl failures RUN --class C` lists them, `redrive` retries them",
    ),
    _spec(
        names.METRIC_PAGES_UNCHANGED,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "pages of incremental tasks recorded unchanged: a 304 to a conditional request, or "
        "the same items as the last run; they write no items (emit: changed)",
        "near PagesRecorded on every run: the site changes little, and a longer schedule or "
        "sitemap_since would do; 0 on a recrawl: the site sends no validators and its items "
        "change every time (a timestamp field?)",
    ),
    _spec(
        names.METRIC_ITEMS,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "items extracted from the pages recorded",
        "items per page falls: the site's markup changed and the extract rules miss",
    ),
    _spec(
        names.METRIC_JSONLD_SKIPPED,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "JSON-LD scripts of the pages recorded that are not JSON, skipped (the page's other "
        "scripts are still read)",
        "steadily above 0: the site writes broken JSON-LD; the fields it held come from "
        "nowhere, read them from microdata, OpenGraph or CSS instead",
    ),
    _spec(
        names.METRIC_LINKS_DISCOVERED,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "links the recorded pages hold that the task follows (within max_depth)",
        "together with LinksAdmitted: how much of what is found is new",
    ),
    _spec(
        names.METRIC_LINKS_ADMITTED,
        "Count",
        "Sum",
        ("parse",),
        _BY_TASK,
        "links admitted to the frontier: new to the task, within its page budget",
        "0 while pages are recorded: the crawl is converging (or the budget is spent)",
    ),
    _spec(
        names.METRIC_PARSE_LATENCY,
        "Milliseconds",
        "p95",
        ("parse",),
        _BY_TASK,
        "time to extract items and links from one page, a sample per page",
        "p95 up: heavier pages or costlier rules; parse needs more time or concurrency",
    ),
    _spec(
        names.METRIC_COST_MICRO_USD,
        "None",
        "Sum",
        ("parse",),
        _BY_TASK,
        "estimated cost (millionths of a USD: DynamoDB, SQS, S3, Lambda time at list prices) "
        "of the work committed with the pages; cost per page = CostMicroUsd / PagesRecorded",
        "cost per page up: more retries, larger pages or a hot key; compare with "
        "`stepcrawl cost` and limits.max_cost_usd",
    ),
    # ---------------------------------------------------------------- frontier
    _spec(
        names.METRIC_URLS_FED,
        "Count",
        "Sum",
        ("dispatch", "parse", "sweeper"),
        _BY_TASK,
        "URLs moved from the frontier into the fetch queue (feeds after seeding, commits and "
        "sweeps)",
        "0 while the backlog is not: the window is full (see FeedWindow) or the hosts wait "
        "for politeness or their breakers",
    ),
    _spec(
        names.METRIC_BACKLOG_CHUNKS_DRAINED,
        "Count",
        "Sum",
        ("dispatch", "parse", "sweeper"),
        _BY_TASK,
        "backlog chunks a feed emptied and deleted",
        "with UrlsFed: how fast the frontier empties",
    ),
    # ---------------------------------------------------------------- sweeper
    _spec(
        names.METRIC_FRONTIER_BACKLOG,
        "Count",
        "Maximum",
        ("sweeper",),
        ((),),
        "URLs admitted by the running crawl tasks and not recorded yet (what the scaler "
        "calls backlog), once a sweep",
        "grows while PagesRecorded is flat: fetch is starved or stuck; see UrlsFed and the "
        "scaler's decisions",
    ),
    _spec(
        names.METRIC_RUNNING_TASKS,
        "Count",
        "Maximum",
        ("sweeper",),
        ((),),
        "running crawl tasks the sweep advanced",
        "a task that stays for hours: see its progress with `stepcrawl status`",
    ),
    _spec(
        names.METRIC_URLS_STALLED,
        "Count",
        "Maximum",
        ("sweeper",),
        ((),),
        "URLs of running crawl tasks in flight with nothing queued: no commit for "
        "stall_after while no crawl queue counts a message and the task's backlog is empty "
        "(crawl/stalls.py; each such task also alerts), once a sweep",
        "any: a message was lost between the queues; `stepcrawl status RUN` names the URLs, "
        "the task ends only at its timeout (docs/resilience.md)",
    ),
    _spec(
        names.METRIC_HEARTBEATS,
        "Count",
        "Sum",
        ("sweeper",),
        ((),),
        "heartbeats the sweep sent to tasks waiting for a parallelism slot",
        "long-waiting tasks: a run's parallelism is smaller than its ready tasks",
    ),
    _spec(
        names.METRIC_SWEEP_ERRORS,
        "Count",
        "Sum",
        ("sweeper",),
        ((),),
        "running tasks (or admissions) the sweep could not advance",
        "any: read the sweeper's log (a pipeline version no longer deployed?)",
    ),
    # ---------------------------------------------------------------- scaler
    _spec(
        names.METRIC_CONCURRENCY,
        "Count",
        "Maximum",
        ("scaler",),
        (("function",),),
        "the MaximumConcurrency the scaler set on fetch's or parse's event source mapping",
        "pinned at max_concurrency with a growing backlog: raise the scaler's ceiling",
    ),
    _spec(
        names.METRIC_SCALER_DECISIONS,
        "Count",
        "Sum",
        ("scaler",),
        (("function", "direction"),),
        "the scaler's decisions per tick (direction up, down or hold)",
        "up and down alternating: the policy oscillates; widen the cooldowns (docs/scaling.md)",
    ),
    _spec(
        names.METRIC_FEED_WINDOW,
        "Count",
        "Maximum",
        ("scaler",),
        ((),),
        "URLs allowed in the fetch queue at once (all runs), as the scaler set it",
        "follows fetch's concurrency; stuck at the deployed window: the scaler is not running",
    ),
    _spec(
        names.METRIC_TELEMETRY_SHED,
        "Count",
        "Maximum",
        ("scaler",),
        ((),),
        "1 while telemetry is shed (fetch's error + throttle ratio stayed high: the functions "
        "log WARNING and above, the runs' trace rate is reduced), else 0; once a tick",
        "1: read FetchErrors, FetchThrottled and the warnings; debug logs and most traces "
        "are off until the ratio recovers (docs/operations.md, shedding)",
    ),
)

BY_NAME: Final[Mapping[str, MetricSpec]] = {spec.name: spec for spec in CATALOGUE}


def status_class(status: int | None) -> str:
    """The ``status_class`` dimension of a response's status."""
    if status is None:
        return "none"
    if 200 <= status < 600:
        return f"{status // 100}xx"
    return "other"


def status_code(status: int | None) -> str:
    """The ``status`` dimension: the code if it is one of :data:`STATUS_CODES`."""
    if status is None:
        return "none"
    code = str(status)
    return code if code in STATUS_CODES else "other"


def failure_class(failure: str) -> str:
    """The ``class`` dimension of a failure class."""
    return failure if failure in FAILURE_CLASSES else "other"
