"""How a proposal is stored: compressed JSON laid out so that a partition's judge decodes
only its share (docs/architecture.md, "Flat state: the design", step 2).

Every partition's judge reads every proposal of its task, so a judge that decoded each
whole, as the first layout had it, spent what a page costs to decode once a partition: at
128 partitions, 5.7 ms of CPU a page of a proposal of 10 pages and 300 links
(``bench/proposal_decode.py``), growing with the task, whose partitions split as it grows.

The payload is ``zlib`` of one header line (JSON: the writer's id, its usage, the items
part, the seeds as written, and the byte length of each section) and four sections: the
pages, the candidate links, the re-opened and the drained URLs. A section is lines
``[url, entry]`` sorted by the URL's fingerprint (stable: two copies of one page keep their
order). A partition is a range of fingerprints (``partition_of`` is monotonic in them), so
a judge finds its lines by bisection, computing a fingerprint for a few lines of each
section, and parses only those. So, within one proposal, a partition's pages and links are
judged in fingerprint order (the order they are stored in); seeds keep the order written
(the first ``max_pages`` of a seed list are the ones admitted) and are filtered whole, once
a task per partition. Payloads of the first layout (no ``v``) are still read: proposals
written before an upgrade stay in a running task's log.
"""

from __future__ import annotations

import base64
import json
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict
from dataclasses import fields as dataclass_fields
from typing import Any, Final

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.incremental import PageState
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.crawl.partitions import Partition, partition_of
from stepcrawl.crawl.tasklog import fingerprint
from stepcrawl.storage import Usage

__all__ = ["decode", "encode"]

#: The layout's version in the header (the first layout has none).
_VERSION: Final = 2
#: The sections, in the order stored.
_SECTIONS: Final = ("pages", "links", "reopen", "drain")
#: How a bytes value of a page's state (its packed links) is kept in the JSON of a proposal.
_BYTES: Final = "__b64__"
_COMPRESSION: Final = 6
#: A page's fields at their defaults are left out of its line.
_REQUIRED: Final = object()
_DEFAULTS: Final = {
    f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
    for f in dataclass_fields(PageCommit)
    if f.default is not MISSING or f.default_factory is not MISSING
}


def _bytes_out(value: Any) -> Any:
    """``value`` with every bytes in it as ``{_BYTES: base64}`` (JSON has no bytes)."""
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _bytes_out(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bytes_out(v) for v in value]
    return value


def _bytes_in(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_BYTES}:
            return base64.b64decode(value[_BYTES])
        return {k: _bytes_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bytes_in(v) for v in value]
    return value


def _page(page: PageCommit) -> dict[str, Any]:
    """A page's fields but those at their defaults (most are), its URL (the line's) and its
    links (in their section); the items travel in the part, not in the proposal: no rows."""
    fields: dict[str, Any] = {}
    for f in dataclass_fields(page):
        value = getattr(page, f.name)
        if f.name in ("rows", "children", "ref") or value == _DEFAULTS.get(f.name, _REQUIRED):
            continue
        fields[f.name] = value
    if page.state is not None:
        fields["state"] = _bytes_out(asdict(page.state))
    return fields


def _unpage(url: str, ref: dict[str, Any], fields: dict[str, Any]) -> PageCommit:
    state = fields.pop("state", None)
    return PageCommit(
        **{
            **fields,
            "ref": UrlRef.model_validate({"url": url, **ref}),
            "quality": {int(k): v for k, v in fields.get("quality", {}).items()},
            "state": None if state is None else PageState(**_bytes_in(state)),
        }
    )


def _ref(ref: UrlRef) -> dict[str, Any]:
    return ref.model_dump(exclude={"url"}, exclude_defaults=True)


def _section(lines: list[tuple[str, Any]]) -> bytes:
    """``(url, entry)`` lines sorted by the URL's fingerprint, stably."""
    ordered = sorted(lines, key=lambda line: fingerprint(line[0]))
    dumps = (json.dumps(line, separators=(",", ":"), default=str) for line in ordered)
    return "\n".join(dumps).encode()


