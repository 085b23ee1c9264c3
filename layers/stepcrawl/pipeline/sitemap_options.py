"""The sitemap keys of a crawl task: ``sitemaps`` (URLs or ``robots``), ``sitemap_since``, and
the checks that they agree with the task's seeds and allowed domains."""

from __future__ import annotations

import contextlib
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

from stepcrawl.pipeline.types import config_error

if TYPE_CHECKING:
    from stepcrawl.pipeline.crawl_task import CrawlTask

__all__ = ["SITEMAPS_FROM_ROBOTS", "SitemapSince", "SitemapSource", "check_sitemap_keys"]


#: ``sitemaps: [robots]``: the sitemaps the seeds' sites list in their robots.txt.
SITEMAPS_FROM_ROBOTS: Final = "robots"


def _check_sitemap_source(value: str) -> str:
    text = value.strip()
    if text.lower() == SITEMAPS_FROM_ROBOTS:
        return SITEMAPS_FROM_ROBOTS
    parts = urlsplit(text)
    if parts.scheme in {"http", "https"} and parts.hostname:
        return text
    raise config_error(
        "sitemap",
        f"{value!r} is neither a sitemap URL nor robots",
        "write an absolute URL (https://example.com/sitemap.xml), or robots to take the "
        "sitemaps the site lists in its robots.txt",
    )


SitemapSource = Annotated[
    str,
    AfterValidator(_check_sitemap_source),
    WithJsonSchema(
        {
            "anyOf": [
                {"const": SITEMAPS_FROM_ROBOTS},
                {"type": "string", "pattern": "^https?://", "format": "uri"},
            ],
            "description": "A sitemap URL, or robots (the Sitemap: lines of robots.txt).",
        }
    ),
]


def _parse_since(value: Any) -> Any:
    """A date or a date and time (ISO 8601) -> an aware datetime (UTC unless it says)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not ISO 8601: refused below, with a hint
            value = datetime.fromisoformat(value.strip())
    if not isinstance(value, date):  # a number is no date (pydantic would read epoch seconds)
        raise config_error(
            "sitemap_since",
            f"{value!r} is not a date or a date and time",
            "write 2026-05-01 or 2026-05-01T12:00:00Z (ISO 8601; UTC unless an offset is given)",
        )
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


SitemapSince = Annotated[
    datetime,
    BeforeValidator(_parse_since),
    WithJsonSchema(
        {
            "type": "string",
            "anyOf": [{"format": "date"}, {"format": "date-time"}],
            "description": "A date (2026-05-01) or a date and time (2026-05-01T12:00:00Z).",
        }
    ),
]


def check_sitemap_keys(task: CrawlTask) -> None:
    """The sitemap keys of a crawl task make sense with its seeds and domains; else a located
    error."""
    if task.sitemap_since is not None and not task.sitemaps:
        raise config_error(
            "sitemap_since",
            f"crawl task {task.id!r} has sitemap_since but reads no sitemaps",
            "add sitemaps: [URL, ...] (or [robots]), or remove sitemap_since",
        )
    robots = SITEMAPS_FROM_ROBOTS in task.sitemaps
    if robots and not task.seeds and task.seed_field is None and not task.allowed_domains:
        raise config_error(
            "sitemaps",
            f"crawl task {task.id!r} reads sitemaps from robots.txt but names no site",
            "robots reads the robots.txt of the seeds' sites: add seeds, or "
            "allowed_domains (then https://DOMAIN/robots.txt is read)",
        )
    for url in task.sitemap_urls:
        host = (urlsplit(url).hostname or "").rstrip(".")
        if task.allowed_domains and not any(
            host == d or host.endswith("." + d) for d in task.allowed_domains
        ):
            raise config_error(
                "sitemaps",
                f"sitemap {url} is not on the task's allowed_domains",
                f"add {host} to allowed_domains, or remove that sitemap",
            )
