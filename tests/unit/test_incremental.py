"""Incremental recrawls: the pipeline keys, the decisions (new, changed, unchanged, 304,
tombstone, what state is kept), conditional requests, the state writes' ordering, a
redelivered or crashed parse, and two runs of the engine against a site on 127.0.0.1 that
answers conditional requests (clean, and under crashes and duplicate deliveries)."""

from __future__ import annotations

import asyncio
import base64
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.revisit_site import PRODUCTS, RevisitSite, revisit_site

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.crawl.incremental import (
    MAX_LINKS_BYTES,
    PageState,
    conditional,
    items_fingerprint,
    read_states,
    revisit,
    settle,
    tombstone,
    write_states,
)
from stepcrawl.crawl.items import iter_task_items
from stepcrawl.crawl.messages import KnownPage, PageEnvelope, ParseBundle, Revisit, UrlRef
from stepcrawl.crawl.parse_stage import process_bundles
from stepcrawl.errors import InvalidPipelineError
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import CrawlTask, Pipeline, load_pipeline
from stepcrawl.storage import MemoryTable
from stepcrawl.table_keys import page_state_key, task_key
from stepcrawl.testing import MemoryRunner

URL = "https://shop.example/p/1"
DAY = 86400.0
T0 = 1_800_000_000.0


def task(**keys: Any) -> CrawlTask:
    return CrawlTask.model_validate(
        {
            "id": "crawl",
            "seeds": ["https://shop.example/"],
            "incremental": True,
            "extract": [{"match": "/p/", "fields": {"title": "h1"}}],
            **keys,
        }
    )


def known(fp: str, *, sfp: str = "s", at: float = T0, links: Sequence[str] = ()) -> KnownPage:
    packed = base64.b64encode(zlib.compress("\n".join(links).encode())).decode()
    return KnownPage(fp=fp, sfp=sfp, at=at, etag='"v1"', links_z=packed if links else None)


def envelope(
    *,
    status: int = 200,
    outcome: str = "ok",
    seen: KnownPage | None = None,
    etag: str | None = '"v2"',
    at: float = T0 + DAY,
    depth: int = 0,
) -> PageEnvelope:
    return PageEnvelope.model_validate(
        {
            "ref": {"url": URL, "depth": depth},
            "shard": 0,
            "outcome": outcome,
            "status": status,
            "fetched_at": "2027-01-15T08:00:00+00:00",
            "failure": "" if outcome == "ok" else "fatal",
            "revisit": Revisit(at=at, etag=etag, known=seen),
        }
    )


def parsed(items: list[dict[str, Any]]) -> tuple[PageCommit, list[dict[str, Any]]]:
    page = PageCommit(UrlRef(url=URL), True, 200, "ok", items=len(items))
    return page, [{**item, "_url": URL, "_task": "crawl", "_n": n} for n, item in enumerate(items)]


# ---------------------------------------------------------------------------- pipeline keys


def test_incremental_keys_validate_and_default() -> None:
    plain = task(incremental=False)
    assert plain.emits_all
    on = task()
    assert not on.emits_all
    assert on.incremental_ttl == 30 * DAY
    assert task(emit="all").emits_all
    assert task(incremental_ttl="2d").incremental_ttl == 2 * DAY


HEAD = "name: p\ntasks:\n  - id: c\n    type: crawl\n    seeds: [https://a.example/]\n"


@pytest.mark.parametrize(
    ("lines", "line", "message", "hint"),
    [
        ("    emit: changed\n", 3, "sets emit but is not incremental", "incremental: true"),
        ("    incremental_ttl: 7d\n", 3, "sets incremental_ttl but is not", "incremental: true"),
        ("    incremental: true\n    emit: some\n", 7, "'changed' or 'all'", None),
        ("    incremental: true\n    incremental_ttl: 10m\n", 7, "greater than or equal", None),
    ],
)
def test_incremental_mistakes_are_reported_with_file_and_line(
    tmp_path: Path, lines: str, line: int, message: str, hint: str | None
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + lines, encoding="utf-8")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    (issue,) = caught.value.issues
    assert issue.line == line, issue.render()
    assert message in issue.message
    if hint is not None:
        assert issue.hint is not None
        assert hint in issue.hint


