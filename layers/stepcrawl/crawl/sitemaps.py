"""Sitemaps: page URLs from sitemaps and sitemap indexes, fetched like any page.

A crawl task's ``sitemaps:`` names sitemap URLs, or ``robots`` for the ``Sitemap:`` lines of
the robots.txt of its seeds' sites (docs/pipelines.md, "Sitemaps"). Sitemap documents are not
read by a side client: they are frontier entries of their own kind (``UrlRef.kind``:
``sitemap``, or ``robots`` for a robots.txt read for its sitemaps), admitted by the task's log
like seeds, fed by the shard feeder (politeness, breakers), fetched by the fetch stage
(robots.txt rules, network guard, byte caps, retries; any content type: servers label sitemaps
every way) and recorded once by the commit. Only their parse step differs: instead of items
and links it yields child sitemaps (kind ``sitemap``, one level deeper) and page URLs (kind
``page``, depth 0 like seeds), both only on the task's allowed domains, pages older than
``sitemap_since`` left out.

Counting: a sitemap document is a page of the task. It is a request like any other, so it
counts in ``pages``, ``ok``/``failed``, ``bytes`` and against ``limits.max_pages``; it yields
no items; the URLs it lists are admitted like links (``claimed``, the page budget, the
``LinksDiscovered``/``LinksAdmitted`` metrics).

Parsing: one strict pass of the standard library's expat (DOCTYPE and entity declarations
refused: no entity expansion, nothing external) checks that the document is well-formed XML
with a sitemap's root and reads its entries: an index's ``<sitemap>``, a ``<urlset>``'s
``<url>``, an RSS ``<item>``, an Atom ``<entry>``, each with its date (``<lastmod>``,
``<pubDate>``, ``<updated>``), so an index entry older than ``sitemap_since`` is skipped
whole. A plain-text sitemap is its lines that are http(s) URLs. (Written here rather than
taken from ultimate-sitemap-parser, which this pass used to sit in front of: usp imports
``requests`` and ``python-dateutil``, whose ``urllib3`` and ``dateutil`` would shadow the
Lambda runtime's own in the layer; docs/architecture.md.)
A document that is not a sitemap, or not well-formed, ends failed with the class ``sitemap``
and a reason naming the line and column; the entries read before the error are still crawled.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
import xml.parsers.expat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urlsplit

from protego import Protego

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.messages import PageEnvelope, UrlRef
from stepcrawl.extract.charset import decode_body
from stepcrawl.extract.page import default_allowed_domains
from stepcrawl.extract.urls import absolute_url, canonical_url, domain_set, host_allowed, web_url
from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.body import CappedBody
from stepcrawl.fetch.policy import FetchPolicy
from stepcrawl.fetch.result import FetchResult
from stepcrawl.pipeline.crawl_task import CrawlTask
from stepcrawl.pipeline.models import Pipeline
from stepcrawl.pipeline.sitemap_options import SITEMAPS_FROM_ROBOTS

if TYPE_CHECKING:
    from stepcrawl.crawl.context import CrawlServices

__all__ = [
    "MAX_NESTING",
    "PAGE",
    "ROBOTS",
    "SITEMAP",
    "SITEMAP_FAILURE",
    "Entries",
    "document_policy",
    "fetch_refs",
    "read_document",
    "read_robots",
    "read_sitemap",
    "start_documents",
]

logger = logging.getLogger("stepcrawl.parse")

#: Kinds of frontier entries (``UrlRef.kind``).
PAGE: Final = "page"
SITEMAP: Final = "sitemap"
ROBOTS: Final = "robots"
#: The failure class of a sitemap that cannot be read (docs/resilience.md).
SITEMAP_FAILURE: Final = "sitemap"
#: Sitemaps below a task's own (robots.txt -> index -> sitemap is 2): deeper ones are dropped,
#: so a site cannot chain indexes without end.
MAX_NESTING: Final = 5
#: Root elements of what is read as a sitemap: the protocol's two, and RSS and Atom feeds.
_ROOTS: Final = frozenset({"urlset", "sitemapindex", "rss", "feed"})
_GZIP_MAGIC: Final = b"\x1f\x8b"
_YEAR_MONTH: Final = re.compile(r"\d{4}(-\d{2})?")


# ----------------------------------------------------------------------------------- dispatch


def start_documents(task: CrawlTask, seed_urls: Sequence[str]) -> dict[str, str]:
    """The sitemap documents a task starts from: canonical URL -> kind, in the task's order.

    ``robots`` reads the robots.txt of each seed's site (``seed_urls``: the task's own seeds
    and those taken from upstream items); a task without seeds, that of each allowed domain
    over https.
    """
    found: dict[str, str] = {}
    for source in task.sitemaps:
        if source != SITEMAPS_FROM_ROBOTS:
            found.setdefault(canonical_url(source), SITEMAP)
            continue
        for origin in _origins(task, seed_urls):
            found.setdefault(canonical_url(f"{origin}/robots.txt"), ROBOTS)
    return found


def _origins(task: CrawlTask, seed_urls: Sequence[str]) -> list[str]:
    origins: dict[str, None] = {}
    for url in seed_urls:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.netloc:
            origins.setdefault(f"{parts.scheme}://{parts.netloc}")
    if not origins:
        origins = dict.fromkeys(f"https://{domain}" for domain in task.allowed_domains)
    return list(origins)


# -------------------------------------------------------------------------------------- fetch


class _Fetches(Protocol):
    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]: ...


def document_policy(policy: FetchPolicy) -> FetchPolicy:
    """The task's policy for its sitemap documents: the same hosts, caps, robots rules and
    guard, any content type (``.xml.gz`` comes as gzip, octet-stream, XML or text)."""
    return replace(policy, allowed_content_types=())


async def fetch_refs(
    fetcher: _Fetches, refs: Sequence[UrlRef], policy: FetchPolicy, concurrency: int
) -> list[FetchResult]:
    """Fetch a batch's URLs in order: pages under ``policy``, sitemap documents under
    :func:`document_policy` (both at once)."""
    if all(ref.kind == PAGE for ref in refs):
        return await fetcher.fetch_many([ref.url for ref in refs], policy, concurrency)
    pages = [n for n, ref in enumerate(refs) if ref.kind == PAGE]
    documents = [n for n, ref in enumerate(refs) if ref.kind != PAGE]
    page_results, document_results = await asyncio.gather(
        fetcher.fetch_many([refs[n].url for n in pages], policy, concurrency),
        fetcher.fetch_many([refs[n].url for n in documents], document_policy(policy), concurrency),
    )
    results: dict[int, FetchResult] = {
        **dict(zip(pages, page_results, strict=True)),
        **dict(zip(documents, document_results, strict=True)),
    }
    return [results[n] for n in range(len(refs))]


# -------------------------------------------------------------------------------------- parse


@dataclass
class Entries:
    """What one sitemap document lists."""

    #: Page URLs with their ``lastmod`` (None when the entry has none), as written.
    pages: list[tuple[str, datetime | None]] = field(default_factory=list)
    #: Child sitemaps (of an index, or of robots.txt) with their ``lastmod``.
    sitemaps: list[tuple[str, datetime | None]] = field(default_factory=list)
    #: Why the document could not be read, or not all of it; None if it could.
    error: str | None = None


def read_document(
    services: CrawlServices, pipeline: Pipeline, task: CrawlTask, envelope: PageEnvelope
) -> PageCommit:
    """The parse step of a fetched sitemap document: a page commit whose children are the
    child sitemaps and page URLs it lists that the task may visit (no items)."""
    started = time.perf_counter()
    ref = envelope.ref
    body = envelope.inline_body()
    if body is None and envelope.body_key is not None:
        body = services.blobs.get(envelope.body_key)
    url = envelope.final_url or ref.url
    try:
        if ref.kind == ROBOTS:
            entries = read_robots(body or b"", envelope.content_type, url)
        else:
            max_bytes = int(pipeline.settings_for(task.id).limits.max_bytes_per_page)
            entries = read_sitemap(body or b"", envelope.content_type, url, max_bytes=max_bytes)
        children = _children(task, ref, entries)
    except Exception as error:
        # Loud, like extraction's: a bug here is ours, not the site's.
        logger.exception("sitemap parser error on %s (task %s)", ref.url, task.id)
        reason = f"parser_error: {type(error).__name__}: {error}"[:500]
        return _commit(envelope, started, reason=reason, failure="parser")
    if entries.error is not None:
        logger.warning("sitemap %s of task %s: %s", ref.url, task.id, entries.error)
    return _commit(envelope, started, children=children, reason=entries.error)


def _commit(
    envelope: PageEnvelope,
    started: float,
    *,
    children: list[UrlRef] | None = None,
    reason: str | None = None,
    failure: str = SITEMAP_FAILURE,
) -> PageCommit:
    ok = reason is None
    return PageCommit(
        envelope.ref,
        ok,
        envelope.status,
        "ok" if ok else f"{failure}: {reason}"[:500],
        children=children or [],
        failure="" if ok else failure,
        size=envelope.size,
        fetch_ms=envelope.elapsed_ms,
        parse_ms=(time.perf_counter() - started) * 1000,
    )


def _children(task: CrawlTask, ref: UrlRef, entries: Entries) -> list[UrlRef]:
    """The entries the task visits: on its domains, not older than ``sitemap_since``, child
    sitemaps within :data:`MAX_NESTING`; canonical, each once, sitemaps first."""
    domains = domain_set(default_allowed_domains(task))
    since = task.sitemap_since
    base = ref.url
    out: dict[str, UrlRef] = {}
    dropped = {"off_domain": 0, "older": 0, "too_deep": 0, "bad_url": 0}
    listed = [(SITEMAP, u, m) for u, m in entries.sitemaps] + [
        (PAGE, u, m) for u, m in entries.pages
    ]
    for kind, raw, lastmod in listed:
        url = web_url(absolute_url(raw, base))
        if url is None:
            dropped["bad_url"] += 1
        elif not host_allowed(_host(url), domains):
            dropped["off_domain"] += 1
        elif since is not None and lastmod is not None and _aware(lastmod) < since:
            dropped["older"] += 1
        elif kind == SITEMAP and ref.depth + 1 > MAX_NESTING:
            dropped["too_deep"] += 1
        elif kind == SITEMAP:
            out.setdefault(url, UrlRef(url=url, depth=ref.depth + 1, kind=SITEMAP))
        else:
            out.setdefault(url, UrlRef(url=url, depth=0))
    left_out = {k: v for k, v in dropped.items() if v}
    logger.info(
        "sitemap %s of task %s: %d sitemaps, %d pages%s",
        ref.url,
        task.id,
        sum(c.kind == SITEMAP for c in out.values()),
        sum(c.kind == PAGE for c in out.values()),
        f"; left out: {left_out}" if left_out else "",
    )
    return list(out.values())


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").rstrip(".")


def _aware(moment: datetime) -> datetime:
    """A lastmod without an offset is read as UTC (as ``sitemap_since`` is)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def read_robots(body: bytes, content_type: str | None, url: str) -> Entries:
    """The ``Sitemap:`` lines of a robots.txt (protego), resolved against its URL."""
    text, _ = decode_body(body, content_type)
    return Entries(sitemaps=[(absolute_url(s, url), None) for s in Protego.parse(text).sitemaps])


