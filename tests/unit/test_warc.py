"""``archive: warc``: the WARC writer (stepcrawl/archive/warc.py) and its reader for replay
(stepcrawl/archive/replay.py), read back with warcio as any WARC tool would."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from stepcrawl.archive import (
    ArchivedPage,
    ReplayError,
    ReplayStats,
    archive_files,
    archive_key,
    bundle_warc,
    export_archives,
    replay_items,
)
from stepcrawl.crawl.archiving import write_bundle_archive
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.messages import HttpExchange, PageEnvelope, ParseBundle, UrlRef
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable

BASE = "https://shop.example"
AT = "2026-05-01T12:00:00+00:00"
INFO = {"pipeline": "shop", "run": "r1", "task": "crawl", "bundle": "b1"}


def html(title: str, price: str) -> bytes:
    return (
        f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
        f"<span class='price'>{price}</span></body></html>"
    ).encode()


def exchange(path: str, *response_headers: tuple[str, str], status: int = 200) -> HttpExchange:
    return HttpExchange(
        url=f"{BASE}{path}",
        request_headers=[("Host", "shop.example"), ("User-Agent", "stepcrawl-test")],
        status=status,
        reason="OK" if status == 200 else "Not Found",
        response_headers=[("Content-Type", "text/html; charset=utf-8"), *response_headers],
    )


def page(path: str, body: bytes, **changes: Any) -> ArchivedPage:
    fields: dict[str, Any] = {
        "url": f"{BASE}{path}",
        "final_url": f"{BASE}{path}",
        "fetched_at": AT,
        "body": body,
        "content_type": "text/html; charset=utf-8",
        "depth": 1,
        "exchange": exchange(path),
    }
    return ArchivedPage(**(fields | changes))


def records(data: bytes) -> list[dict[str, Any]]:
    """Every record as warcio reads it, its digests checked (a mismatch raises)."""
    out = []
    for record in ArchiveIterator(io.BytesIO(data), check_digests="raise"):
        http = record.http_headers
        out.append(
            {
                "type": record.rec_type,
                "warc": dict(record.rec_headers.headers),
                "http": http,
                "body": record.content_stream().read(),
            }
        )
    return out


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def test_each_page_is_a_request_and_a_response_linked_and_readable_by_warcio() -> None:
    teapot = html("Teapot", "12.50")
    kettle = html("Kettle", "45.00")
    pages = [
        page("/p/1?colour=red", teapot),
        page(
            "/p/3",
            kettle,
            url=f"{BASE}/old/3",  # the frontier's URL; redirected to /p/3
            exchange=exchange(
                "/p/3", ("Content-Encoding", "gzip"), ("Content-Length", "99"), ("X-Shop", "a")
            ),
        ),
    ]
    data = bundle_warc(INFO, "b1", pages)
    assert data[:2] == b"\x1f\x8b", "gzipped"
    got = records(data)
    assert [r["type"] for r in got] == ["warcinfo", "request", "response", "request", "response"]
    info = got[0]
    assert info["warc"]["Content-Type"] == "application/warc-fields"
    assert b"pipeline: shop\r\n" in info["body"]
    assert b"software: stepcrawl/" in info["body"]
    ids = [r["warc"]["WARC-Record-ID"] for r in got]
    assert len(set(ids)) == len(ids)
    for request, response, sent in ((got[1], got[2], pages[0]), (got[3], got[4], pages[1])):
        assert request["warc"]["WARC-Concurrent-To"] == response["warc"]["WARC-Record-ID"]
        assert request["warc"]["WARC-Target-URI"] == sent.exchange.url  # type: ignore[union-attr]
        assert response["warc"]["WARC-Target-URI"] == sent.final_url
        assert (
            response["warc"]["WARC-Date"] == request["warc"]["WARC-Date"] == "2026-05-01T12:00:00Z"
        )
        assert response["warc"]["WARC-Payload-Digest"] == sha1_b32(sent.body)
        assert response["warc"]["WARC-Warcinfo-ID"] == info["warc"]["WARC-Record-ID"]
        assert response["warc"]["Stepcrawl-URL"] == sent.url
        assert response["warc"]["Stepcrawl-Kind"] == "page"
        assert response["warc"]["Stepcrawl-Depth"] == "1"
        assert response["http"].get_statuscode() == "200"
        assert response["http"].protocol == "HTTP/1.1"
        assert response["http"].get_header("Content-Type") == "text/html; charset=utf-8"
        assert response["body"] == sent.body
        assert request["http"].get_header("User-Agent") == "stepcrawl-test"
    assert got[1]["http"].protocol == "GET"
    assert got[1]["http"].statusline == "/p/1?colour=red HTTP/1.1"
    # The stored body is decoded: its wire headers are kept under another name.
    kettle_head = got[4]["http"]
    assert kettle_head.get_header("Content-Encoding") is None
    assert kettle_head.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    assert kettle_head.get_header("X-Archive-Orig-Content-Length") == "99"
    assert kettle_head.get_header("Content-Length") == str(len(kettle))
    assert kettle_head.get_header("X-Shop") == "a"


def test_the_same_bundle_gives_the_same_bytes() -> None:
    pages = [page("/p/1", html("Teapot", "12.50")), page("/p/2", html("Torch", "30.00"))]
    assert bundle_warc(INFO, "b1", pages) == bundle_warc(INFO, "b1", pages)
    # ... and another bundle other record ids
    first = {r["warc"]["WARC-Record-ID"] for r in records(bundle_warc(INFO, "b1", pages))}
    second = {r["warc"]["WARC-Record-ID"] for r in records(bundle_warc(INFO, "b2", pages))}
    assert not first & second


def test_a_page_without_an_exchange_is_a_resource_record() -> None:
    body = html("Rendered", "1.00")
    (_, resource) = records(bundle_warc(INFO, "b1", [page("/r", body, exchange=None)]))
    assert resource["type"] == "resource"
    assert resource["warc"]["Content-Type"] == "text/html; charset=utf-8"
    assert resource["body"] == body
    assert resource["warc"]["WARC-Payload-Digest"] == sha1_b32(body)


def test_fractional_fetch_times_keep_their_precision() -> None:
    (_, _, response) = records(
        bundle_warc(
            INFO, "b1", [page("/p", b"<p>x</p>", fetched_at="2026-05-01T14:00:00.25+02:00")]
        )
    )
    assert response["warc"]["WARC-Date"] == "2026-05-01T12:00:00.250000Z"


# --------------------------------------------------------------------------- the parse stage


def pipeline(**task: Any) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "shop",
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [f"{BASE}/"],
                    "extract": [{"match": "/p/", "fields": {"title": "h1", "price": ".price"}}],
                    **task,
                }
            ],
        }
    )


def services(p: Pipeline) -> CrawlServices:
    return CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([p]),
    )


def envelope(path: str, body: bytes | None, **changes: Any) -> PageEnvelope:
    fields: dict[str, Any] = {
        "ref": UrlRef(url=f"{BASE}{path}", depth=1),
        "shard": 0,
        "outcome": "ok",
        "status": 200,
        "final_url": f"{BASE}{path}",
        "content_type": "text/html",
        "fetched_at": AT,
        "body_gz_b64": None if body is None else PageEnvelope.pack(body),
        "exchange": exchange(path),
    }
    return PageEnvelope(**(fields | changes))


def bundle(*pages: PageEnvelope) -> ParseBundle:
    return ParseBundle(
        pipeline="shop", version="v1", run="r1", task="crawl", bundle_id="b1", pages=list(pages)
    )


def recorded(*envelopes: PageEnvelope) -> list[PageCommit]:
    return [PageCommit(e.ref, e.outcome == "ok", e.status, "ok") for e in envelopes]


def test_the_parse_stage_archives_the_pages_its_commit_recorded() -> None:
    p = pipeline(archive="warc")
    s = services(p)
    big = html("Kettle", "45.00")
    s.blobs.put("bodies/big", big)
    ok = envelope("/p/1", html("Teapot", "12.50"))
    large = envelope("/p/3", None, body_key="bodies/big")
    other = envelope("/p/2", html("Torch", "30.00"))  # recorded by another bundle
    failed = envelope("/p/4", None, outcome="failed", status=404, exchange=None)
    b = bundle(ok, large, other, failed)
    key = write_bundle_archive(s, p, b, recorded(ok, large, failed))
    assert key == archive_key("shop", "r1", "crawl", "b1") == "archive/shop/r1/crawl/b1.warc.gz"
    got = records(s.blobs.get(key))
    responses = [r for r in got if r["type"] == "response"]
    assert [r["warc"]["WARC-Target-URI"] for r in responses] == [f"{BASE}/p/1", f"{BASE}/p/3"]
    assert responses[1]["body"] == big
    assert sum(r["type"] == "request" for r in got) == 2
    # A redelivered bundle rewrites the same object with the same bytes.
    first = s.blobs.get(key)
    assert write_bundle_archive(s, p, b, recorded(ok, large, failed)) == key
    assert s.blobs.get(key) == first
    assert list(s.blobs.list("archive/")) == [key]


def test_without_archive_or_recorded_pages_nothing_is_written() -> None:
    ok = envelope("/p/1", html("Teapot", "12.50"))
    plain = pipeline()
    s = services(plain)
    assert write_bundle_archive(s, plain, bundle(ok), recorded(ok)) is None
    archiving = pipeline(archive="warc")
    assert write_bundle_archive(s, archiving, bundle(ok), []) is None
    assert list(s.blobs.list("")) == []


def test_export_copies_a_tasks_archives(tmp_path: Path) -> None:
    blobs = MemoryBlobStore()
    blobs.put(archive_key("shop", "r1", "crawl", "b1"), b"one")
    blobs.put(archive_key("shop", "r1", "crawl", "b2"), b"two")
    blobs.put(archive_key("shop", "r2", "crawl", "b3"), b"another run")
    assert export_archives(blobs, "shop", "r1", "crawl", tmp_path / "a") == 2
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b1.warc.gz", "b2.warc.gz"]
    assert export_archives(blobs, "shop", "r1", "other", tmp_path / "none") == 0
    assert not (tmp_path / "none").exists()


# --------------------------------------------------------------------------- replay


def task(**changes: Any) -> CrawlTask:
    crawl = pipeline(**changes).tasks[0]
    assert isinstance(crawl, CrawlTask)
    return crawl


def test_replay_makes_the_items_the_parse_stage_makes() -> None:
    data = bundle_warc(
        INFO,
        "b1",
        [
            page("/p/1", html("Teapot", "12.50")),
            page("/p/2", html("Torch", "30.00"), url=f"{BASE}/old/2"),
            page("/", b"<html><h1>Home</h1></html>"),  # no rule matches: no items
        ],
    )
    stats = ReplayStats()
    items = list(replay_items([io.BytesIO(data)], task(), stats))
    assert items == [
        {"_kind": "item", "title": "Teapot", "price": "12.50", "_url": f"{BASE}/p/1",
         "_task": "crawl", "_fetched_at": AT, "_n": 0},
        {"_kind": "item", "title": "Torch", "price": "30.00", "_url": f"{BASE}/old/2",
         "_task": "crawl", "_fetched_at": AT, "_n": 0},
    ]  # fmt: skip
    assert (stats.records, stats.pages, stats.items) == (7, 3, 2)


def test_replay_skips_what_is_not_a_page_and_pages_archived_twice(tmp_path: Path) -> None:
    teapot = page("/p/1", html("Teapot", "12.50"))
    data = bundle_warc(
        INFO,
        "b1",
        [
            teapot,
            page("/sitemap.xml", b"<urlset/>", kind="sitemap"),
            page("/p/9", b"{}", exchange=exchange("/p/9", status=404)),
            page(
                "/p/j",
                b"{}",
                exchange=HttpExchange(
                    url=f"{BASE}/p/j",
                    status=200,
                    response_headers=[("Content-Type", "application/json")],
                ),
            ),
        ],
    )
    again = bundle_warc(INFO, "b2", [teapot])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b1.warc.gz").write_bytes(data)
    (tmp_path / "d" / "b2.warc.gz").write_bytes(again)
    (tmp_path / "d" / "notes.txt").write_text("not an archive")
    files = archive_files([tmp_path / "d"])
    assert [f.name for f in files] == ["b1.warc.gz", "b2.warc.gz"]
    stats = ReplayStats()
    items = list(replay_items(files, task(), stats))
    assert [i["title"] for i in items] == ["Teapot"]
    assert dict(stats.skipped) == {
        "not a page": 1,
        "status 404": 1,
        "not HTML": 1,
        "archived again": 1,
    }


def test_replay_reads_other_tools_warcs_plain_or_gzipped() -> None:
    """A WARC stepcrawl did not write (no Stepcrawl-* headers): e.g. wget --warc-file."""
    for gzipped in (False, True):
        out = io.BytesIO()
        writer = WARCWriter(out, gzip=gzipped)
        body = html("Teapot", "12.50")
        head = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.0")
        writer.write_record(
            writer.create_warc_record(
                f"{BASE}/p/1", "response", payload=io.BytesIO(body), http_headers=head
            )
        )
        data = out.getvalue()
        assert (data[:2] == b"\x1f\x8b") == gzipped
        (item,) = replay_items([io.BytesIO(data)], task())
        assert (item["title"], item["_url"]) == ("Teapot", f"{BASE}/p/1")
        assert item["_fetched_at"].endswith("+00:00")


def test_changed_rules_give_new_items_from_the_same_archive() -> None:
    data = bundle_warc(INFO, "b1", [page("/p/1", html("Teapot", "12.50"))])
    rules = [
        {
            "match": "/p/",
            "fields": {"name": "title", "cost": {"selector": ".price", "type": "float"}},
        }
    ]
    (item,) = replay_items([io.BytesIO(data)], task(extract=rules))
    assert (item["name"], item["cost"]) == ("Teapot", 12.5)


def test_a_file_that_is_not_a_warc_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "page.warc.gz"
    bad.write_bytes(gzip.compress(b"<html>hello</html>"))
    with pytest.raises(ReplayError, match=r"page\.warc\.gz: not a WARC file"):
        list(replay_items([bad], task()))
    assert list(replay_items([io.BytesIO(b"")], task())) == []
