"""Incremental recrawls: what a crawl task keeps of each page between runs, and what a later
run makes of a revisit (``incremental: true``; docs/pipelines.md, "Incremental recrawls").

**The state.** Per pipeline, task and canonical URL the table holds one item
(:func:`stepcrawl.table_keys.page_state_key`): the response's validators (ETag, Last-Modified), the
fingerprint of the page's items, the links the task follows from it (zlib; only when there
are validators, since only a 304 needs them), when it was fetched (``at``) and the TTL
``expires_at`` (``incremental_ttl`` after the write). The key names the task, not only the
pipeline: two tasks may extract different items from one URL.

**Fetch** (:func:`read_states`, :func:`conditional`, :func:`annotate`): the states of a
batch's pages are read in one batch read. A page with validators is requested with
If-None-Match / If-Modified-Since (not with ``emit: all``, which must write every page's
items, and a 304 has none), and a 304 to such a request is a page (outcome ok), not a
failure. Each envelope carries what was read and the response's validators
(:class:`~stepcrawl.crawl.messages.Revisit`): every decision below is taken from the message
alone, so a redelivered bundle decides exactly as the first delivery did.

**Parse** (:func:`revisit`, :func:`settle`):

- a 304 is ``unchanged``: no items; its children are the links kept with its state (a 304
  has no body to find them in), so a second run still reaches every page the first did;
- a 200 is changed when its items' fingerprint differs from the kept one (or the page is
  new); with ``emit: changed`` an unchanged page writes no items. The fingerprint is of the
  extracted items, not of the body: ads, timestamps, CSRF tokens and session ids change a
  body on every request without changing what the task extracts, and a change of the
  extraction rules shows as a change (the items differ);
- a 404 or 410 of a known page is recorded as done (``deleted``, not a failure: the run's
  error ratio must not count pages the site removed) and yields one tombstone item
  (:func:`tombstone`); its state is deleted.

**Exactly once.** The items follow the commit as before (one part named by the bundles). The
states are written after the parts (:func:`write_states`), for the pages the commit
recorded only, each a conditional put (or delete) that holds unless the stored state is newer
(``at``): a redelivery rewrites the same state (it is computed from the message), a late
redelivery of an older run cannot overwrite a newer state, and a crash before the write
leaves the old state, which the redelivery replaces. A state unchanged but for its age is
rewritten only past half its TTL, so unchanged pages cost no write.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import KnownPage, PageEnvelope, Revisit, UrlRef
from stepcrawl.fetch import FetchPolicy, FetchResult
from stepcrawl.pipeline import CrawlTask
from stepcrawl.storage import AnyOf, Cond
from stepcrawl.table_keys import page_state_key

__all__ = [
    "GONE_STATUSES",
    "MAX_LINKS_BYTES",
    "Fetches",
    "HeaderFetcher",
    "PageState",
    "annotate",
    "bundle_ident",
    "bundle_weight",
    "conditional",
    "conditional_headers",
    "items_fingerprint",
    "read_states",
    "revisit",
    "settle",
    "tombstone",
    "write_states",
]

#: Statuses that end a known page: a tombstone item, its state removed.
GONE_STATUSES: Final = frozenset({404, 410})
NOT_MODIFIED: Final = 304
#: Compressed links kept with a state at most. A page with more keeps no validators (it is
#: fetched in full every run, its links found again) rather than a state item that costs a
#: write unit per KiB (DynamoDB items stop at 400 KB).
MAX_LINKS_BYTES: Final = 32 * 1024
#: The table's TTL attribute (infra/storage.py), in epoch seconds.
_EXPIRES: Final = "expires_at"
#: Item attributes that describe a fetch, not the page: left out of the fingerprint.
_FETCH_FIELDS: Final = frozenset({"_url", "_task", "_fetched_at", "_n"})


@dataclass(frozen=True)
class PageState:
    """The state one recorded page leaves for the next run: ``item`` to put (without its
    key), or ``None`` to delete the state (a tombstone); ``at`` orders writes."""

    url: str
    at: float
    item: dict[str, Any] | None


# ------------------------------------------------------------------------------------ fetch


def read_states(
    services: CrawlServices, pipeline: str, task: CrawlTask, refs: Sequence[UrlRef]
) -> dict[str, dict[str, Any]]:
    """The kept states of a batch's pages, by URL, in one batch read (eventually consistent:
    a state is written a run before it is read); empty unless the task is incremental.

    A state past its TTL is left out: DynamoDB deletes expired items lazily (within days),
    and until then they still show in reads, but the page is new again after
    ``incremental_ttl`` (docs/pipelines.md)."""
    if not task.incremental:
        return {}
    keys = {page_state_key(pipeline, task.id, r.url): r.url for r in refs if r.kind == "page"}
    if not keys:
        return {}
    now = services.clock()
    return {
        keys[key]: item
        for key, item in services.table.batch_get(list(keys)).items()
        if float(item.get(_EXPIRES, now + 1)) > now
    }


def conditional_headers(state: Mapping[str, Any]) -> dict[str, str]:
    """The conditional request headers of a kept state (empty: it has no validators)."""
    headers: dict[str, str] = {}
    if state.get("etag"):
        headers["If-None-Match"] = str(state["etag"])
    if state.get("lm"):
        headers["If-Modified-Since"] = str(state["lm"])
    return headers


class Fetches(Protocol):
    """What the fetch stage fetches a batch with (its ``BatchFetcher``)."""

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]: ...

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None: ...


class HeaderFetcher(Protocol):
    """A fetcher that takes request headers per URL (:meth:`stepcrawl.fetch.Fetcher.fetch_many`)."""

    async def fetch_many(
        self,
        urls: Sequence[str],
        policy: FetchPolicy,
        concurrency: int,
        *,
        headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FetchResult]: ...

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None: ...


class _Conditional:
    """A fetcher that sends each URL's conditional headers and takes a 304 to them as a page."""

    def __init__(self, inner: HeaderFetcher, headers: dict[str, dict[str, str]]) -> None:
        self._inner = inner
        self._headers = headers

    async def fetch_many(
        self, urls: Sequence[str], policy: FetchPolicy, concurrency: int
    ) -> list[FetchResult]:
        results = await self._inner.fetch_many(urls, policy, concurrency, headers=self._headers)
        return [
            dataclasses.replace(r, outcome="ok")
            if r.status == NOT_MODIFIED and r.url in self._headers
            else r
            for r in results
        ]

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        return await self._inner.crawl_delay(url, policy)