def test_the_example_pipeline_validates() -> None:
    pipeline = load_pipeline(Path(__file__).resolve().parents[2] / "pipelines" / "incremental.yaml")
    crawl = pipeline.task("products")
    assert isinstance(crawl, CrawlTask)
    assert crawl.incremental
    assert not crawl.emits_all


# -------------------------------------------------------------------------------- decisions


def test_the_fingerprint_is_of_the_items_fields_not_of_the_fetch() -> None:
    one = [{"title": "a", "_kind": "item", "_url": "u", "_fetched_at": "t1", "_n": 0}]
    same = [{"_kind": "item", "title": "a", "_url": "u", "_fetched_at": "t2", "_n": 0}]
    assert items_fingerprint(one) == items_fingerprint(same)
    assert items_fingerprint(one) != items_fingerprint([{**one[0], "title": "b"}])
    assert items_fingerprint(one) != items_fingerprint([{**one[0], "_kind": "other"}])
    two = [{"title": "a"}, {"title": "b"}]
    assert items_fingerprint(two) != items_fingerprint(two[::-1])
    assert items_fingerprint([]) != items_fingerprint([{}])


def test_a_new_page_writes_its_items_and_keeps_a_state() -> None:
    page, items = parsed([{"title": "a"}])
    emitted = settle(task(), envelope(), page, items, ["https://shop.example/p/2"])
    assert emitted == items
    assert (page.unchanged, page.items) == (False, 1)
    assert page.state is not None
    state = page.state.item
    assert state is not None
    assert state["fp"] == items_fingerprint(items)
    assert state["etag"] == '"v2"'
    assert state["at"] == T0 + DAY
    assert state["expires_at"] == int(T0 + DAY + 30 * DAY)
    assert zlib.decompress(state["links"]).decode() == "https://shop.example/p/2"


def test_the_same_items_write_nothing_and_changed_items_write_all() -> None:
    page, items = parsed([{"title": "a"}, {"title": "b"}])
    fp = items_fingerprint(items)
    assert settle(task(), envelope(seen=known(fp)), page, items, []) == []
    assert (page.unchanged, page.items) == (True, 0)
    assert page.state is not None  # the validators differ from the kept state's

    page, items = parsed([{"title": "a"}, {"title": "c"}])
    assert settle(task(), envelope(seen=known(fp)), page, items, []) == items
    assert (page.unchanged, page.items) == (False, 2)


def test_emit_all_writes_unchanged_items_too() -> None:
    page, items = parsed([{"title": "a"}])
    emitted = settle(
        task(emit="all"), envelope(seen=known(items_fingerprint(items))), page, items, []
    )
    assert emitted == items
    assert (page.unchanged, page.items) == (True, 1)


def test_an_unchanged_state_is_rewritten_only_past_half_its_ttl() -> None:
    page, items = parsed([{"title": "a"}])
    settle(task(), envelope(at=T0), page, items, ["https://shop.example/p/2"])
    assert page.state is not None
    assert page.state.item is not None
    kept = page.state.item
    same = KnownPage(fp=kept["fp"], sfp=kept["sfp"], at=T0, etag=kept["etag"])
    for after, rewritten in ((14 * DAY, False), (16 * DAY, True)):
        again, items = parsed([{"title": "a"}])
        settle(
            task(), envelope(seen=same, at=T0 + after), again, items, ["https://shop.example/p/2"]
        )
        assert (again.state is not None) is rewritten, after


def test_a_304_is_unchanged_and_its_kept_links_are_its_children() -> None:
    links = ["https://shop.example/p/2", "https://shop.example/p/3"]
    seen = known("f", links=links)
    out = revisit(task(), envelope(status=304, etag=None, seen=seen), max_depth=3)
    assert out is not None
    page, items = out
    assert items == []
    assert (page.ok, page.status, page.unchanged, page.items) == (True, 304, True, 0)
    assert [c.url for c in page.children] == links
    assert all(c.depth == 1 for c in page.children)
    # The kept validators stay when a 304 does not repeat them (only refreshed past TTL/2).
    assert page.state is not None
    assert page.state.item is not None
    assert page.state.item["etag"] == '"v1"'
    assert page.state.item["fp"] == "f"
    at_the_limit = revisit(task(), envelope(status=304, seen=seen, depth=3), max_depth=3)
    assert at_the_limit is not None
    assert at_the_limit[0].children == []


