"""The crawl task: fetch pages from seeds (or sitemaps, or upstream items), follow links,
extract items; its keys and the checks that they agree with each other.

The sitemap, render and request keys are checked in their own modules (sitemap_options.py,
render_options.py, request_options.py); the seeding and incremental checks are here.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from stepcrawl.pipeline.crawl_rules import ExtractRule, FollowRule
from stepcrawl.pipeline.monitors import Monitors
from stepcrawl.pipeline.render_options import (
    DEFAULT_RENDER_TIMEOUT,
    MAX_RENDER_TIMEOUT,
    MIN_RENDER_TIMEOUT,
    RenderMode,
    WaitFor,
    check_render_keys,
)
from stepcrawl.pipeline.request_options import (
    Cookies,
    ProxySettings,
    RequestHeaders,
    check_request_keys,
    scrub_request_secrets,
)
from stepcrawl.pipeline.settings import Limits, Politeness
from stepcrawl.pipeline.sitemap_options import (
    SITEMAPS_FROM_ROBOTS,
    SitemapSince,
    SitemapSource,
    check_sitemap_keys,
)
from stepcrawl.pipeline.task_base import TaskBase
from stepcrawl.pipeline.types import Domain, Duration, HttpUrl, config_error

__all__ = ["CrawlTask"]


class CrawlTask(TaskBase):
    """Fetch pages from seeds, follow links, extract items."""

    type: Literal["crawl"] = "crawl"
    seeds: list[HttpUrl] = Field(default_factory=list, description="Start URLs.")
    seed_field: str | None = Field(
        None, description="Also seed from this field of the items of `inputs` (URLs)."
    )
    allowed_domains: list[Domain] = Field(
        default_factory=list, description="Hosts to stay on; default: the seeds' hosts."
    )
    follow: list[FollowRule] = Field(default_factory=list)
    extract: list[ExtractRule] = Field(default_factory=list)
    limits: Limits | None = None
    politeness: Politeness | None = None
    # Incremental recrawls (crawl/incremental.py, docs/pipelines.md "Incremental recrawls").
    incremental: bool = Field(
        False,
        description="Keep each page's validators (ETag, Last-Modified), items fingerprint and "
        "links across runs: later runs send conditional requests, and a known page that now "
        "answers 404 or 410 yields a tombstone item.",
    )
    incremental_ttl: Duration = Field(
        30 * 86400,
        ge=3600,
        le=366 * 86400,
        description="How long a page's kept state lives without a refresh (1h to 366d); a page "
        "not seen for this long is new again.",
    )
    emit: Literal["changed", "all"] | None = Field(
        None,
        description="Incremental tasks only: changed (the default) writes the items of new and "
        "changed pages only; all writes every page's items (no conditional requests then).",
    )
    allow_private_network: bool = Field(
        False,
        description="Allow private, loopback and link-local addresses (local sites, tests). "
        "Off by default: a crawler must not be steered into the network it runs in.",
    )
    sitemaps: list[SitemapSource] = Field(
        default_factory=list,
        description="Sitemaps to take page URLs from (indexes followed, gzip read), or the "
        "word robots: the Sitemap: lines of the robots.txt of the seeds' sites.",
    )
    sitemap_since: SitemapSince | None = Field(
        None,
        description="Skip sitemap entries whose lastmod is before this date or time (UTC "
        "unless it has an offset); entries without lastmod are kept.",
    )
    archive: Literal["warc"] | None = Field(
        None,
        description="warc: keep every response fetched (and its request) as WARC records, "
        "one archive/<pipeline>/<run>/<task>/<bundle>.warc.gz per parse bundle "
        "(stepcrawl replay re-runs extraction over them).",
    )
    headers: RequestHeaders = Field(
        default_factory=dict,
        description="Request headers sent with every request to the task's own hosts "
        "(robots.txt and sitemaps included); docs/pipelines.md, Headers, cookies and proxies.",
    )
    cookies: Cookies = Field(
        default_factory=dict,
        description="Cookies (name: value) sent as one Cookie header to the task's own hosts.",
    )
    proxy: ProxySettings | None = Field(
        None,
        description="Proxies for the task's requests (a URL, a list, or {urls, secret}): each "
        "host always goes through the same one; credentials from a Secrets Manager secret.",
    )

    # Browser rendering (pipeline/render_options.py, docs/pipelines.md "Browser rendering").
    render: RenderMode | None = Field(
        None,
        description="browser: load every page in headless Chromium and extract from the "
        "rendered DOM (a follow rule can render only some pages); default: plain fetch.",
    )
    wait_for: WaitFor | None = Field(
        None,
        description="When a rendered page is ready: a CSS selector it must contain, "
        "networkidle, or load (its load event); default: when the item selector of an extract "
        "rule that applies to it matches (a page no rule applies to: network idle for 500 ms).",
    )
    render_timeout: Duration = Field(
        DEFAULT_RENDER_TIMEOUT,
        ge=MIN_RENDER_TIMEOUT,
        le=MAX_RENDER_TIMEOUT,
        description="A rendered page's whole budget (load, wait_for, DOM), 1s to 120s: a page "
        "not ready by then ends failed (render_timeout), as does, without wait_for, a page a "
        "rule's match selected whose item selectors never matched.",
    )

    # After extract: its checks name the fields and rules declared above.
    monitors: Monitors | None = Field(
        None,
        description="Data-quality checks of each run's items against thresholds and the "
        "task's last runs (docs/pipelines.md, Data quality).",
    )

    @field_validator("monitors")
    @classmethod
    def _monitors_name_known_fields(
        cls, monitors: Monitors | None, info: ValidationInfo
    ) -> Monitors | None:
        if monitors is not None:
            _check_monitor_names(monitors, info.data.get("extract") or [])
            if info.data.get("incremental") and (monitors.min_items or monitors.items_vs_baseline):
                raise config_error(
                    "monitor_items",
                    "an incremental task re-parses only the pages that changed, so its items "
                    "count how much changed, not how much there is",
                    "remove min_items and items_vs_baseline (field_coverage and rule_matched "
                    "still apply)",
                )
        return monitors

    @model_validator(mode="before")
    @classmethod
    def _scrub_request_secrets(cls, data: Any) -> Any:
        # before any check: no error text may quote a proxy URL's password
        return scrub_request_secrets(data)

    @model_validator(mode="after")
    def _keys_agree(self) -> Self:
        # The order decides which one problem is reported when several keys disagree.
        check_render_keys(self)
        check_request_keys(self.headers, self.cookies)
        _check_incremental_keys(self)
        _check_seeding(self)
        check_sitemap_keys(self)
        return self

    @property
    def sitemap_urls(self) -> list[str]:
        """The sitemap URLs the task names itself (``robots`` aside)."""
        return [source for source in self.sitemaps if source != SITEMAPS_FROM_ROBOTS]

    @property
    def emits_all(self) -> bool:
        """Whether every page's items are written (not incremental, or ``emit: all``)."""
        return not self.incremental or self.emit == "all"

    @property
    def consumes(self) -> list[str]:
        # A crawl only reads upstream items when it is seeded from them.
        if self.seed_field is None:
            return list(self.inputs or [])
        return super().consumes