def conditional(
    fetcher: Fetches, task: CrawlTask, states: Mapping[str, Mapping[str, Any]]
) -> Fetches:
    """``fetcher``, sending conditional requests for the URLs of ``states`` that have
    validators (``fetcher`` itself when there are none, or with ``emit: all``)."""
    if task.emits_all:
        return fetcher
    headers = {url: h for url, state in states.items() if (h := conditional_headers(state))}
    if not headers:
        return fetcher
    # Fetcher.fetch_many takes headers; a stand-in that does not fails loudly here.
    return _Conditional(cast("HeaderFetcher", fetcher), headers)


def annotate(
    task: CrawlTask,
    states: Mapping[str, Mapping[str, Any]],
    results: Sequence[FetchResult],
    envelopes: Sequence[PageEnvelope],
    at: float,
) -> list[PageEnvelope]:
    """The envelopes of an incremental task's pages with their :class:`Revisit`: the
    response's validators, the fetch time ``at`` and the kept state (its links on a 304)."""
    if not task.incremental:
        return list(envelopes)
    by_url = {r.url: r for r in results}
    out: list[PageEnvelope] = []
    for envelope in envelopes:
        result = by_url.get(envelope.ref.url)
        if result is None or envelope.ref.kind != "page":
            out.append(envelope)
            continue
        state = states.get(envelope.ref.url)
        not_modified = envelope.outcome == "ok" and envelope.status == NOT_MODIFIED
        known = None if state is None else _known(state, with_links=not_modified)
        revisit = Revisit(
            at=at,
            etag=result.headers.get("etag"),
            last_modified=result.headers.get("last-modified"),
            known=known,
        )
        out.append(envelope.model_copy(update={"revisit": revisit}))
    return out


def bundle_ident(envelope: PageEnvelope) -> str:
    """What a bundle's id adds for an incremental page: the kept state its decisions were
    taken against. Two fetches with the same answer but different kept states decide
    differently, so they must not pass for one bundle redelivered."""
    known = envelope.revisit.known if envelope.revisit else None
    return "" if known is None else f"#{known.sfp}@{known.at!r}"


def bundle_weight(envelope: PageEnvelope) -> int:
    """Bytes an envelope's revisit adds to its parse message (a 304's links)."""
    known = envelope.revisit.known if envelope.revisit else None
    return len(known.links_z or "") if known else 0


def _known(state: Mapping[str, Any], *, with_links: bool) -> KnownPage:
    links = state.get("links")
    return KnownPage(
        fp=str(state["fp"]),
        sfp=str(state["sfp"]),
        at=float(state["at"]),
        etag=state.get("etag"),
        last_modified=state.get("lm"),
        links_z=base64.b64encode(bytes(links)).decode() if with_links and links else None,
    )


# ------------------------------------------------------------------------------------ parse