@pytest.mark.parametrize("status", [404, 410])
def test_a_known_page_gone_is_a_tombstone_and_its_state_goes(status: int) -> None:
    gone = envelope(status=status, outcome="failed", seen=known("f"))
    out = revisit(task(), gone, max_depth=3)
    assert out is not None
    page, items = out
    assert items == [
        {
            "_url": URL,
            "_task": "crawl",
            "_fetched_at": "2027-01-15T08:00:00+00:00",
            "_n": 0,
            "_deleted": True,
            "_status": status,
        }
    ]
    assert items == [tombstone(task(), gone)]
    # Recorded as done (the site removed it: not a failure), counted as deleted.
    assert (page.ok, page.deleted, page.items, page.failure) == (True, True, 1, "")
    assert page.state == PageState(URL, T0 + DAY, None)


def test_what_is_not_a_revisit_is_parsed_or_failed_as_ever() -> None:
    assert revisit(task(), envelope(status=404, outcome="failed"), max_depth=3) is None  # new
    assert revisit(task(), envelope(status=500, outcome="failed", seen=known("f")), 3) is None
    assert revisit(task(), envelope(status=200, seen=known("f")), max_depth=3) is None


def test_a_page_with_too_many_links_keeps_no_validators() -> None:
    rng = random.Random(1)
    links = [f"https://shop.example/{rng.getrandbits(128):032x}" for _ in range(3000)]
    page, items = parsed([{"title": "a"}])
    settle(task(), envelope(), page, items, links)
    assert page.state is not None
    assert page.state.item is not None
    assert set(page.state.item) == {"url", "fp", "sfp", "at", "expires_at"}
    assert len(zlib.compress("\n".join(links).encode())) > MAX_LINKS_BYTES
    # Without validators there are no links to keep: a page is fetched in full every time.
    page, items = parsed([{"title": "a"}])
    settle(task(), envelope(etag=None), page, items, links[:3])
    assert page.state is not None
    assert page.state.item is not None
    assert "links" not in page.state.item


# ------------------------------------------------------------------- conditional requests


class Recording:
    """A fetcher that records the headers it is given and answers a status per URL."""

    def __init__(self, statuses: Mapping[str, int]) -> None:
        self.statuses = statuses
        self.headers: Mapping[str, Mapping[str, str]] | None = None

    async def fetch_many(
        self,
        urls: Sequence[str],
        policy: FetchPolicy,
        concurrency: int,
        *,
        headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FetchResult]:
        self.headers = headers
        return [
            FetchResult(
                url=u,
                final_url=u,
                status=self.statuses[u],
                headers={},
                body=b"",
                elapsed_ms=1.0,
                redirects=[],
                outcome="ok" if self.statuses[u] == 200 else "fatal",
                reason=f"http_{self.statuses[u]}",
            )
            for u in urls
        ]

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        return None


def test_conditional_requests_go_to_known_pages_with_validators_only() -> None:
    states = {
        "https://a.example/etag": {"etag": '"x"'},
        "https://a.example/both": {"etag": '"y"', "lm": "Fri, 02 Jan 2026 00:00:00 GMT"},
        "https://a.example/none": {"fp": "f"},
    }
    statuses = dict.fromkeys(states, 304) | {"https://a.example/new": 304}
    inner = Recording(statuses)
    fetcher = conditional(inner, task(), states)
    results = asyncio.run(fetcher.fetch_many(list(statuses), FetchPolicy(), 4))
    assert inner.headers == {
        "https://a.example/etag": {"If-None-Match": '"x"'},
        "https://a.example/both": {
            "If-None-Match": '"y"',
            "If-Modified-Since": "Fri, 02 Jan 2026 00:00:00 GMT",
        },
    }
    # A 304 answers a conditional request; one to a plain request stays a failure.
    assert [r.outcome for r in results] == ["ok", "ok", "fatal", "fatal"]
    assert conditional(inner, task(emit="all"), states) is inner  # every page's items: no 304s
    assert conditional(inner, task(), {"https://a.example/none": {"fp": "f"}}) is inner


# -------------------------------------------------------------------------------- the state


