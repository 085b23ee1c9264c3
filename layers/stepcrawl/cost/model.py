"""What a crawled page costs on AWS: measured counts per page, priced under stated assumptions.

Pure arithmetic, no I/O. :class:`Counts` are what a run measured, per page: the metered
adapters' DynamoDB units and SQS / S3 requests, each queue-fed function's invocations and
milliseconds, the state machine's transitions (per run), the bytes the functions logged and
the custom metrics they emit. :class:`Assumptions` are what no local measurement can say:
memory sizes, the remote sites' latency, the throughput on AWS, X-Ray's sampling.

Per page, with ``p`` pages per second and ``GB_f`` a function's memory in GB (MB / 1024):

- Lambda requests: ``Σ invocations_f + sweeps + ticks``, ``sweeps = 1 / (sweep_every_s · p)``
  and ``ticks = 1 / (scale_every_s · p)`` (the sweeper and the scaler run on a schedule,
  whatever the pages; each is modeled unless measured).
- Lambda GB-seconds: ``Σ ms_f / 1000 · GB_f + sweeps · sweeper_ms / 1000 · GB_sweeper
  + ticks · scaler_ms / 1000 · GB_scaler
  + wait / 1000 · GB_fetch``: a fetch invocation is billed while it waits on the network,
  ``wait = remote_latency_ms / in_flight`` per page, where ``in_flight`` is the smaller of
  ``fetch_in_flight`` (the deployment's fetch concurrency) and the pages one fetch invocation
  carries (``1 / invocations_fetch``). Per-invocation rounding up to 1 ms is ignored.
- SQS requests: the metered ones plus ``sqs_requests_per_invocation`` (a receive and a
  delete by the event-source mapping) per invocation of a queue-fed function.
- DynamoDB: write units and read units at their prices.
- S3: every request at the PUT price (an upper bound: GETs cost less, the meter does not
  tell them apart).
- Step Functions: ``transitions per run / pages per run``.
- CloudWatch Logs: logged bytes / 2^30 GB at the ingestion price.
- CloudWatch metrics: ``metrics / (3600 · p)`` metric-hours at ``metric_month / 730``
  (each metric exists for as long as the crawl runs; charges are prorated by the hour).
- X-Ray: per function, ``λ = invocations_f · p`` invocations per second, of which
  ``min(r, λ) + rate · max(0, λ - r)`` are traced (X-Ray's default rule: a reservoir of
  ``r`` = 1 per second, then 5%); traces per page = that / p; retrieved traces are
  ``xray_retrieved_share`` of the recorded ones (0 by default: nobody reads most traces).

Free tiers are left out: a crawl at scale is past them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from stepcrawl.cost.prices import HOURS_PER_MONTH, PRICES, Prices
from stepcrawl.functions_spec import FETCH_CONCURRENCY, FUNCTION_MEMORY_MB
from stepcrawl.storage import Usage

__all__ = [
    "QUEUE_FED",
    "SERVICES",
    "Assumptions",
    "Counts",
    "Estimate",
    "FunctionCounts",
    "estimate",
    "significant",
]

#: Functions fed by an SQS event-source mapping (the sweeper runs on a schedule).
QUEUE_FED: Final = ("dispatch", "fetch", "parse")
SWEEPER: Final = "sweeper"
SCALER: Final = "scaler"
#: The services of an estimate, in the order they are shown.
SERVICES: Final = (
    "lambda",
    "dynamodb",
    "sqs",
    "s3",
    "step_functions",
    "cloudwatch_logs",
    "cloudwatch_metrics",
    "xray",
)
_GIB: Final = 1024**3


@dataclass(frozen=True)
class FunctionCounts:
    """One function's invocations and milliseconds of work (per page, or totals)."""

    invocations: float = 0.0
    ms: float = 0.0