def encode(proposal: Proposal) -> bytes:
    """The proposal as stored (the module's docstring)."""
    sections = [
        _section([(p.ref.url, [m, _ref(p.ref), _page(p)]) for m, p in enumerate(proposal.pages)]),
        _section([(c.url, _ref(c)) for p in proposal.pages for c in p.children]),
        _section([(r.url, _ref(r)) for r in proposal.reopen]),
        _section([(url, 0) for url in proposal.drain]),
    ]
    head = {
        "v": _VERSION,
        "by": proposal.by,
        "usage": proposal.usage.as_dict(),
        "seeds": [s.model_dump() for s in proposal.seeds],
        "sizes": [len(s) for s in sections],
        **({"part": proposal.part} if proposal.part else {}),
        **({"pipeline": proposal.pipeline} if proposal.pipeline else {}),
    }
    header = json.dumps(head, separators=(",", ":"), default=str).encode()
    return zlib.compress(b"\n".join([header, *sections]), _COMPRESSION)


_STRING: Final = json.JSONDecoder()


def _url_of(line: bytes) -> str:
    """The URL a line starts with, without parsing its entry (what bisection reads)."""
    url: str = _STRING.raw_decode(line.decode(), 1)[0]
    return url


def _share(section: bytes, part: Partition | None) -> list[list[Any]]:
    """The ``[url, entry]`` lines of ``section`` that are ``part``'s (all: ``None``)."""
    if not section:
        return []
    lines = section.split(b"\n")
    if part is not None:

        def at(line: bytes) -> int:
            return partition_of(fingerprint(_url_of(line)), part.grid)

        low = bisect_left(lines, part.index, key=at)
        lines = lines[low : bisect_right(lines, part.index, lo=low, key=at)]
    read: list[list[Any]] = json.loads(b"[" + b",".join(lines) + b"]")
    return read


def decode(payload: bytes, part: Partition | None = None) -> Proposal:
    """The proposal stored as ``payload``; with ``part``, only what is about its URLs (a
    partition's judge holds its own share of a round, not all of it): those pages, each with
    its index as written (a copy is named by it), and the candidate links of all the pages,
    seeds, re-opens and drains that are its (:attr:`Proposal.indices`,
    :attr:`Proposal.links`). Without it, every page and link, in the stored order."""
    raw = zlib.decompress(payload)
    header = raw.partition(b"\n")[0]
    head = json.loads(header)
    if head.get("v") != _VERSION:
        return _decode_first(head, part)
    sections: dict[str, list[list[Any]]] = {}
    start = len(header) + 1
    for name, size in zip(_SECTIONS, head["sizes"], strict=True):
        sections[name] = _share(raw[start : start + size], part)
        start += size + 1
    pages = sorted(sections["pages"], key=lambda line: int(line[1][0]))  # the order written

    def refs(name: str) -> list[UrlRef]:
        return [UrlRef.model_validate({"url": url, **entry}) for url, entry in sections[name]]

    keep = _keep(part)
    return Proposal(
        by=head["by"],
        pages=[_unpage(url, ref, fields) for url, (_, ref, fields) in pages],
        seeds=[UrlRef.model_validate(s) for s in head["seeds"] if keep(s["url"])],
        reopen=refs("reopen"),
        drain=[url for url, _ in sections["drain"]],
        usage=Usage(**head["usage"]),
        indices=[int(entry[0]) for _, entry in pages],
        links=refs("links"),
        part=head.get("part", ""),
        pipeline=head.get("pipeline", ""),
    )


def _first_page(fields: dict[str, Any]) -> PageCommit:
    """A page as the first layout stored it: every field (its links are read apart)."""
    ref = {k: v for k, v in fields["ref"].items() if k != "url"}
    rest = {k: v for k, v in fields.items() if k not in ("ref", "children")}
    return _unpage(fields["ref"]["url"], ref, rest)


def _keep(part: Partition | None) -> Callable[[str], bool]:
    if part is None:
        return lambda _: True
    return lambda url: part.holds(fingerprint(url))


def _decode_first(body: dict[str, Any], part: Partition | None) -> Proposal:
    """A payload of the first layout: one JSON body, every page with its links."""
    usage = Usage(**body["usage"])
    keep = _keep(part)

    def mine(found: Sequence[dict[str, Any]]) -> list[UrlRef]:
        return [UrlRef.model_validate(r) for r in found if keep(r["url"])]

    pages = [(m, p) for m, p in enumerate(body["pages"]) if keep(p["ref"]["url"])]
    links = [link for page in body["pages"] for link in mine(page["children"])]
    for _, page in pages:
        page["children"] = []  # in ``links``
    return Proposal(
        by=body["by"],
        pages=[_first_page(p) for _, p in pages],
        seeds=mine(body["seeds"]),
        reopen=mine(body["reopen"]),
        drain=[url for url in body["drain"] if keep(url)],
        usage=usage,
        indices=[m for m, _ in pages],
        links=links,
        part=body.get("part", ""),
    )
