"""Sitemaps: parsing (one strict expat pass), what a task visits, the pipeline keys,
and the engine reading a real site on 127.0.0.1 only through its sitemaps."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.sitemap_site import NEWER, SINCE, sitemap_site

from stepcrawl.crawl.accounting import failure_record
from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.failures import Failure, list_failures, redrive
from stepcrawl.crawl.frontier import ShardRef, _fetch_message, chunk_entries, enqueue
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.sitemaps import (
    MAX_NESTING,
    Entries,
    _children,
    document_policy,
    fetch_refs,
    read_robots,
    read_sitemap,
    start_documents,
)
from stepcrawl.errors import InvalidPipelineError
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import CrawlTask, Pipeline, load_pipeline
from stepcrawl.pipeline.sitemap_options import SITEMAPS_FROM_ROBOTS
from stepcrawl.table_keys import backlog_pk, task_key
from stepcrawl.testing import MemoryRunner

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
CAP = 1_000_000


def naive(*parts: int) -> datetime:
    """A lastmod without an offset, as read (naive; the task reads it as UTC)."""
    return datetime(*parts)  # noqa: DTZ001


def urlset(*entries: tuple[str, str | None]) -> bytes:
    urls = "".join(
        f"<url><loc>{u}</loc>{f'<lastmod>{m}</lastmod>' if m else ''}</url>" for u, m in entries
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{urls}</urlset>'.encode()


def read(body: bytes, content_type: str | None = "application/xml") -> Entries:
    return read_sitemap(body, content_type, "https://a.example/sitemap.xml", max_bytes=CAP)


# -------------------------------------------------------------------------------- parsing


def test_a_urlset_lists_its_pages_with_their_lastmod() -> None:
    found = read(
        urlset(("https://a.example/1", "2026-02-01"), ("https://a.example/2?a=1&amp;b=2", None))
    )
    assert found.error is None
    assert found.pages == [
        ("https://a.example/1", naive(2026, 2, 1)),
        ("https://a.example/2?a=1&b=2", None),
    ]
    assert found.sitemaps == []


def test_an_index_lists_its_sitemaps_with_their_lastmod() -> None:
    body = (
        f"<sitemapindex {NS}><sitemap><loc> https://a.example/s1.xml </loc>"
        "<lastmod>2026-03-01T10:00:00+02:00</lastmod></sitemap>"
        "<sitemap><loc>https://a.example/s2.xml.gz</loc></sitemap>"
        "<sitemap><lastmod>2026-01-01</lastmod></sitemap></sitemapindex>"  # no loc: nothing
    ).encode()
    found = read(body)
    assert found.error is None
    assert [url for url, _ in found.sitemaps] == [
        "https://a.example/s1.xml",
        "https://a.example/s2.xml.gz",
    ]
    assert found.sitemaps[0][1] == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    assert found.sitemaps[1][1] is None
    assert found.pages == []


def test_a_gzip_sitemap_is_read_whatever_its_content_type() -> None:
    body = gzip.compress(urlset(("https://a.example/z", None)))
    for content_type in ("application/x-gzip", "application/octet-stream", None):
        assert read(body, content_type).pages == [("https://a.example/z", None)]


def test_a_gzip_bomb_stops_at_the_byte_cap() -> None:
    body = gzip.compress(b"<urlset>" + b" " * 5_000_000)
    found = read_sitemap(body, None, "https://a.example/s.xml.gz", max_bytes=100_000)
    assert found.error is not None
    assert found.error.startswith("gzip: too_large")
    assert read(b"\x1f\x8b not gzip at all").error.startswith("gzip: ")  # type: ignore[union-attr]


def test_a_truncated_sitemap_is_malformed_and_keeps_what_came_before_the_error() -> None:
    body = urlset(("https://a.example/1", None), ("https://a.example/2", None))
    found = read(body[: body.index(b"https://a.example/2") - 5])
    assert found.error is not None
    assert found.error.startswith("malformed XML: ")
    assert "at line 1, column" in found.error
    assert "(1 entries before it were read)" in found.error
    assert found.pages == [("https://a.example/1", None)]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"", "not a sitemap: the document is empty"),
        (b"<!DOCTYPE html><html><body>Not found</body></html>", "not a sitemap: an HTML page"),
        (b"<html><body><p>soft 404</body></html>", "not a sitemap: the root element is <html>"),
        (b"<<<>>>", "not XML: "),
        (b"just some words", "not a sitemap: neither XML nor a list of URLs"),
    ],
)
def test_what_is_not_a_sitemap_says_why(body: bytes, error: str) -> None:
    found = read(body)
    assert found.error is not None
    assert found.error.startswith(error), found.error
    assert found.pages == found.sitemaps == []


def test_entities_are_never_expanded_nor_fetched(tmp_path: Path) -> None:
    laughs = "".join(f'<!ENTITY l{n} "{f"&l{n - 1};" * 10}">' for n in range(1, 10))
    bomb = f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "lol">{laughs}]>'
    bomb += f"<urlset {NS}><url><loc>https://a.example/&l9;</loc></url></urlset>"
    secret = tmp_path / "secret.txt"
    secret.write_text("https://a.example/leaked")
    xxe = f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file://{secret}">]>'
    xxe += f"<urlset {NS}><url><loc>&x;</loc></url></urlset>"
    started = time.perf_counter()
    for body in (bomb, xxe):
        found = read(body.encode())
        assert found.error is not None
        assert found.error.startswith("refused: a DOCTYPE declaration (<!DOCTYPE urlset>)")
        assert found.pages == []
    assert time.perf_counter() - started < 1


def test_a_plain_text_sitemap_and_feeds_are_read() -> None:
    text = b"https://a.example/t1\n\n  https://a.example/t2  \nnot a url\n/relative\n"
    assert [u for u, _ in read(text, "text/plain").pages] == [
        "https://a.example/t1",
        "https://a.example/t2",
    ]
    rss = (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        b"<link>https://a.example/</link>"  # the channel's own link is no entry
        b"<item><title>x</title><link>https://a.example/news/1</link>"
        b"<pubDate>Tue, 03 Feb 2026 10:00:00 GMT</pubDate></item>"
        b"<item><title>no link</title></item></channel></rss>"
    )
    assert read(rss).pages == [
        ("https://a.example/news/1", datetime(2026, 2, 3, 10, 0, tzinfo=UTC))
    ]
    atom = (
        b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>'
        b'<link href="https://a.example/feed" rel="self"/>'
        b'<entry><link rel="self" href="https://a.example/e1.atom"/>'
        b'<link href="https://a.example/e1"/><published>2026-01-01T00:00:00Z</published>'
        b"<updated>2026-02-03T10:00:00Z</updated></entry>"
        b'<entry><link rel="alternate" href="https://a.example/e2"/></entry></feed>'
    )
    assert read(atom).pages == [
        ("https://a.example/e1", datetime(2026, 2, 3, 10, 0, tzinfo=UTC)),
        ("https://a.example/e2", None),
    ]


@pytest.mark.parametrize(
    ("lastmod", "read_as"),
    [
        ("2026", naive(2026, 1, 1)),
        ("2026-02", naive(2026, 2, 1)),
        ("2026-02-03T10:30Z", datetime(2026, 2, 3, 10, 30, tzinfo=UTC)),
        ("2026-02-03T10:30:15.5+01:00", datetime(2026, 2, 3, 9, 30, 15, 500_000, tzinfo=UTC)),
        ("yesterday", None),
        ("2026-13-01", None),
    ],
)
def test_w3c_datetimes_are_read_and_other_dates_are_none(
    lastmod: str, read_as: datetime | None
) -> None:
    assert read(urlset(("https://a.example/1", lastmod))).pages == [
        ("https://a.example/1", read_as)
    ]


def test_robots_txt_gives_its_sitemap_lines_resolved() -> None:
    body = b"User-agent: *\nDisallow: /private\nSitemap: /sitemap.xml\nsitemap: https://cdn.example/s.xml\n"
    found = read_robots(body, "text/plain", "http://a.example:8080/robots.txt")
    assert found.sitemaps == [
        ("http://a.example:8080/sitemap.xml", None),
        ("https://cdn.example/s.xml", None),
    ]
    assert (
        read_robots(b"User-agent: *\nAllow: /\n", None, "http://a.example/robots.txt") == Entries()
    )


# ----------------------------------------------------------------------- what a task visits


def task(**keys: Any) -> CrawlTask:
    return CrawlTask.model_validate(
        {"id": "c", "sitemaps": ["https://a.example/sitemap.xml"], **keys}
    )


def test_children_stay_on_the_domains_and_after_since() -> None:
    found = Entries(
        pages=[
            ("https://a.example/new", naive(2026, 2, 1)),
            ("https://a.example/old", naive(2025, 12, 31, 23, 59)),
            ("https://a.example/undated", None),
            ("https://sub.a.example/new#frag", datetime(2026, 2, 1, tzinfo=UTC)),
            ("https://elsewhere.example/new", naive(2026, 2, 1)),
            ("https://a.example/new", None),  # listed twice: once
            ("ftp://a.example/file", None),
            ("/relative", None),
        ],
        sitemaps=[
            ("https://a.example/s2.xml", None),
            ("https://a.example/s-old.xml", naive(2025, 1, 1)),
            ("https://cdn.example/s3.xml", None),
        ],
    )
    ref = UrlRef(url="https://a.example/sitemap.xml", depth=1, kind="sitemap")
    children = _children(task(sitemap_since="2026-01-01"), ref, found)
    assert [(c.url, c.kind, c.depth) for c in children] == [
        ("https://a.example/s2.xml", "sitemap", 2),
        ("https://a.example/new", "page", 0),
        ("https://a.example/undated", "page", 0),
        ("https://sub.a.example/new", "page", 0),
        ("https://a.example/relative", "page", 0),
    ]
    # Without sitemap_since nothing is older than anything.
    assert len(_children(task(), ref, found)) == 7


def test_child_sitemaps_nest_only_so_deep() -> None:
    found = Entries(sitemaps=[("https://a.example/deeper.xml", None)])
    deep = UrlRef(url="https://a.example/s.xml", depth=MAX_NESTING, kind="sitemap")
    assert _children(task(), deep, found) == []
    shallower = deep.model_copy(update={"depth": MAX_NESTING - 1})
    assert [c.depth for c in _children(task(), shallower, found)] == [MAX_NESTING]


def test_explicit_allowed_domains_decide_over_the_sitemap_hosts() -> None:
    found = Entries(pages=[("https://a.example/1", None), ("https://b.example/2", None)])
    ref = UrlRef(url="https://a.example/sitemap.xml", kind="sitemap")
    both = task(allowed_domains=["a.example", "b.example"])
    assert len(_children(both, ref, found)) == 2
    assert [c.url for c in _children(task(), ref, found)] == ["https://a.example/1"]


def test_start_documents_read_robots_of_the_seeds_sites_or_of_the_domains() -> None:
    seeded = task(sitemaps=["robots", "https://a.example/s.xml"], seeds=["https://a.example/x"])
    urls = ["https://a.example/x", "http://b.example:8080/y", "https://a.example/z"]
    assert start_documents(seeded, urls) == {
        "https://a.example/robots.txt": "robots",
        "http://b.example:8080/robots.txt": "robots",
        "https://a.example/s.xml": "sitemap",
    }
    unseeded = task(sitemaps=["robots"], allowed_domains=["a.example", "c.example"])
    assert start_documents(unseeded, []) == {
        "https://a.example/robots.txt": "robots",
        "https://c.example/robots.txt": "robots",
    }


# -------------------------------------------------------------------------------------- fetch


class RecordingFetcher:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], FetchPolicy]] = []

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        self.calls.append((list(urls), policy))
        return [
            FetchResult(
                url=u,
                final_url=u,
                status=200,
                headers={},
                body=b"",
                elapsed_ms=1.0,
                redirects=[],
                outcome="ok",
                reason="ok",
                retry_after=None,
                detail="",
            )
            for u in urls
        ]


def test_sitemap_documents_are_fetched_with_any_content_type_pages_as_before() -> None:
    policy = FetchPolicy(allowed_domains=("a.example",))
    refs = [
        UrlRef(url="https://a.example/1"),
        UrlRef(url="https://a.example/s.xml", kind="sitemap"),
        UrlRef(url="https://a.example/2"),
        UrlRef(url="https://a.example/robots.txt", kind="robots"),
    ]
    fetcher = RecordingFetcher()
    results = asyncio.run(fetch_refs(fetcher, refs, policy, 4))
    assert [r.url for r in results] == [r.url for r in refs]  # in order
    by_policy = {p.allowed_content_types: urls for urls, p in fetcher.calls}
    assert by_policy[policy.allowed_content_types] == ["https://a.example/1", "https://a.example/2"]
    assert by_policy[()] == ["https://a.example/s.xml", "https://a.example/robots.txt"]
    assert document_policy(policy).allows_content_type("application/x-gzip")
    assert document_policy(policy).max_bytes == policy.max_bytes
    assert document_policy(policy).allowed_domains == policy.allowed_domains
    pages_only = RecordingFetcher()
    asyncio.run(fetch_refs(pages_only, refs[::2], policy, 4))
    assert len(pages_only.calls) == 1


# ------------------------------------------------------------------- frontier and re-drive


def test_the_kind_survives_the_backlog_and_a_failure_record() -> None:
    with MemoryRunner(Pipeline.model_validate(pipeline_of("https://a.example/s.xml"))) as runner:
        services = runner.services
        ref = UrlRef(url="https://a.example/s.xml", depth=2, kind="sitemap")
        (shard,) = enqueue(services, "run", "c", [ref, UrlRef(url="https://a.example/p")], "x")
        chunks = services.table.query(backlog_pk("run", "c", shard))  # one per depth
        entries = [entry for chunk in chunks for entry in chunk_entries(chunk)]
        where = ShardRef("p", "v", "run", "c", shard)
        assert [_fetch_message(where, e).ref for e in entries] == [
            UrlRef(url="https://a.example/p", depth=0),
            ref,
        ]
        assert "k" not in entries[0]  # pages keep the entries' old shape
    failed = PageCommit(ref, False, 200, "sitemap: malformed XML", failure="sitemap")
    record = failure_record("run", "c", failed, 1.0)
    assert Failure.of("c", record).kind == "sitemap"
    page = PageCommit(UrlRef(url="https://a.example/p"), False, 404, "http_404", failure="fatal")
    assert "kind" not in failure_record("run", "c", page, 1.0)


# ----------------------------------------------------------------------- the pipeline keys


def test_sitemap_keys_validate_and_normalise() -> None:
    t = task(sitemaps=[" Robots ", "https://a.example/s.xml"], seeds=["https://a.example/"])
    assert t.sitemaps == [SITEMAPS_FROM_ROBOTS, "https://a.example/s.xml"]
    assert t.sitemap_urls == ["https://a.example/s.xml"]
    assert task(sitemap_since="2026-01-02").sitemap_since == datetime(2026, 1, 2, tzinfo=UTC)
    moment = task(sitemap_since="2026-01-02T10:00:00+02:00").sitemap_since
    assert moment == datetime(2026, 1, 2, 8, tzinfo=UTC)
    assert task(sitemap_since="2026-01-02T10:00:00").sitemap_since.tzinfo is UTC  # type: ignore[union-attr]
    # A task may start from sitemaps alone.
    assert CrawlTask.model_validate({"id": "c", "sitemaps": ["https://a.example/s.xml"]})


HEAD = "name: demo\ntasks:\n  - id: crawl\n    type: crawl\n"


@pytest.mark.parametrize(
    ("lines", "loc", "line", "message", "hint"),
    [
        (
            "    sitemaps: [https://a.example/s.xml, robot]\n",
            "tasks[0].sitemaps[1]",
            5,
            "'robot' is neither a sitemap URL nor robots",
            "or robots to take the sitemaps",
        ),
        (
            "    sitemaps: [https://a.example/s.xml]\n    sitemap_since: last week\n",
            "tasks[0].sitemap_since",
            6,
            "'last week' is not a date or a date and time",
            "2026-05-01T12:00:00Z",
        ),
        (
            "    sitemaps: [https://a.example/s.xml]\n    sitemap_since: 20260101\n",
            "tasks[0].sitemap_since",
            6,
            "20260101 is not a date",
            "ISO 8601",
        ),
        (
            "    sitemaps: [robots]\n",
            "tasks[0]",
            3,
            "reads sitemaps from robots.txt but names no site",
            "add seeds, or allowed_domains",
        ),
        (
            "    seeds: [https://a.example/]\n    sitemap_since: 2026-01-01\n",
            "tasks[0]",
            3,
            "has sitemap_since but reads no sitemaps",
            "add sitemaps",
        ),
        (
            "    allowed_domains: [a.example]\n    sitemaps: [https://b.example/s.xml]\n",
            "tasks[0]",
            3,
            "sitemap https://b.example/s.xml is not on the task's allowed_domains",
            "add b.example to allowed_domains",
        ),
        (
            "    priority: 1\n",
            "tasks[0]",
            3,
            "has nothing to start from",
            "or sitemaps: [URL, ...]",
        ),
    ],
)
def test_sitemap_mistakes_are_reported_with_file_and_line(
    tmp_path: Path, lines: str, loc: str, line: int, message: str, hint: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + lines, encoding="utf-8")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    (issue,) = caught.value.issues
    assert (issue.render(), issue.line) == (issue.render(), line)
    assert loc in issue.render()
    assert message in issue.message
    assert issue.hint is not None
    assert hint in issue.hint


def test_the_example_pipeline_validates() -> None:
    pipeline = load_pipeline(Path(__file__).resolve().parents[2] / "pipelines" / "sitemaps.yaml")
    crawls = [t for t in pipeline.tasks if isinstance(t, CrawlTask)]
    assert any(t.sitemaps for t in crawls)
    assert any(SITEMAPS_FROM_ROBOTS in t.sitemaps for t in crawls)


# ----------------------------------------------------------------- the engine, on a real site


def pipeline_of(
    *sitemaps: str, seeds: Sequence[str] = (), since: str | None = SINCE
) -> dict[str, Any]:
    crawl: dict[str, Any] = {
        "id": "c",
        "type": "crawl",
        "seeds": list(seeds),
        "sitemaps": list(sitemaps),
        "allow_private_network": True,
        "extract": [{"match": "/pages/", "fields": {"title": "h1"}}],
    }
    if since is not None:
        crawl["sitemap_since"] = since
    return {
        "name": "sitemaps",
        "defaults": {"politeness": {"delay": 0}, "limits": {"max_error_ratio": 0.5}},
        "tasks": [crawl],
    }


def crawl_once(pipeline: Pipeline, **runner: Any) -> tuple[MemoryRunner, list[str], dict[str, Any]]:
    with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=32), **runner) as run:
        assert run.run() == ["c"]
        items = list(iter_task_items(run.table, run.blobs, pipeline.name, run.run_id, "c"))
        record = run.table.get(task_key(run.run_id, "c"))
        assert record is not None
    return run, sorted(str(i["title"]) for i in items), record


def test_a_site_reachable_only_through_its_sitemaps_is_crawled_exactly() -> None:
    with sitemap_site() as site:
        run, titles, record = crawl_once(Pipeline.model_validate(pipeline_of(site.index)))
        assert titles == sorted(NEWER)
        # index + plain + zipped + broken (old.xml skipped by its index lastmod) + 5 pages
        assert (record["claimed"], record["finished"], record["ok"], record["failed"]) == (
            9,
            9,
            8,
            1,
        )
        assert record["items"] == len(NEWER)
        (failure,) = list_failures(run.table, run.run_id)
        assert failure.url == f"{site.base}/sitemaps/broken.xml"
        assert (failure.cls, failure.kind, failure.status) == ("sitemap", "sitemap", 200)
        assert failure.reason.startswith("sitemap: malformed XML: ")
        for never in ("/sitemaps/old.xml", "/sitemaps/offsite.xml", "/pages/p99", "/pages/p4"):
            assert not site.fetched(never), never


def test_robots_finds_the_index_and_without_since_every_page_comes() -> None:
    with sitemap_site() as site:
        pipeline = Pipeline.model_validate(
            pipeline_of("robots", seeds=[f"{site.base}/"], since=None)
        )
        _, titles, record = crawl_once(pipeline)
        assert titles == sorted([*NEWER, "p4", "p6", "p7"])  # the home page has no item
        assert site.fetched("/sitemap_index.xml")
        assert site.requests.count("/robots.txt") == 2  # the rules' copy and the sitemaps' copy
        assert record["failed"] == 1


def test_duplicate_deliveries_change_nothing() -> None:
    def twice(work: Any) -> None:
        work()
        work()

    with sitemap_site() as site:
        pipeline = Pipeline.model_validate(pipeline_of(site.index))
        _, titles, record = crawl_once(pipeline, deliver=twice)
        assert titles == sorted(NEWER)
        assert (record["claimed"], record["finished"], record["failed"]) == (9, 9, 1)


def test_a_redriven_sitemap_is_read_as_a_sitemap_again() -> None:
    with sitemap_site() as site:
        pipeline = Pipeline.model_validate(pipeline_of(site.index))
        with MemoryRunner(pipeline, config=CrawlConfig(shards=2, window=32)) as run:
            assert run.run() == ["c"]
            failures = list_failures(run.table, run.run_id)
            site.requests.clear()
            assert redrive(run.services, run.run_id, failures) == 1
            run.drain("c")
            assert site.requests == ["/sitemaps/broken.xml"]  # p8 was already crawled
            (again,) = list_failures(run.table, run.run_id)
            assert (again.cls, again.kind) == ("sitemap", "sitemap")