@dataclass(frozen=True)
class Counts:
    """What a run measured, per page (``state_transitions``: per run of ``pages`` pages)."""

    pages: int
    ddb_write_units: float = 0.0
    ddb_read_units: float = 0.0
    sqs_requests: float = 0.0
    s3_requests: float = 0.0
    #: Of ``s3_requests``, the GETs (priced as GETs; the others as PUTs, an upper bound).
    s3_get_requests: float = 0.0
    functions: Mapping[str, FunctionCounts] = field(default_factory=dict)
    state_transitions: float = 0.0
    log_bytes: float = 0.0
    #: Distinct custom metrics (name and dimension values) the functions emit.
    custom_metrics: int = 0

    @classmethod
    def from_totals(
        cls,
        pages: int,
        usage: Usage,
        functions: Mapping[str, FunctionCounts],
        *,
        state_transitions: float = 0.0,
        log_bytes: float = 0.0,
        custom_metrics: int = 0,
    ) -> Counts:
        """Counts per page from a run's totals (``usage``: every function's, summed)."""
        n = max(1, pages)
        return cls(
            pages=pages,
            ddb_write_units=usage.ddb_write_units / n,
            ddb_read_units=usage.ddb_read_units / n,
            sqs_requests=usage.sqs_requests / n,
            s3_requests=usage.s3_requests / n,
            s3_get_requests=usage.s3_get_requests / n,
            functions={
                name: FunctionCounts(f.invocations / n, f.ms / n) for name, f in functions.items()
            },
            state_transitions=state_transitions,
            log_bytes=log_bytes / n,
            custom_metrics=custom_metrics,
        )

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["functions"] = {
            name: {"invocations": significant(f.invocations), "ms": significant(f.ms)}
            for name, f in self.functions.items()
        }
        return {k: significant(v) if isinstance(v, float) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counts:
        """The inverse of :meth:`as_dict` (as a report stores it); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown count(s): {', '.join(unknown)}")
        values = dict(data)
        values["functions"] = {
            name: FunctionCounts(float(f.get("invocations", 0)), float(f.get("ms", 0)))
            for name, f in dict(values.get("functions", {})).items()
        }
        return cls(**values)


@dataclass(frozen=True)
class Assumptions:
    """What the estimate assumes (the defaults are the deployed stack's, or stated here)."""

    memory_mb: Mapping[str, int] = field(default_factory=lambda: dict(FUNCTION_MEMORY_MB))
    #: Time to first byte and body of a remote page; the fetch function is billed meanwhile.
    remote_latency_ms: float = 500.0
    #: Requests one fetch invocation keeps in flight at most (CrawlConfig.fetch_concurrency).
    fetch_in_flight: int = FETCH_CONCURRENCY
    #: The run size that per-run costs are spread over; ``None``: the measured run's.
    pages_per_run: int | None = None
    #: Throughput on AWS: what time-based charges (sweeps, metrics, X-Ray's reservoir) use.
    pages_per_second: float = 100.0
    xray_sampling_rate: float = 0.05
    xray_reservoir_per_second: float = 1.0
    xray_retrieved_share: float = 0.0
    sweep_every_s: float = 60.0
    sweeper_ms: float = 200.0
    #: The scaler's tick and duration (a dozen AWS API calls; its CloudWatch reads cost
    #: ~$0.01 per 1,000, ~$0.17 a day, not modeled).
    scale_every_s: float = 60.0
    scaler_ms: float = 300.0
    #: The event-source mapping's ReceiveMessage and DeleteMessageBatch per invocation.
    sqs_requests_per_invocation: float = 2.0
    prices: Prices = PRICES

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "prices"}
        data["memory_mb"] = dict(self.memory_mb)
        return data


@dataclass(frozen=True)
class Estimate:
    """Billed quantities per page, and dollars per page by service (:data:`SERVICES`)."""

    usage_per_page: Mapping[str, float]
    usd_per_page: Mapping[str, float]

    @property
    def usd_per_million_pages(self) -> dict[str, float]:
        return {service: usd * 1e6 for service, usd in self.usd_per_page.items()}

    @property
    def total_per_million_pages(self) -> float:
        return sum(self.usd_per_page.values()) * 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            "usage_per_page": {k: significant(v) for k, v in self.usage_per_page.items()},
            "usd_per_million_pages": {
                k: significant(v) for k, v in self.usd_per_million_pages.items()
            },
            "usd_per_million_pages_total": significant(self.total_per_million_pages),
        }


def significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits (per-page figures span many magnitudes)."""
    return float(f"{value:.{digits}g}")


def estimate(counts: Counts, assumptions: Assumptions | None = None) -> Estimate:
    """Price ``counts`` under ``assumptions`` (see the module docstring for the formulas)."""
    a = assumptions or Assumptions()
    prices = a.prices
    rate = a.pages_per_second
    functions = dict(counts.functions)
    scheduled = ((SWEEPER, a.sweep_every_s, a.sweeper_ms), (SCALER, a.scale_every_s, a.scaler_ms))
    for name, every, ms in scheduled:
        if name not in functions:  # modeled from its schedule unless measured
            runs = 1 / (every * rate)
            functions[name] = FunctionCounts(runs, runs * ms)
    unknown = sorted(set(functions) - set(a.memory_mb))
    if unknown:
        raise ValueError(f"no memory size for function(s) {', '.join(unknown)}")

    requests = sum(f.invocations for f in functions.values())
    gb_seconds = sum(f.ms / 1000 * a.memory_mb[name] / 1024 for name, f in functions.items())
    gb_seconds += _fetch_wait_ms(functions, a) / 1000 * a.memory_mb["fetch"] / 1024
    sqs = counts.sqs_requests + a.sqs_requests_per_invocation * sum(
        functions[name].invocations for name in QUEUE_FED if name in functions
    )
    pages_per_run = a.pages_per_run or counts.pages
    transitions = counts.state_transitions / max(1, pages_per_run)
    log_gb = counts.log_bytes / _GIB
    metric_hours = counts.custom_metrics / (3600 * rate)
    traces = sum(_traced_per_second(f.invocations * rate, a) for f in functions.values()) / rate
    retrieved = traces * a.xray_retrieved_share

    usage = {
        "lambda_requests": requests,
        "lambda_gb_seconds": gb_seconds,
        "ddb_write_units": counts.ddb_write_units,
        "ddb_read_units": counts.ddb_read_units,
        "sqs_requests": sqs,
        "s3_requests": counts.s3_requests,
        "s3_get_requests": counts.s3_get_requests,
        "state_transitions": transitions,
        "log_gb": log_gb,
        "metric_hours": metric_hours,
        "xray_traces_recorded": traces,
        "xray_traces_retrieved": retrieved,
    }
    usd = {
        "lambda": requests * prices.lambda_request + gb_seconds * prices.lambda_gb_second,
        "dynamodb": counts.ddb_write_units * prices.ddb_write_unit
        + counts.ddb_read_units * prices.ddb_read_unit,
        "sqs": sqs * prices.sqs_request,
        "s3": (counts.s3_requests - counts.s3_get_requests) * prices.s3_put_request
        + counts.s3_get_requests * prices.s3_get_request,
        "step_functions": transitions * prices.sfn_state_transition,
        "cloudwatch_logs": log_gb * prices.logs_ingested_gb,
        "cloudwatch_metrics": metric_hours * prices.metric_month / HOURS_PER_MONTH,
        "xray": traces * prices.xray_trace_recorded + retrieved * prices.xray_trace_retrieved,
    }
    return Estimate(usage, usd)


def _fetch_wait_ms(functions: Mapping[str, FunctionCounts], a: Assumptions) -> float:
    """Per page: the time a fetch invocation is billed while its requests are in flight."""
    fetch = functions.get("fetch")
    if fetch is None or fetch.invocations <= 0:
        return 0.0
    in_flight = max(1.0, min(float(a.fetch_in_flight), 1 / fetch.invocations))
    return a.remote_latency_ms / in_flight


def _traced_per_second(invocations_per_second: float, a: Assumptions) -> float:
    """Traces recorded per second of a function invoked this often (reservoir, then rate)."""
    reservoir = min(a.xray_reservoir_per_second, invocations_per_second)
    return reservoir + a.xray_sampling_rate * (invocations_per_second - reservoir)