def read_sitemap(body: bytes, content_type: str | None, url: str, *, max_bytes: int) -> Entries:
    """What a sitemap document (XML, gzip-compressed or not, or a plain list of URLs) lists.

    ``max_bytes`` caps the decompressed size (a gzip bomb stops there). Never raises for what
    a site sends: an unreadable document comes back with ``error`` set (and what was read
    before the error).
    """
    if body[:2] == _GZIP_MAGIC:  # a .xml.gz served as it is (not as Content-Encoding)
        inflated = CappedBody("gzip", max_bytes=max_bytes, wire_cap=len(body))
        try:
            inflated.feed(body)
            body = inflated.finish()
        except FetchAbort as abort:
            return Entries(error=f"gzip: {abort.reason}: {abort.detail}")
    text, _ = decode_body(body, content_type)
    if not text.strip():
        return Entries(error="not a sitemap: the document is empty")
    if not text.lstrip().startswith("<"):
        return _plain_text(text, url)
    scan = _scan(text)
    if scan.root is not None and scan.root not in _ROOTS:
        return Entries(
            error=f"not a sitemap: the root element is <{scan.root}> (a sitemap is <urlset> "
            "or <sitemapindex>; RSS and Atom feeds are read too)"
        )
    if scan.refused is not None or scan.root is None:
        return Entries(error=scan.refused or f"not XML: {scan.error}")
    if scan.root == "sitemapindex":
        entries = Entries(sitemaps=scan.entries)
    else:
        entries = Entries(pages=scan.entries)
    if scan.error is not None:
        read = len(entries.sitemaps) + len(entries.pages)
        entries.error = f"malformed XML: {scan.error} ({read} entries before it were read)"
    return entries


