"""``archive: warc``: a parse bundle's fetched responses (and their requests) as one WARC file.

One gzipped WARC 1.1 file per parse bundle, at :func:`archive_key`
(``archive/<pipeline>/<run>/<task>/<bundle id>.warc.gz``), written by the parse stage after
the bundle's commit and before the task can finish. It holds a ``warcinfo`` record, then for
each page the commit recorded (as fetched: ``ok`` outcomes, sitemaps and robots.txt
included) a ``request`` and a ``response`` record (or a ``resource`` record for a page that
came without an HTTP exchange). Everything in it comes from the bundle's message, with
record ids derived from the bundle id, so a redelivered bundle writes the same key with the
same bytes.

What a response record holds: the status line and headers as received, and the body as the
fetcher kept it: decoded (no ``Content-Encoding``), at most ``max_bytes_per_page``. So its
``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length`` headers are replaced by
a ``Content-Length`` of the stored body, the originals kept as ``X-Archive-Orig-<name>``
(pywb's convention). Three extension headers say what stepcrawl knew of the page:
``Stepcrawl-URL`` (the frontier's URL, the items' ``_url``; ``WARC-Target-URI`` is the URL
after redirects), ``Stepcrawl-Depth`` and ``Stepcrawl-Kind`` (page, sitemap, robots).
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from stepcrawl import __version__

if TYPE_CHECKING:
    from stepcrawl.storage import BlobStore

__all__ = [
    "ARCHIVE_ROOT",
    "HEADER_DEPTH",
    "HEADER_KIND",
    "HEADER_URL",
    "ArchivedPage",
    "Exchange",
    "archive_key",
    "archive_prefix",
    "bundle_warc",
    "export_archives",
]


class Exchange(Protocol):
    """The request sent and the response head received, as the fetcher kept them (the crawl's
    ``Exchange``): what a request and a response record are written from."""

    @property
    def method(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def request_headers(self) -> list[tuple[str, str]]: ...
    @property
    def http_version(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def response_headers(self) -> list[tuple[str, str]]: ...


#: The bucket's top-level prefix of archives (what the parse function may write).
ARCHIVE_ROOT: Final = "archive/"
HEADER_URL: Final = "Stepcrawl-URL"
HEADER_DEPTH: Final = "Stepcrawl-Depth"
HEADER_KIND: Final = "Stepcrawl-Kind"
#: Response headers that describe the bytes on the wire, not the stored body.
_WIRE_HEADERS: Final = frozenset({"content-encoding", "transfer-encoding", "content-length"})
#: Record ids are name-based UUIDs in this namespace (uuid5 of the bundle id and the URL).
_NAMESPACE: Final = uuid.UUID("6f1c1f4e-6a53-5c59-9a53-7b3d2a7c3b11")


def archive_prefix(pipeline: str, run: str, task: str) -> str:
    """Where a task's archives live: ``archive/<pipeline>/<run>/<task>/``."""
    return f"{ARCHIVE_ROOT}{pipeline}/{run}/{task}/"


def archive_key(pipeline: str, run: str, task: str, bundle_id: str) -> str:
    """One parse bundle's WARC file."""
    return f"{archive_prefix(pipeline, run, task)}{bundle_id}.warc.gz"


@dataclass(frozen=True, slots=True)
class ArchivedPage:
    """One fetched page, as the archive keeps it."""

    url: str  # the frontier's URL (items' _url)
    final_url: str  # after redirects: WARC-Target-URI
    fetched_at: str  # ISO 8601 (items' _fetched_at)
    body: bytes
    content_type: str | None = None
    depth: int = 0
    kind: str = "page"
    exchange: Exchange | None = None