def test_a_state_write_never_goes_back_in_time() -> None:
    table = MemoryTable()

    class Services:
        pass

    services: Any = Services()
    services.table = table
    key = page_state_key("p", "crawl", URL)

    def page(at: float, item: dict[str, Any] | None) -> PageCommit:
        commit = PageCommit(UrlRef(url=URL), True, 200, "ok")
        commit.state = PageState(URL, at, item)
        return commit

    assert write_states(services, "p", "crawl", [page(T0 + 10, {"fp": "new", "at": T0 + 10})]) == 1
    assert write_states(services, "p", "crawl", [page(T0, {"fp": "old", "at": T0})]) == 0
    assert table.get(key)["fp"] == "new"  # type: ignore[index]
    # The same write again (a redelivery): it holds, and writes the same.
    assert write_states(services, "p", "crawl", [page(T0 + 10, {"fp": "new", "at": T0 + 10})]) == 1
    assert write_states(services, "p", "crawl", [page(T0, None)]) == 0  # an older tombstone
    assert table.get(key) is not None
    assert write_states(services, "p", "crawl", [page(T0 + 20, None)]) == 1
    assert table.get(key) is None


# ------------------------------------------------------------------ a redelivered parse

PIPELINE = Pipeline.model_validate(
    {
        "name": "inc",
        "tasks": [
            {
                "id": "crawl",
                "type": "crawl",
                "seeds": [URL],
                "incremental": True,
                "extract": [{"match": "/p/", "fields": {"title": "h1"}}],
            }
        ],
    }
)


def bundle(title: str, seen: KnownPage | None, at: float) -> ParseBundle:
    body = f"<html><body><h1>{title}</h1></body></html>".encode()
    page = envelope(seen=seen, at=at).model_copy(
        update={
            "content_type": "text/html",
            "body_gz_b64": PageEnvelope.pack(body),
            "size": len(body),
        }
    )
    return ParseBundle(
        pipeline=PIPELINE.name,
        version=PIPELINE.version_hash(),
        run="run-1",
        task="crawl",
        bundle_id=f"b-{title}",
        pages=[page],
    )


class CrashOnce:
    """A table whose first put of a page state fails, as a process dying right there."""

    def __init__(self, inner: MemoryTable) -> None:
        self.inner = inner
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, item: dict[str, Any], **kwargs: Any) -> bool:
        if self.armed and str(item["pk"]).startswith("PAGE#"):
            self.armed = False
            raise RuntimeError("crash before the state write")
        return self.inner.put(item, **kwargs)


def items_of(runner: MemoryRunner) -> list[dict[str, Any]]:
    return list(iter_task_items(runner.table, runner.blobs, PIPELINE.name, "run-1", "crawl"))


def test_a_crash_before_the_state_write_loses_neither_state_nor_items() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        crashing = CrashOnce(runner.table)
        runner.services.table = crashing  # type: ignore[assignment]
        message = bundle("changed", known("old-fp"), T0 + DAY)
        with pytest.raises(RuntimeError, match="crash before the state write"):
            process_bundles(runner.services, [message])  # the invocation dies: SQS redelivers
        assert runner.table.get(page_state_key(PIPELINE.name, "crawl", URL)) is None
        assert [i["title"] for i in items_of(runner)] == ["changed"]  # written before it
        # SQS redelivers the same message: the same decision, the same part, now the state.
        assert process_bundles(runner.services, [message]) == [1]
        state = runner.table.get(page_state_key(PIPELINE.name, "crawl", URL))
        assert state is not None
        assert state["at"] == T0 + DAY
        assert [i["title"] for i in items_of(runner)] == ["changed"]
        record = runner.table.get(task_key("run-1", "crawl"))
        assert record is not None
        assert (record["finished"], record["items"], record["unchanged"]) == (1, 1, 0)


def test_a_redelivery_decides_from_its_message_not_from_the_state_it_wrote() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        message = bundle("changed", known("old-fp"), T0 + DAY)
        assert process_bundles(runner.services, [message]) == [1]
        # The state now holds this page's items: deciding against it would call it unchanged
        # and write a part without them over the first one.
        assert process_bundles(runner.services, [message]) == [1]
        assert [i["title"] for i in items_of(runner)] == ["changed"]
        parts = list(runner.blobs.list(""))
        assert len([p for p in parts if "/parts/" in p]) == 1


