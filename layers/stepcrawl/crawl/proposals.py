"""A task's proposal log: what writers propose, for the partitions' judges to decide
(docs/architecture.md, "Flat state: the design", step 2; written by the stages for tasks
of ``limits.seen_partitions`` > 1: crawl/proposing.py).

Proposal ``n`` of a task is one item (``PROP#<run>#<task>#<n mod PROPOSAL_STRIPES>`` / ``n``),
written once by a conditional put at the next sequence and never changed: a judge reads
proposals with eventually consistent reads, and the first sequence it does not find ends
its read (one appended later is read by its next round). The payload is compressed JSON
laid out so that a partition's judge decodes only its share (crawl/proposal_format.py); one
over ``CrawlConfig.log_entry_bytes`` goes to a blob the item names, written first and
content-named, as a log entry's does.

A writer holds only the log's end for each task it writes (:class:`ProposalLog`), never the
proposals, and a cache of fixed size of the links it proposed lately (:class:`RecentLinks`):
what a container holds does not grow with the task.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from stepcrawl.crawl.commit import PageCommit
from stepcrawl.crawl.judging import Proposal
from stepcrawl.crawl.partitions import Partition
from stepcrawl.crawl.proposal_cache import ProposalCache
from stepcrawl.crawl.proposal_format import decode, encode
from stepcrawl.crawl.tasklog import LOG_TTL, fingerprint, spill_key
from stepcrawl.errors import RetryableError
from stepcrawl.storage import BlobStore, Cond, Table, Usage
from stepcrawl.table_keys import PROPOSAL_STRIPES

__all__ = [
    "ProposalLog",
    "ProposalWriters",
    "RecentLinks",
    "proposal_key",
    "propose_pages",
    "read_proposals",
]

#: Sequences one read of a writer looking for the log's end asks for (a batch takes 100).
_PROBE: Final = 99
#: Sequences 1, 2, 4, ... 2**61 past the end known: the first read brackets any end.
_GALLOP: Final = 62
#: Sequences right after the end known that a writer whose append lost its sequence reads
#: first (:meth:`ProposalLog._find_end`).
_NEAR: Final = 16
_MAX_ROUNDS: Final = 1000
#: Proposals a reader asks for first when it knows of none (then twice as many each read).
_FIRST_READ: Final = 4
#: Keys one batched read asks for at most (DynamoDB's BatchGetItem takes 100): what a read
#: holds at once, however many proposals the caller reads in all.
_BATCH_KEYS: Final = 100


def proposal_key(run: str, task: str, seq: int) -> tuple[str, str]:
    """Where proposal ``seq`` of a task lives (striped by sequence, as the log is)."""
    return f"PROP#{run}#{task}#{seq % PROPOSAL_STRIPES}", f"{seq:012d}"


def _spill_key(run: str, task: str, name: str) -> str:
    # Beside the log's spills: the roles that append to a task's log may write and read it.
    return spill_key(run, task, f"prop-{name}")


class ProposalLog:
    """A writer's handle on one task's proposal log: the end it last knew, nothing more."""

    def __init__(self, run: str, task: str, *, most_bytes: int) -> None:
        self.run, self.task = run, task
        self.most_bytes = most_bytes  # a payload past it spills to a blob
        self.end = 0

    def stored(self, blobs: BlobStore, proposal: Proposal, now: float) -> dict[str, Any]:
        """``proposal`` as its item holds it, keys aside; a payload over ``most_bytes`` is
        put in a blob first (content-named: the same payload, the same object)."""
        payload = encode(proposal)
        item: dict[str, Any] = {"expires_at": int(now) + LOG_TTL}
        if len(payload) > self.most_bytes:
            name = hashlib.blake2b(payload, digest_size=12).hexdigest()
            blobs.put(_spill_key(self.run, self.task, name), payload)
            item["x"] = name
        else:
            item["z"] = payload
        if proposal.part:  # read by the items reader without the payload (crawl/items.py)
            item["p"] = proposal.part
        return item

    def append(self, table: Table, blobs: BlobStore, proposal: Proposal, now: float) -> int:
        """Append ``proposal`` at the next free sequence; which one."""
        item = self.stored(blobs, proposal, now)
        for _ in range(_MAX_ROUNDS):
            seq = self.end + 1
            pk, sk = proposal_key(self.run, self.task, seq)
            if table.put({**item, "pk": pk, "sk": sk}, condition=Cond("pk", "not_exists")):
                self.end = seq
                return seq
            self._find_end(table)
        raise RetryableError(f"task {self.task}: the proposal log moved {_MAX_ROUNDS} times")

    def _find_end(self, table: Table) -> None:
        """Find the log's end past the one known. Proposals are appended with no gap, so
        those that exist are 1..end. First the :data:`_NEAR` sequences after the known end,
        in one batched consistent read: what the task's other writers appended since this
        one's last append, most often (a key not found costs a read as one found does, so
        the gallop's 62 keys, read first, cost every append that lost its sequence ~70 read
        units: 88% of the proposal log's reads at 32 partitions, ``bench/hot_keys.py``).
        Past them, one read of the sequences at 1, 2, 4, ... past brackets the end, then each
        read of up to 100 evenly spaced ones narrows the bracket a hundredfold (a writer new
        to a log of a million proposals finds its end in 5 reads, where probing one by one
        took 10,000)."""
        near = list(range(self.end + 1, self.end + 1 + _NEAR))
        if self._probe(table, near, 0):
            return  # a sequence of them is missing: the end is the one before it
        high = self._probe(table, [self.end + 2**k for k in range(_GALLOP)], None)
        while high - self.end > 1:  # end exists, high does not
            step = -(-(high - self.end) // _PROBE)  # at most _PROBE sequences a read
            high = self._probe(table, list(range(self.end + step, high, step)), high)

    def _probe(self, table: Table, seqs: list[int], high: int | None) -> int:
        """Read ``seqs`` (ascending, past ``end``, below ``high``, which does not exist):
        move ``end`` to the last that exists and return the first that does not (``high``
        if all do: 0 says so; ``None``, twice the end)."""
        keys = [proposal_key(self.run, self.task, seq) for seq in seqs]
        found = table.batch_get(keys, consistent=True)
        for seq, key in zip(seqs, keys, strict=True):
            if key not in found:
                return seq
            self.end = seq
        return high if high is not None else 2 * self.end


def read_proposals(
    table: Table,
    blobs: BlobStore,
    run: str,
    task: str,
    after: int,
    most: int,
    *,
    part: Partition | None = None,
    most_bytes: int | None = None,
    most_urls: int | None = None,
    expect: int = 0,
    cache: ProposalCache | None = None,
) -> list[tuple[int, Proposal]]:
    """The proposals after sequence ``after``, at most ``most``, up to the first one not
    found (eventually consistent: proposals never change once written), and up to the one
    whose stored payloads reach ``most_bytes`` together, or whose URLs as read reach
    ``most_urls`` (at least one). ``part``: read only its share
    (:func:`proposal_format.decode`). ``cache``: the container's recently read payloads,
    asked first and added to.

    A key asked for and not found costs a read all the same (DynamoDB's minimum), so the
    keys are asked for in batches that double while every key is found, from ``expect``
    (how many the caller knows exist) or :data:`_FIRST_READ`: a judge one proposal behind
    pays for a few keys, not for a hundred."""
    out: list[tuple[int, Proposal]] = []
    read = urls = 0
    want = min(most, _BATCH_KEYS, max(expect, _FIRST_READ))
    while want > 0:
        start = after + len(out) + 1
        kept = {n: cache.get(run, task, n) for n in range(start, start + want)} if cache else {}
        keys = {proposal_key(run, task, n): n for n in range(start, start + want)}
        missing = [key for key, n in keys.items() if kept.get(n) is None]
        found = table.batch_get(missing, consistent=False) if missing else {}
        for key, n in keys.items():
            payload = kept.get(n)
            if payload is None:
                if (item := found.pop(key, None)) is None:
                    return out
                payload = (
                    blobs.get(_spill_key(run, task, str(item["x"])))
                    if "x" in item
                    else bytes(item["z"])
                )
                if cache is not None:
                    cache.put(run, task, n, payload)
            proposal = decode(payload, part)
            out.append((n, proposal))
            read, urls = read + len(payload), urls + proposal.urls()
            if (most_bytes is not None and read >= most_bytes) or (
                most_urls is not None and urls >= most_urls
            ):
                return out
        want = min(2 * want, _BATCH_KEYS, most - len(out))
    return out


class RecentLinks:
    """The links a container proposed lately, by task: a direct-mapped table of fixed size
    (Mercator's cache of recent URLs; IRLbot's in front of DRUM). Most links of a page repeat
    what its neighbours linked (navigation, listings), so most never reach a proposal.

    A link is remembered only once the proposal naming it is in the log (:func:`propose_pages`):
    every proposal is judged, so a link left out because it is remembered is admitted or
    found seen by the judge of the one that named it. A collision overwrites a slot, which
    only lets a link be proposed again: the judges find it seen.
    """

    def __init__(self, slots: int = 1 << 20) -> None:
        self.slots = array("Q", bytes(8 * slots))  # 0: empty
        self.lock = threading.Lock()

    def _key(self, run: str, task: str, url: str) -> int:
        return fingerprint(f"{run}/{task}") ^ fingerprint(url) or 1

    def known(self, run: str, task: str, url: str) -> bool:
        key = self._key(run, task, url)
        return self.slots[key % len(self.slots)] == key

    def remember(self, run: str, task: str, urls: Sequence[str]) -> None:
        with self.lock:
            for url in urls:
                key = self._key(run, task, url)
                self.slots[key % len(self.slots)] = key


class ProposalWriters:
    """A container's side of the proposal logs it writes: the end of each task's (an
    integer), its cache of recent links (made on first use: 8 MiB), and the partition it
    judges inline for each task (its "home": chosen at random once, so the containers of a
    task spread over its partitions and each keeps one partition's view warm)."""

    def __init__(self, *, slots: int = 1 << 20) -> None:
        self.slots = slots
        self.lock = threading.Lock()
        self.logs: dict[tuple[str, str], ProposalLog] = {}
        self.homes: dict[tuple[str, str], int] = {}
        self._recent: RecentLinks | None = None

    def log(self, run: str, task: str, most_bytes: int) -> ProposalLog:
        with self.lock:
            return self.logs.setdefault((run, task), ProposalLog(run, task, most_bytes=most_bytes))

    @property
    def recent(self) -> RecentLinks:
        with self.lock:
            if self._recent is None:
                self._recent = RecentLinks(self.slots)
            return self._recent

    def home(self, run: str, task: str, partitions: int, pick: Callable[[int], int]) -> int:
        """This container's partition of the task (``pick(n)``: a random one of ``n``)."""
        with self.lock:
            return self.homes.setdefault((run, task), pick(partitions) % partitions)


def propose_pages(
    table: Table,
    blobs: BlobStore,
    log: ProposalLog,
    recent: RecentLinks,
    by: str,
    pages: Sequence[PageCommit],
    usage: Usage,
    now: float,
    part: str = "",
    pipeline: str = "",
) -> int:
    """Propose ``pages`` (the pages of bundles ``by``, whose first copies' items ``part``
    holds, of ``pipeline``: named if a page leaves a state), each with the links ``recent``
    does not hold, in one proposal; its sequence.
    The links are remembered after the proposal is written: a failed write leaves them to
    be proposed again."""
    run, task = log.run, log.task
    # In the order proposed (a dict, not a set): which of two links colliding in the cache
    # stays must not depend on the process's string hashing.
    seen: dict[str, None] = {}
    proposed: list[PageCommit] = []
    for page in pages:
        links = []
        for child in page.children:
            if child.url not in seen and not recent.known(run, task, child.url):
                seen[child.url] = None
                links.append(child)
        proposed.append(replace(page, children=links, rows=[]))
    states = pipeline if any(page.state is not None for page in pages) else ""
    proposal = Proposal(by=by, pages=proposed, usage=usage, part=part, pipeline=states)
    seq = log.append(table, blobs, proposal, now)
    recent.remember(run, task, list(seen))
    return seq