def _check_incremental_keys(task: CrawlTask) -> None:
    """``emit`` and ``incremental_ttl`` are set only on incremental tasks."""
    for key in ("emit", "incremental_ttl"):
        if key in task.model_fields_set and not task.incremental:
            raise config_error(
                key,
                f"crawl task {task.id!r} sets {key} but is not incremental",
                f"add incremental: true, or remove {key} (it applies to incremental recrawls only)",
            )


def _check_seeding(task: CrawlTask) -> None:
    """The task has something to start from, and seeding from items is fully specified."""
    if not task.seeds and task.seed_field is None and not task.sitemaps:
        raise config_error(
            "seeds",
            f"crawl task {task.id!r} has nothing to start from",
            "add seeds: [URL, ...], seed_field: FIELD to seed from the items of inputs, "
            "or sitemaps: [URL, ...]",
        )
    if task.inputs and task.seed_field is None:
        raise config_error(
            "inputs",
            f"crawl task {task.id!r} has inputs but no seed_field",
            "a crawl reads its inputs only for seed URLs: set seed_field: FIELD",
        )
    if task.seed_field is not None and not task.consumes:
        raise config_error(
            "seed_field",
            f"crawl task {task.id!r} has seed_field but nothing to read it from",
            "set depends_on (or inputs) to the tasks whose items carry the URLs",
        )
    if task.seed_field is not None and not task.seeds and not task.allowed_domains:
        raise config_error(
            "allowed_domains",
            f"crawl task {task.id!r} is seeded from items, so its hosts are unknown",
            "list the hosts it may visit in allowed_domains (otherwise it could go anywhere)",
        )


def _check_monitor_names(monitors: Monitors, rules: list[ExtractRule]) -> None:
    """Each field or rule a monitor names is one of the task's extract rules' (a bare field
    name: a field of one of them, ``rule.field``: that rule's)."""
    fields = {f"{rule.name}.{name}" for rule in rules for name in rule.fields}
    bare = {name.split(".", 1)[1] for name in fields}
    names = {rule.name for rule in rules}
    known = ", ".join(sorted(fields)) or "none: the task has no extract rules"
    for where, keys, rules_too in (
        ("field_coverage", monitors.field_coverage, False),
        ("rule_matched", monitors.rule_matched, True),
    ):
        for key in keys:
            if key in fields or key in bare or (rules_too and key in names):
                continue
            what = "an extract rule or a field" if rules_too else "a field"
            raise config_error(
                "monitor_name",
                f"monitors.{where} names {key!r}, which is not {what} of this task",
                f"use one of its fields ({known})" + (" or rules" if rules_too else ""),
            )
