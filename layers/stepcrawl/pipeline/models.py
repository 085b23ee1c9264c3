"""The pipeline model: its tasks (any kind), schedule, defaults and parallelism, and the
checks and lookups that span tasks (the graph, effective settings, the version hash).

A YAML file and a tree of these models are two spellings of the same pipeline; every check
(field types, CSS, regexes, cron, the task graph) runs in both.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from functools import lru_cache
from typing import Annotated, Literal, Self
from zoneinfo import ZoneInfo, available_timezones

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from stepcrawl.errors import Issue, ScheduleExpressionError
from stepcrawl.pipeline.crawl_task import CrawlTask
from stepcrawl.pipeline.etl_tasks import LoadTask, TransformTask, ValidateTask
from stepcrawl.pipeline.graph import Dag, InvalidGraphError, check_graph
from stepcrawl.pipeline.schedule_expr import parse_schedule
from stepcrawl.pipeline.settings import Defaults, RetryPolicy, TaskSettings, check_delays, layered
from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.types import PipelineName, config_error

__all__ = ["Pipeline", "Schedule", "Task"]

#: Any task; its ``type`` key says which kind.
Task = Annotated[CrawlTask | TransformTask | ValidateTask | LoadTask, Field(discriminator="type")]


class Schedule(Strict):
    """When EventBridge starts a run, and what happens if the previous one is still going."""

    cron: str = Field(..., description="EventBridge cron(...) or rate(...) expression.")
    timezone: str = Field("UTC", description="IANA time zone the cron is read in.")
    overlap: Literal["forbid", "replace", "allow"] = Field(
        "forbid",
        description="A new run while one is live: forbid skips it, replace stops the old one, "
        "allow runs both.",
    )
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            return parse_schedule(value).expression()
        except ScheduleExpressionError as exc:
            raise config_error("cron", str(exc), exc.hint) from None

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        zones = _time_zones()
        if value in zones:
            ZoneInfo(value)
            return value
        same = [zone for zone in zones if zone.lower() == value.strip().lower()]
        close = same or difflib.get_close_matches(value, zones, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else "use e.g. Europe/Berlin or UTC"
        raise config_error("timezone", f"unknown time zone {value!r} (not an IANA name)", hint)


@lru_cache(maxsize=1)
def _time_zones() -> list[str]:
    return sorted(available_timezones() | {"UTC"})


class Pipeline(Strict):
    """A DAG of crawl and ETL tasks, with an optional schedule."""

    name: PipelineName
    description: str = ""
    schedule: Schedule | None = None
    parallelism: int = Field(
        8, ge=1, le=256, description="Most tasks of one run executing at the same time."
    )
    defaults: Defaults = Defaults()
    tasks: list[Task] = Field(..., min_length=1)

    model_config = ConfigDict(json_schema_extra={"title": "stepcrawl pipeline"})

    @model_validator(mode="after")
    def _graph(self) -> Self:
        issues = check_graph([task.graph_node() for task in self.tasks])
        issues += self._settings_issues()
        if issues:
            # Carries located issues (tasks[i]...) out of validation; see loading.py.
            raise InvalidGraphError(issues)
        return self

    def _settings_issues(self) -> list[Issue]:
        """Problems that only show once a task's settings are layered over the defaults."""
        delays = {"base_delay", "max_delay"}
        checks: list[tuple[tuple[str | int, ...], RetryPolicy, str]] = [
            (("defaults", "retry"), self.defaults.retry, "")
        ]
        for i, task in enumerate(self.tasks):
            own = task.retry
            if (
                own is not None
                and own.model_fields_set & delays
                and not delays <= own.model_fields_set
            ):
                inherited = (delays - own.model_fields_set).pop()
                checks.append(
                    (
                        ("tasks", i, "retry"),
                        layered(self.defaults.retry, own),
                        f" ({inherited} comes from defaults.retry)",
                    )
                )
        issues: list[Issue] = []
        for loc, policy, origin in checks:
            try:
                check_delays(policy)
            except PydanticCustomError as exc:
                ctx = exc.context or {}
                issues.append(Issue(loc, f"{ctx['problem']}{origin}", str(ctx["hint"])))
        return issues

    def dag(self) -> Dag:
        """The task graph (valid: the model checked it)."""
        return Dag(task.graph_node() for task in self.tasks)

    def task(self, task_id: str) -> CrawlTask | TransformTask | ValidateTask | LoadTask:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def settings_for(self, task_id: str) -> TaskSettings:
        """Effective settings of a task: the keys it set, over the pipeline defaults."""
        task = self.task(task_id)
        d = self.defaults
        crawl = task if isinstance(task, CrawlTask) else None
        return TaskSettings(
            retry=layered(d.retry, task.retry),
            politeness=layered(d.politeness, crawl.politeness if crawl else None),
            limits=layered(d.limits, crawl.limits if crawl else None),
            timeout=task.timeout if task.timeout is not None else d.timeout,
            heartbeat=task.heartbeat if task.heartbeat is not None else d.heartbeat,
        )

    def version_hash(self) -> str:
        """Stable 12-hex-digit fingerprint of the pipeline's content (not of its file layout)."""
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]