def warc_date(fetched_at: str) -> str:
    """``2026-05-01T12:00:00+00:00`` -> ``2026-05-01T12:00:00Z`` (WARC-Date)."""
    try:
        moment = datetime.fromisoformat(fetched_at)
    except ValueError:
        moment = datetime.fromtimestamp(0, UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _record_id(bundle_id: str, *parts: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(_NAMESPACE, '|'.join((bundle_id, *parts)))}>"


def _response_headers(exchange: Exchange, body: bytes) -> list[tuple[str, str]]:
    headers = []
    for name, value in exchange.response_headers:
        if name.lower() in _WIRE_HEADERS:
            headers.append((f"X-Archive-Orig-{name}", value))
        else:
            headers.append((name, value))
    headers.append(("Content-Length", str(len(body))))
    return headers


def _request_line(exchange: Exchange) -> str:
    parts = exchange.url.split("/", 3)  # scheme:, "", host, path?query
    target = "/" + (parts[3].split("#", 1)[0] if len(parts) > 3 else "")
    return f"{exchange.method} {target} {exchange.http_version}"


def bundle_warc(info: Mapping[str, str], bundle_id: str, pages: Sequence[ArchivedPage]) -> bytes:
    """The WARC file (gzip per record) of ``pages``; the same input gives the same bytes."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    first = min((p.fetched_at for p in pages), default="")
    warcinfo_id = _record_id(bundle_id, "warcinfo")
    fields = {"software": f"stepcrawl/{__version__}", "format": "WARC File Format 1.1", **info}
    payload = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v).encode()
    writer.write_record(
        writer.create_warc_record(
            "",
            "warcinfo",
            payload=io.BytesIO(payload),
            length=len(payload),
            warc_content_type="application/warc-fields",
            warc_headers_dict={
                "WARC-Record-ID": warcinfo_id,
                "WARC-Date": warc_date(first),
                "WARC-Filename": f"{bundle_id}.warc.gz",
            },
        )
    )
    for page in pages:
        for record in _page_records(writer, bundle_id, warcinfo_id, page):
            writer.write_record(record)
    return out.getvalue()


def _page_records(
    writer: WARCWriter, bundle_id: str, warcinfo_id: str, page: ArchivedPage
) -> list[Any]:
    date = warc_date(page.fetched_at)
    response_id = _record_id(bundle_id, page.url, "response")
    ours = {
        "WARC-Date": date,
        "WARC-Warcinfo-ID": warcinfo_id,
        HEADER_URL: page.url,
        HEADER_DEPTH: str(page.depth),
        HEADER_KIND: page.kind,
    }
    exchange = page.exchange
    if exchange is None:  # e.g. a rendered DOM: the body alone
        return [
            writer.create_warc_record(
                page.final_url,
                "resource",
                payload=io.BytesIO(page.body),
                length=len(page.body),
                warc_content_type=page.content_type or "text/html",
                warc_headers_dict={"WARC-Record-ID": response_id, **ours},
            )
        ]
    response_head = StatusAndHeaders(
        f"{exchange.status} {exchange.reason}".strip(),
        _response_headers(exchange, page.body),
        protocol=exchange.http_version,
    )
    response = writer.create_warc_record(
        page.final_url,
        "response",
        payload=io.BytesIO(page.body),
        length=len(page.body),
        http_headers=response_head,
        warc_headers_dict={"WARC-Record-ID": response_id, **ours},
    )
    request_head = StatusAndHeaders(
        _request_line(exchange), list(exchange.request_headers), is_http_request=True
    )
    request = writer.create_warc_record(
        exchange.url,
        "request",
        http_headers=request_head,
        warc_headers_dict={
            "WARC-Record-ID": _record_id(bundle_id, page.url, "request"),
            "WARC-Date": date,
            "WARC-Warcinfo-ID": warcinfo_id,
            "WARC-Concurrent-To": response_id,
        },
    )
    return [request, response]


def export_archives(blobs: BlobStore, pipeline: str, run: str, task: str, directory: Path) -> int:
    """Copy a task's WARC files from the blob store to ``directory`` (created only if there
    are some): ``stepcrawl run`` writes ``OUT/archive/<task>/``. How many were copied."""
    copied = 0
    for key in blobs.list(archive_prefix(pipeline, run, task)):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / key.rsplit("/", 1)[-1]).write_bytes(blobs.get(key))
        copied += 1
    return copied
