"""Replay: a crawl task's extraction re-run over WARC records, without fetching anything.

The pages come from WARC files: stepcrawl's own archives (``archive: warc``) or any other
crawler's (wget ``--warc-file``, Heritrix, Browsertrix). Each ``response`` record with a 2xx
status and an HTML content type (and each such ``resource`` record) is one page, parsed by
the very code of the parse stage (:func:`stepcrawl.extract.parse_page`) with the task's
rules, its items decorated as the parse stage does (``_url``, ``_task``, ``_fetched_at``,
``_n``). ``_url`` is the record's ``Stepcrawl-URL`` (the frontier's URL) or else its
``WARC-Target-URI``; ``_fetched_at`` is its ``WARC-Date``. Records stepcrawl marked as
sitemaps or robots.txt are skipped. A URL archived twice yields its items once (the first
record, as the task log records a page once). Links are not followed: replay
re-extracts what was archived, it does not crawl.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from stepcrawl.archive.warc import HEADER_KIND, HEADER_URL
from stepcrawl.extract import parse_page
from stepcrawl.pipeline.crawl_task import CrawlTask

__all__ = [
    "ReplayError",
    "ReplayPage",
    "ReplayStats",
    "archive_files",
    "read_pages",
    "replay_items",
]

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_SUFFIXES = (".warc", ".warc.gz")


@dataclass(frozen=True, slots=True)
class ReplayPage:
    """A page as a WARC record holds it."""

    url: str  # items' _url
    page_url: str  # what relative links resolve against (WARC-Target-URI)
    fetched_at: str
    content_type: str | None
    body: bytes


@dataclass
class ReplayStats:
    """What a replay read and made."""

    records: int = 0
    pages: int = 0
    items: int = 0
    dropped: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "pages": self.pages,
            "items": self.items,
            "dropped": self.dropped,
            "skipped": dict(sorted(self.skipped.items())),
            "problems": len(self.problems),
        }


def archive_files(paths: Sequence[Path]) -> list[Path]:
    """``paths`` with directories replaced by the WARC files under them (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p for p in path.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES)
            )
        else:
            found.append(path)
    return found


def _fetched_at(warc_date: str | None) -> str:
    """WARC-Date as the parse stage writes ``_fetched_at`` (ISO 8601, seconds, UTC)."""
    if not warc_date:
        return ""
    try:
        moment = datetime.fromisoformat(warc_date)
    except ValueError:
        return warc_date
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def read_pages(stream: IO[bytes], stats: ReplayStats | None = None) -> Iterator[ReplayPage]:
    """The pages of one WARC stream (gzipped or not), in record order."""
    stats = stats if stats is not None else ReplayStats()
    for record in ArchiveIterator(stream):
        stats.records += 1
        kind = record.rec_type
        if kind not in ("response", "resource"):
            continue
        headers = record.rec_headers
        if (headers.get_header(HEADER_KIND) or "page") != "page":
            stats.skipped["not a page"] += 1
            continue
        if kind == "response":
            http = record.http_headers
            if http is None:
                stats.skipped["not HTTP"] += 1
                continue
            status = http.get_statuscode()
            if not (status or "").startswith("2"):
                stats.skipped[f"status {status}"] += 1
                continue
            content_type = http.get_header("Content-Type")
        else:
            content_type = headers.get_header("Content-Type")
        if content_type and content_type.split(";")[0].strip().lower() not in _HTML_TYPES:
            stats.skipped["not HTML"] += 1
            continue
        target = headers.get_header("WARC-Target-URI") or ""
        yield ReplayPage(
            url=headers.get_header(HEADER_URL) or target,
            page_url=target,
            fetched_at=_fetched_at(headers.get_header("WARC-Date")),
            content_type=content_type,
            body=record.content_stream().read(),
        )


class ReplayError(ValueError):
    """An archive that is not a readable WARC (or ARC) file."""


def _pages_of(
    source: Path | IO[bytes], stream: IO[bytes], stats: ReplayStats
) -> Iterator[ReplayPage]:
    try:
        yield from read_pages(stream, stats)
    except ArchiveLoadFailed as error:
        name = source if isinstance(source, Path) else getattr(source, "name", "an archive")
        raise ReplayError(f"{name}: not a WARC file ({error})") from error


def replay_items(
    sources: Iterable[Path | IO[bytes]], task: CrawlTask, stats: ReplayStats | None = None
) -> Iterator[dict[str, Any]]:
    """The items ``task``'s rules make of the pages in ``sources`` (WARC files or streams),
    exactly as the parse stage would have made them (see the module doc)."""
    stats = stats if stats is not None else ReplayStats()
    seen: set[str] = set()
    for source in sources:
        with contextlib.ExitStack() as stack:
            stream = stack.enter_context(source.open("rb")) if isinstance(source, Path) else source
            for page in _pages_of(source, stream, stats):
                if page.url in seen:
                    stats.skipped["archived again"] += 1
                    continue
                seen.add(page.url)
                stats.pages += 1
                parsed = parse_page(page.body, page.content_type, page.page_url, task)
                stats.dropped += parsed.dropped
                stats.problems += [f"{page.url}: {p}" for p in parsed.problems]
                for n, item in enumerate(parsed.items):
                    stats.items += 1
                    yield {
                        **item,
                        "_url": page.url,
                        "_task": task.id,
                        "_fetched_at": page.fetched_at,
                        "_n": n,
                    }