#: Per root element: the element of one entry, the child holding its URL (Atom: the
#: ``href`` of its ``<link>``) and the children holding its date, first found first used.
_ENTRY: Final = {
    "sitemapindex": ("sitemap", "loc", ("lastmod",)),
    "urlset": ("url", "loc", ("lastmod",)),
    "rss": ("item", "link", ("pubDate",)),
    "feed": ("entry", "link", ("updated", "published")),
}


@dataclass
class _Scan:
    root: str | None = None
    error: str | None = None
    refused: str | None = None
    #: (URL, date) of each entry: an index's child sitemaps, or the pages of the others
    entries: list[tuple[str, datetime | None]] = field(default_factory=list)


class _RefusedError(Exception):
    pass


class _Entries:
    """The expat handlers that collect a document's entries (see :data:`_ENTRY`): an entry
    is a direct child of the root (of RSS's ``<channel>``), read when it closes."""

    def __init__(self, scan: _Scan) -> None:
        self.scan = scan
        self.path: list[str] = []
        self.text: list[str] = []
        self.entry: dict[str, str] = {}

    def _depth(self) -> int:
        return 2 if self.scan.root == "rss" else 1  # <rss><channel><item>

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rpartition(" ")[2]
        if not self.path:
            self.scan.root = local
        self.path.append(local)
        self.text.clear()
        kind = _ENTRY.get(self.scan.root or "")
        atom_link = self.scan.root == "feed" and local == "link"
        # Atom: <link href="..."/>, the entry's own page (rel alternate, or no rel).
        if (
            kind
            and atom_link
            and self._in_entry(kind[0])
            and attrs.get("rel", "alternate") == "alternate"
            and "link" not in self.entry
        ):
            self.entry["link"] = attrs.get("href", "")

    def _in_entry(self, element: str) -> bool:
        depth = self._depth()
        return len(self.path) == depth + 2 and self.path[depth] == element

    def end(self, _name: str) -> None:
        local = self.path.pop()
        kind = _ENTRY.get(self.scan.root or "")
        if kind is not None:
            element, url_child, date_children = kind
            depth = self._depth()
            if len(self.path) == depth + 1 and self.path[depth] == element:
                # Atom's URL is an attribute (read at the start); every other one is text.
                from_text = local in date_children or (
                    local == url_child and self.scan.root != "feed"
                )
                if from_text:
                    self.entry.setdefault(local, "".join(self.text).strip())
            elif local == element and len(self.path) == depth:
                if url := self.entry.get(url_child, "").strip():
                    dates = (self.entry.get(d) for d in date_children)
                    self.scan.entries.append((url, _date(next((d for d in dates if d), None))))
                self.entry.clear()
        self.text.clear()

    def characters(self, data: str) -> None:
        self.text.append(data)