def test_a_redelivered_bundle_writes_no_second_item_or_tombstone_and_counts_once() -> None:
    """One bundle, a changed page and a known page now gone, delivered twice (SQS is at least
    once): one part with one item and one tombstone, each page counted once, the gone page's
    state removed, and no failure recorded for it."""
    gone_url = "https://shop.example/p/9"
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        gone_key = page_state_key(PIPELINE.name, "crawl", gone_url)
        runner.table.put({"pk": gone_key[0], "sk": gone_key[1], "fp": "f", "sfp": "s", "at": T0})
        changed = bundle("changed", known("old-fp"), T0 + DAY).pages[0]
        gone = envelope(status=410, outcome="failed", seen=known("f"), at=T0 + DAY)
        gone = gone.model_copy(update={"ref": UrlRef(url=gone_url)})
        message = bundle("changed", None, T0).model_copy(
            update={"bundle_id": "b-two", "pages": [changed, gone]}
        )
        for delivery in range(2):
            assert process_bundles(runner.services, [message]) == [2], delivery
        items = items_of(runner)
        assert sorted((i["_url"], i.get("title"), i.get("_deleted")) for i in items) == [
            (URL, "changed", None),
            (gone_url, None, True),
        ]
        parts = [p for p in runner.blobs.list("") if "/parts/" in p]
        assert len(parts) == 1
        record = runner.table.get(task_key("run-1", "crawl"))
        assert record is not None
        counts = ("finished", "ok", "failed", "items", "unchanged", "deleted")
        assert {k: record[k] for k in counts} == {
            "finished": 2,
            "ok": 2,
            "failed": 0,
            "items": 2,
            "unchanged": 0,
            "deleted": 1,
        }
        assert runner.table.get(gone_key) is None
        assert runner.table.get(page_state_key(PIPELINE.name, "crawl", URL)) is not None


def test_an_expired_state_is_not_read() -> None:
    with MemoryRunner(PIPELINE) as runner:
        refs = [UrlRef(url=URL), UrlRef(url="https://shop.example/p/2")]
        for ref, expires in zip(refs, (T0 - 1, T0 + DAY), strict=True):
            key = page_state_key(PIPELINE.name, "crawl", ref.url)
            runner.table.put({"pk": key[0], "sk": key[1], "fp": "f", "expires_at": int(expires)})
        runner.services.clock = lambda: T0
        crawl = PIPELINE.task("crawl")
        assert isinstance(crawl, CrawlTask)
        assert set(read_states(runner.services, PIPELINE.name, crawl, refs)) == {refs[1].url}


def test_a_late_redelivery_of_an_older_fetch_does_not_overwrite_a_newer_state() -> None:
    with MemoryRunner(PIPELINE) as runner:
        runner.start("crawl")
        runner.fetch_queue.drain()
        key = page_state_key(PIPELINE.name, "crawl", URL)
        newer = {"pk": key[0], "sk": key[1], "fp": "from-a-later-run", "at": T0 + 5 * DAY}
        runner.table.put(newer)
        assert process_bundles(runner.services, [bundle("old news", None, T0 + DAY)]) == [1]
        assert runner.table.get(key) == newer


# ------------------------------------------------------------- two runs of the real engine


def revisit_pipeline(site: RevisitSite, **keys: Any) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "revisit",
            "defaults": {"politeness": {"delay": 0}},
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [site.url("/")],
                    "allow_private_network": True,
                    "incremental": True,
                    "follow": [{}],
                    "extract": [{"match": "/(p/|about)", "fields": {"title": "h1"}}],
                    **keys,
                }
            ],
        }
    )


Deliver = Callable[[Callable[[], object]], None]


