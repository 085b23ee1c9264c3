"""One entry of a crawl task's log (a *delta*), its item format and its spill, and the
URL fingerprints it holds: what :mod:`stepcrawl.crawl.tasklog` appends and folds into a view
(its docstring describes the attributes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.errors import FatalError
from stepcrawl.storage import BlobStore
from stepcrawl.table_keys import log_key

__all__ = [
    "LOG_TTL",
    "Delta",
    "PageLine",
    "commit_hash",
    "fingerprint",
    "pack",
    "spill_key",
    "unpack",
]

#: Seconds a log entry is kept (DynamoDB TTL): longer than the longest task timeout (365 days),
#: so a task's log outlives the task and its re-drives; a million pages keep ~50 MB.
LOG_TTL: Final = 366 * 86400


def spill_key(run: str, task: str, name: str) -> str:
    """Where the payload of a log entry too big for a table item lives."""
    return f"log/{run}/{task}/{name}.bin"


def fingerprint(url: str) -> int:
    """64-bit fingerprint of a canonical URL."""
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "little")


def pack(fps: Iterable[int]) -> bytes:
    values = list(fps)
    return struct.pack(f"<{len(values)}Q", *values)


def unpack(data: bytes | None) -> list[int]:
    raw = data or b""
    return list(struct.unpack(f"<{len(raw) // 8}Q", raw))


@dataclass(frozen=True)
class PageLine:
    """What a recorded page was, as reports read it back."""

    state: str  # done | failed | skipped
    status: int | None = None
    failure: str = ""
    attempts: int = 1
    size: int = 0
    fetch_ms: float = 0.0
    parse_ms: float = 0.0

    def text(self) -> str:
        status = "" if self.status is None else str(self.status)
        return ",".join(
            [
                self.state,
                status,
                self.failure,
                str(self.attempts),
                str(self.size),
                f"{self.fetch_ms:.1f}",
                f"{self.parse_ms:.1f}",
            ]
        )

    @classmethod
    def parse(cls, text: str) -> PageLine:
        state, status, failure, attempts, size, fetch_ms, parse_ms = text.split(",")
        return cls(
            state=state,
            status=int(status) if status else None,
            failure=failure,
            attempts=int(attempts),
            size=int(size),
            fetch_ms=float(fetch_ms),
            parse_ms=float(parse_ms),
        )


@dataclass
class Delta:
    """One entry of the log (see the module docstring)."""

    by: str  # the committers' ids, comma-separated (see :meth:`ids`)
    admitted: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    recorded: list[tuple[int, PageLine]] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    #: per recorded page, the index in :meth:`ids` of the bundle that recorded it
    recorded_by: list[int] = field(default_factory=list)
    part: str = ""  # the items part of the recorded pages ("" if they hold no items)
    #: the data profile's counts of the recorded pages, sparse (quality/counters.py)
    quality: str = ""
    spill: str = ""  # the blob key holding the payload ("" if the entry holds it itself)
    #: a partition's judgement: the last proposal it judged (crawl/judges.py); 0 otherwise
    thru: int = 0
    #: a partition's judgement: per recorded page, the proposal its copy is from, counted
    #: from 1 within the round's (0: none, a drain's); a byte each while a round's proposals
    #: are under 256, two (``cw``) past that (crawl/judges.py, ``ROUND_PROPOSALS``)
    copies: list[int] = field(default_factory=list)

    def ids(self) -> list[str]:
        return self.by.split(",")

    def recorders(self) -> list[str]:
        """Per recorded page, the id of the commit that recorded it."""
        ids = self.ids()
        if not self.recorded_by:
            return [ids[0]] * len(self.recorded)
        return [ids[n] for n in self.recorded_by]

    def urls(self) -> int:
        """How many URLs the entry names (what holding it costs)."""
        return len(self.admitted) + len(self.skipped) + len(self.recorded) + len(self.reopened)

    def payload_bytes(self) -> int:
        """What the payload weighs in an item (fingerprints, lines, recorders)."""
        lines = sum(len(line.text()) + 1 for _, line in self.recorded)
        wide = 2 if self.copies and max(self.copies) > 255 else 1
        extra = len(self.recorded_by) + wide * len(self.copies) + len(self.quality)
        return 8 * self.urls() + lines + extra

    def payload(self) -> dict[str, Any]:
        """The packed attributes (see the module docstring)."""
        item: dict[str, Any] = {}
        if self.admitted:
            item["adm"] = pack(self.admitted)
        if self.skipped:
            item["skp"] = pack(self.skipped)
        if self.recorded:
            item["rec"] = pack(fp for fp, _ in self.recorded)
            item["st"] = "|".join(line.text() for _, line in self.recorded)
        if self.reopened:
            item["unrec"] = pack(self.reopened)
        if any(self.recorded_by):
            item["rb"] = bytes(self.recorded_by)
        if any(self.copies):
            if max(self.copies) < 256:
                item["cp"] = bytes(self.copies)
            else:
                item["cw"] = b"".join(c.to_bytes(2, "little") for c in self.copies)
        if self.quality:
            item["q"] = self.quality
        return item

    def spill_body(self) -> bytes:
        """The payload as a blob: compressed JSON, binary attributes in base64."""
        payload = {
            k: base64.b64encode(v).decode() if isinstance(v, bytes) else v
            for k, v in self.payload().items()
        }
        return zlib.compress(json.dumps(payload, separators=(",", ":")).encode())

    def item(self, run: str, task: str, seq: int, now: float) -> dict[str, Any]:
        pk, sk = log_key(run, task, seq)
        item: dict[str, Any] = {
            "pk": pk,
            "sk": sk,
            "b": self.by,
            "expires_at": int(now) + LOG_TTL,
        }
        if self.spill:
            item["x"] = self.spill
        else:
            item.update(self.payload())
        if self.part:
            item["p"] = self.part
        if self.thru:
            item["thru"] = self.thru
        return item

    @classmethod
    def of(cls, item: dict[str, Any], blobs: BlobStore | None = None) -> Delta:
        """The delta of a log entry; ``blobs`` reads a spilled payload back."""
        if spill := str(item.get("x") or ""):
            if blobs is None:
                raise FatalError(f"log entry {item['pk']}/{item['sk']} spilled; no blob store")
            text = json.loads(zlib.decompress(blobs.get(spill)))
            binary = {"adm", "skp", "rec", "unrec", "rb", "cp", "cw"}
            item = {
                **item,
                **{k: base64.b64decode(v) if k in binary else v for k, v in text.items()},
            }
        lines = [PageLine.parse(t) for t in str(item.get("st") or "").split("|") if t]
        return cls(
            by=str(item["b"]),
            admitted=unpack(item.get("adm")),
            skipped=unpack(item.get("skp")),
            recorded=list(zip(unpack(item.get("rec")), lines, strict=True)),
            reopened=unpack(item.get("unrec")),
            recorded_by=list(item.get("rb") or b""),
            copies=_copies_of(item),
            part=str(item.get("p") or ""),
            quality=str(item.get("q") or ""),
            spill=spill,
            thru=int(item.get("thru") or 0),
        )


def _copies_of(item: dict[str, Any]) -> list[int]:
    """:attr:`Delta.copies` as an entry stores them: a byte each, or two (``cw``)."""
    if wide := item.get("cw"):
        data = bytes(wide)
        return [int.from_bytes(data[n : n + 2], "little") for n in range(0, len(data), 2)]
    return list(item.get("cp") or b"")


def commit_hash(by: str) -> int:
    """The 64-bit key of a commit id in :attr:`TaskLog.commits`."""
    return fingerprint(f"commit:{by}")