def revisit(
    task: CrawlTask, envelope: PageEnvelope, max_depth: int
) -> tuple[PageCommit, list[dict[str, Any]]] | None:
    """The page commit (and items) of a revisit that has no body to parse: a 304 (unchanged,
    its kept links as children) or a known page now gone (a tombstone); None otherwise."""
    seen = envelope.revisit
    if seen is None or seen.known is None or envelope.ref.kind != "page":
        return None
    ref, known = envelope.ref, seen.known
    if envelope.outcome == "ok" and envelope.status == NOT_MODIFIED:
        links = _unpack_links(known.links_z)
        page = PageCommit(
            ref,
            True,
            NOT_MODIFIED,
            "not modified",
            children=[UrlRef(url=u, depth=ref.depth + 1) for u in links]
            if ref.depth < max_depth
            else [],
            fetch_ms=envelope.elapsed_ms,
            unchanged=True,
        )
        etag = seen.etag or known.etag
        last_modified = seen.last_modified or known.last_modified
        page.state = _state(task, envelope, known.fp, links, etag, last_modified)
        return page, []
    if envelope.outcome == "failed" and envelope.status in GONE_STATUSES:
        page = PageCommit(
            ref,
            True,
            envelope.status,
            "gone: tombstone",
            items=1,
            size=envelope.size,
            fetch_ms=envelope.elapsed_ms,
            deleted=True,
            state=PageState(ref.url, seen.at, None),
        )
        return page, [tombstone(task, envelope)]
    return None


def tombstone(task: CrawlTask, envelope: PageEnvelope) -> dict[str, Any]:
    """The item that says a known page is gone: its URL, task, when it was seen gone and the
    status it answered (``_n`` 0: readers keep one copy per ``(_url, _n)``)."""
    return {
        "_url": envelope.ref.url,
        "_task": task.id,
        "_fetched_at": envelope.fetched_at,
        "_n": 0,
        "_deleted": True,
        "_status": envelope.status,
    }


def settle(
    task: CrawlTask,
    envelope: PageEnvelope,
    page: PageCommit,
    items: list[dict[str, Any]],
    links: Sequence[str],
) -> list[dict[str, Any]]:
    """The items to write of a parsed page (all of a new or changed one; none of an unchanged
    one, unless ``emit: all``); sets ``page``'s ``unchanged``, ``items`` and ``state``.
    ``links`` are every link the page's rules follow (whatever its depth)."""
    seen = envelope.revisit
    if seen is None or not page.ok:
        return items
    fp = items_fingerprint(items)
    known = seen.known
    page.unchanged = known is not None and known.fp == fp
    emitted = items if not page.unchanged or task.emits_all else []
    page.items = len(emitted)
    page.state = _state(task, envelope, fp, links, seen.etag, seen.last_modified)
    return emitted


def items_fingerprint(items: Sequence[Mapping[str, Any]]) -> str:
    """What "changed" compares: the items' fields (and kinds), in order, without the fields
    that describe the fetch (URL, task, time, position)."""
    payload = [{k: v for k, v in item.items() if k not in _FETCH_FIELDS} for item in items]
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _state(
    task: CrawlTask,
    envelope: PageEnvelope,
    fp: str,
    links: Sequence[str],
    etag: str | None,
    last_modified: str | None,
) -> PageState | None:
    """The state a page leaves, or None when the kept one is the same and young enough."""
    seen = envelope.revisit
    assert seen is not None
    packed = _pack_links(links) if (etag or last_modified) else b""
    if len(packed) > MAX_LINKS_BYTES:
        etag = last_modified = None  # fetched in full next time: no links needed
        packed = b""
    whole = json.dumps([fp, etag, last_modified, list(links) if packed else []])
    sfp = hashlib.blake2b(whole.encode(), digest_size=8).hexdigest()
    known = seen.known
    if known is not None and known.sfp == sfp and seen.at - known.at < task.incremental_ttl / 2:
        return None
    item: dict[str, Any] = {
        "url": envelope.ref.url,
        "fp": fp,
        "sfp": sfp,
        "at": seen.at,
        _EXPIRES: int(seen.at + task.incremental_ttl),
    }
    if etag:
        item["etag"] = etag
    if last_modified:
        item["lm"] = last_modified
    if packed:
        item["links"] = packed
    return PageState(envelope.ref.url, seen.at, item)


def _pack_links(links: Sequence[str]) -> bytes:
    return zlib.compress("\n".join(links).encode(), 6) if links else b""


def _unpack_links(links_z: str | None) -> list[str]:
    if not links_z:
        return []
    return zlib.decompress(base64.b64decode(links_z)).decode().split("\n")


def write_states(
    services: CrawlServices, pipeline: str, task: str, pages: Sequence[PageCommit]
) -> int:
    """Write the states the recorded ``pages`` leave (after their items); each write holds
    unless the stored state is newer. Returns how many were written."""
    written = 0
    for page in pages:
        state = page.state
        if state is None:
            continue
        key = page_state_key(pipeline, task, state.url)
        not_newer = Cond("at", "le", state.at)
        if state.item is None:
            written += services.table.delete(key, condition=not_newer)
        else:
            item = {"pk": key[0], "sk": key[1], **state.item}
            written += services.table.put(
                item, condition=AnyOf((Cond("pk", "not_exists"), not_newer))
            )
    return written
