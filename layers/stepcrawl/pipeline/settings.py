"""Settings a task inherits from the pipeline's defaults: retry, politeness, limits, timeouts.

A task overrides only the keys it sets; :func:`layered` is that one rule, and
:class:`TaskSettings` its result.
"""

from __future__ import annotations

from typing import Literal, Self, TypeVar

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator

from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.types import Duration, config_error

__all__ = [
    "DEFAULT_USER_AGENT",
    "Defaults",
    "Limits",
    "Politeness",
    "RetryPolicy",
    "TaskSettings",
    "check_delays",
    "layered",
]

_M = TypeVar("_M", bound=BaseModel)

DEFAULT_USER_AGENT = "stepcrawl/0.1 (+https://github.com/stepcrawl/stepcrawl)"


class RetryPolicy(Strict):
    """How often and how patiently failed work is retried (by the workers, never by ASL)."""

    max_attempts: int = Field(3, ge=1, le=20, description="Tries per URL or stage, first included.")
    base_delay: Duration = Field(1.0, description="First backoff delay; doubles per attempt.")
    max_delay: Duration = Field(300.0, le=43200, description="Cap of one backoff delay.")
    max_retry_after: Duration = Field(
        3600.0, le=86400, description="Cap of a server's Retry-After (it pauses the whole host)."
    )
    reclassify: dict[int, Literal["transient", "throttle", "fatal"]] = Field(
        default_factory=dict,
        description="HTTP status -> failure class, overriding the built-in table "
        "(e.g. 403: transient for a flaky WAF).",
    )

    @field_validator("reclassify")
    @classmethod
    def _statuses(
        cls, value: dict[int, Literal["transient", "throttle", "fatal"]]
    ) -> dict[int, Literal["transient", "throttle", "fatal"]]:
        for status in value:
            if not 400 <= status <= 599:
                raise config_error(
                    "reclassify",
                    f"{status} is not an HTTP error status",
                    "reclassify statuses 400-599 (successes and redirects are not failures)",
                )
        return value

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        # A task's retry sets only the keys it overrides: the other one may come from the
        # defaults, so the pipeline checks the effective pair (Pipeline._settings_issues).
        if {"base_delay", "max_delay"} <= self.model_fields_set:
            check_delays(self)
        return self


def check_delays(policy: RetryPolicy) -> None:
    """``base_delay`` must not exceed ``max_delay``; else a located config error."""
    if policy.base_delay > policy.max_delay:
        raise config_error(
            "delays",
            f"base_delay ({policy.base_delay:g}s) must not exceed max_delay "
            f"({policy.max_delay:g}s)",
            "lower base_delay or raise max_delay",
        )


class Politeness(Strict):
    """How gently a crawl treats each site."""

    delay: Duration = Field(1.0, le=3600, description="Minimum gap between requests to one host.")
    obey_robots: bool = Field(True, description="Fetch and honour robots.txt and its Crawl-delay.")
    user_agent: str = Field(DEFAULT_USER_AGENT, min_length=1, max_length=512)
    per_host_concurrency: int = Field(2, ge=1, le=64, description="Requests in flight per host.")
    give_up_after: Duration | None = Field(
        300.0,
        ge=1,
        le=7 * 86400,
        description="A host whose circuit breaker has stayed open this long is given up: its "
        "waiting and future URLs end failed, class host_down (null: wait for it as long as the "
        "task runs).",
    )


class Limits(Strict):
    """Hard bounds of a crawl; enforced exactly even with many concurrent workers."""

    max_depth: int = Field(3, ge=0, le=100, description="Link hops from a seed (seeds are 0).")
    max_pages: int = Field(1000, ge=1, le=100_000_000, description="Pages fetched per run.")
    max_bytes_per_page: ByteSize = Field(
        ByteSize(5_000_000), ge=1024, le=200_000_000, description="Body cap, e.g. 5MB."
    )
    max_error_ratio: float = Field(
        0.1, ge=0, le=1, description="The task fails if more than this share of pages failed."
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Estimated AWS spend (USD) at which the task stops fetching; it then "
        "ends succeeded, stopped: budget_exhausted.",
    )
    seen_partitions: int = Field(
        1,
        ge=1,
        le=256,
        description="Parts the task's set of seen URLs is cut into at its start, each judged "
        "on its own (docs/architecture.md, 'Flat state'): 1 keeps it whole in every parse "
        "container until it holds a million URLs, then cuts it in two; a part splits in two "
        "once it holds a million URLs, so what a container holds stays flat at any size "
        "(more parts from the start spread the judging wider; incremental tasks keep 1).",
    )


class Defaults(Strict):
    """Settings every task inherits; a task overrides only the keys it sets."""

    retry: RetryPolicy = RetryPolicy()
    politeness: Politeness = Politeness()
    limits: Limits = Limits()
    timeout: Duration = Field(6 * 3600, ge=1, le=365 * 86400, description="Per task.")
    heartbeat: Duration = Field(
        600, ge=1, description="A task with no sign of life for this long fails (States.Timeout)."
    )


class TaskSettings(BaseModel):
    """A task's effective settings: its own keys layered over the pipeline defaults."""

    model_config = ConfigDict(frozen=True)

    retry: RetryPolicy
    politeness: Politeness
    limits: Limits
    timeout: float
    heartbeat: float


def layered(base: _M, own: _M | None) -> _M:
    """``base`` with the keys ``own`` set explicitly (a task's override of the defaults)."""
    if own is None:
        return base
    return base.model_copy(update=own.model_dump(exclude_unset=True))