def two_runs(
    site: RevisitSite, pipeline: Pipeline, *, wrap: Any = None, deliver: Deliver | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Run 1, then the site changes p/2 and p/5 and deletes p/6, then run 2 on the same table:
    each run's items and the second run's task record."""
    extra: dict[str, Any] = {} if deliver is None else {"deliver": deliver}
    config = CrawlConfig(shards=2, window=32)
    with MemoryRunner(pipeline, run_id="run-1", config=config, wrap=wrap, **extra) as runner:
        assert runner.run() == ["crawl"]
        first = list(iter_task_items(runner.table, runner.blobs, pipeline.name, "run-1", "crawl"))
        site.change("/p/2", "Product 2, cheaper")
        site.change("/p/5", "Product 5, renamed")
        site.delete("/p/6")
        site.forget()
        runner.run_id = "run-2"
        assert runner.run() == ["crawl"]
        second = list(iter_task_items(runner.table, runner.blobs, pipeline.name, "run-2", "crawl"))
        record = runner.table.get(task_key("run-2", "crawl"))
        assert record is not None
    return first, second, record


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_second_run_asks_conditionally_and_writes_only_what_changed(partitions: int) -> None:
    """At three partitions the stages propose and the judges record, and write the states
    of the copies they record (crawl/judges.py)."""
    with revisit_site() as site:
        pipeline = revisit_pipeline(site, limits={"seen_partitions": partitions})
        first, second, record = two_runs(site, pipeline)
        assert sorted(i["title"] for i in first) == [
            "About us",
            *(f"Product {n}" for n in range(1, 7)),
        ]
        assert sorted((i["_url"], i.get("title"), i.get("_deleted")) for i in second) == [
            (site.url("/p/2"), "Product 2, cheaper", None),
            (site.url("/p/5"), "Product 5, renamed", None),
            (site.url("/p/6"), None, True),
        ]
        seen = {r.path: r for r in site.seen()}
        assert set(seen) == {"/", "/about", *PRODUCTS}, "every page reached again"
        # Every page that sent a validator was asked conditionally; the unchanged ones got 304.
        assert {p for p, r in seen.items() if r.conditional} == {"/", *PRODUCTS}
        assert {p for p, r in seen.items() if r.status == 304} == {"/", "/p/1", "/p/3", "/p/4"}
        assert seen["/p/3"].if_none_match is None
        assert seen["/p/3"].if_modified_since
        # /about sends no validators and changes on every request, but its items do not.
        counts = {k: record[k] for k in ("finished", "ok", "failed", "items", "unchanged")}
        assert counts == {"finished": 8, "ok": 8, "failed": 0, "items": 3, "unchanged": 5}
        assert record["deleted"] == 1


def test_emit_all_writes_every_item_and_asks_unconditionally() -> None:
    with revisit_site() as site:
        _, second, record = two_runs(site, revisit_pipeline(site, emit="all"))
        assert not any(r.conditional for r in site.seen())
        assert len(second) == 7  # 5 products, about, a tombstone
        assert sum(bool(i.get("_deleted")) for i in second) == 1
        # Unchanged (though written): the home page (no items, the same links), /about and
        # the products 1, 3 and 4. Changed: the products 2 and 5. Deleted: product 6.
        counts = {k: record[k] for k in ("finished", "ok", "items", "unchanged", "deleted")}
        assert counts == {"finished": 8, "ok": 8, "items": 7, "unchanged": 5, "deleted": 1}


class Crash(Exception):  # noqa: N818 - a simulated process death
    pass


@pytest.mark.parametrize("partitions", [1, 3])
def test_crashes_and_duplicate_deliveries_change_nothing(partitions: int) -> None:
    rng = random.Random(16)
    countdown: list[int | None] = [None]

    def maybe() -> None:
        if countdown[0] is not None:
            countdown[0] -= 1
            if countdown[0] == 0:
                countdown[0] = None
                raise Crash

    def deliver(work: Callable[[], object]) -> None:
        for delivery in range(1 + (rng.random() < 0.3)):  # some messages come twice
            del delivery
            for _ in range(100):
                countdown[0] = rng.randint(1, 30) if rng.random() < 0.3 else None
                try:
                    work()
                    break
                except Crash:
                    continue

    class Chaotic:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self.inner, name)
            if name not in {"put", "update", "delete", "transact", "send_batch", "delete_many"}:
                return attr

            def wrapped(*args: Any, **kwargs: Any) -> Any:
                maybe()
                out = attr(*args, **kwargs)
                maybe()
                return out

            return wrapped

    with revisit_site() as site:
        pipeline = revisit_pipeline(site, limits={"seen_partitions": partitions})
        first, second, record = two_runs(site, pipeline, wrap=Chaotic, deliver=deliver)
    unique = {(i["_url"], i["_n"]): i for i in second}  # readers keep one copy of each
    assert len(first) == 7
    assert sorted(i.get("title", "tombstone") for i in unique.values()) == [
        "Product 2, cheaper",
        "Product 5, renamed",
        "tombstone",
    ]
    assert (record["finished"], record["items"], record["deleted"]) == (8, 3, 1)