def _scan(text: str) -> _Scan:
    """One strict expat pass: the root element, the first well-formedness error, and the
    entries (:data:`_ENTRY`) read before it.

    A DOCTYPE stops it before anything is declared: a sitemap has none, and its entities
    could expand (billion laughs) or name external files.
    """
    scan = _Scan()
    parser = xml.parsers.expat.ParserCreate(namespace_separator=" ")
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    handlers = _Entries(scan)

    def doctype(name: str, *_: object) -> None:
        if name.lower() == "html":
            raise _RefusedError("not a sitemap: an HTML page (<!DOCTYPE html>)")
        raise _RefusedError(
            f"refused: a DOCTYPE declaration (<!DOCTYPE {name}>); sitemaps have none, and "
            "XML entities are not expanded"
        )

    def entity(name: str, *_: object) -> None:
        raise _RefusedError(
            f"refused: an entity declaration ({name}); XML entities are not expanded"
        )

    parser.StartElementHandler = handlers.start
    parser.EndElementHandler = handlers.end
    parser.CharacterDataHandler = handlers.characters
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    try:
        parser.Parse(text, True)
    except _RefusedError as refused:
        scan.refused = str(refused)
    except xml.parsers.expat.ExpatError as error:
        message = xml.parsers.expat.errors.messages.get(error.code, str(error))
        scan.error = f"{message} at line {error.lineno}, column {error.offset + 1}"
    return scan


def _date(value: str | None) -> datetime | None:
    """A sitemap's date: W3C Datetime (``<lastmod>``, Atom; ``YYYY`` and ``YYYY-MM`` too) or
    RFC 822 (RSS's ``<pubDate>``); naive when it names no offset; ``None`` when unreadable."""
    if not value:
        return None
    text = value.strip()
    if _YEAR_MONTH.fullmatch(text):
        text = f"{text}-01" if len(text) == 7 else f"{text}-01-01"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        return email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None


def _plain_text(text: str, url: str) -> Entries:
    """A sitemap that is a list of URLs, one a line (the protocol's text format): the lines
    that are absolute http(s) URLs."""
    del url  # the text format's URLs are absolute (the protocol says so)
    pages: list[tuple[str, datetime | None]] = []
    for line in text.splitlines():
        candidate = line.strip()
        parts = urlsplit(candidate)
        if parts.scheme in ("http", "https") and parts.netloc and " " not in candidate:
            pages.append((candidate, None))
    if not pages:
        return Entries(error="not a sitemap: neither XML nor a list of URLs")
    return Entries(pages=pages)
