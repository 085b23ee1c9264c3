"""Checkpoints of a task's view: what a cold container reads instead of the whole log.

A container that never served a task used to read every entry of its log before its first
commit (a read request per ~100 entries: 400 per million URLs, ``bench/long_task.py``). Every
:attr:`~stepcrawl.crawl.context.CrawlConfig.log_checkpoint_entries` entries, the commit that
appends the round sequence writes its view of the task (:class:`ViewState`) to the blob store:

- the compact maps' arrays (``crawl/fingerprints.py``) as parts of at most
  :data:`PART_BYTES` each, so neither the writer nor the reader holds a second copy of the
  view, only one part;
- a head naming how many parts each map has and their writer, the sequence, and the view's
  small fields
  (the data profile's counts, its sample of items parts);
- then a pointer item (:func:`~stepcrawl.table_keys.checkpoint_key`), moved by a condition
  on the checkpoint it replaces: the head and parts exist before anything names them.

A cold container reads the pointer, the head and the parts, and then only the entries after
the checkpoint. A view is the fold of entries 1..seq in order, so every writer of sequence
``seq`` writes the same view (each part names its writer, as blocks may be cut
differently, so a reader never mixes two writers' parts), and a checkpoint is as good as the
log it replaces. The pointer keeps the checkpoint before it; the one before that is deleted
when the pointer moves, so a reader one checkpoint behind still finds its parts, and a reader
that finds a part gone (or not matching its digest) reads the pointer again, or falls back to
the log, which is kept whole (:data:`~stepcrawl.crawl.deltas.LOG_TTL`).

A writer that dies between its head and the pointer leaves a checkpoint nothing names. Its
sequence is a round one the pointer then skips (it moves from the one before to a later
one), so the move that skips it deletes it, the :data:`SKIPPED_DELETES` newest skipped at
most (the rest wait for the bucket's lifecycle). A writer that was only slow finds the
pointer past it and deletes everything it wrote itself, by name: whatever the mover deleted
before the writer had finished, nothing it wrote is left.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import struct
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.fingerprints import Block, FingerprintMap
from stepcrawl.errors import StepcrawlError
from stepcrawl.storage import BlobStore, Cond, Table
from stepcrawl.table_keys import checkpoint_key

__all__ = [
    "PART_BYTES",
    "SKIPPED_DELETES",
    "ViewState",
    "checkpoint_prefix",
    "load_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger("stepcrawl.checkpoints")

#: Most bytes of one part: what a writer or reader holds besides the view itself.
PART_BYTES: Final = 64 * 1024 * 1024
#: Most checkpoints a move of the pointer deletes among the round sequences it skips (a head
#: read and a delete each; a task whose writers kept dying leaves the older ones to the
#: lifecycle).
SKIPPED_DELETES: Final = 8
#: Times a reader reads the pointer again when the checkpoint it named went away meanwhile.
_READ_ATTEMPTS: Final = 3
#: Times a writer moves the pointer against other writers before it leaves it to them.
_MOVE_ATTEMPTS: Final = 5
#: The maps of a view, in the order they are written.
_MAPS: Final = ("urls", "commits")
#: A block in a part: its entry count, then its keys, then its values.
_COUNT: Final = struct.Struct("<I")
_DIGEST_BYTES: Final = 16


@dataclass
class ViewState:
    """What a task's view holds as far as ``seq`` (:class:`~stepcrawl.crawl.tasklog.TaskLog`)."""

    seq: int
    urls: FingerprintMap
    commits: FingerprintMap
    quality: Counter[int] = field(default_factory=Counter)
    sample_parts: list[str] = field(default_factory=list)
    parts: int = 0
    thru: int = 0  # a partition's view: the last proposal judged (crawl/judges.py)
    closed: bool = False  # a partition's view: its log ends with a split (crawl/partitions.py)


def checkpoint_prefix(run: str, task: str, seq: int) -> str:
    """Where the checkpoint of ``task`` at sequence ``seq`` lives: a prefix of its own, which
    the functions that append to a log may read, write and delete, and which expires with the
    log (infra/storage.py)."""
    return f"views/{run}/{task}/{seq:010d}/"


def write_checkpoint(
    table: Table,
    blobs: BlobStore,
    run: str,
    task: str,
    state: ViewState,
    *,
    every: int | None = None,
    part_bytes: int = PART_BYTES,
) -> bool:
    """Write ``state`` as the task's checkpoint and point to it; ``False`` if the pointer
    already names a later one (this one is then deleted). The head goes first, so a writer
    that dies half-way leaves a head naming its parts: deleted two checkpoints on if the
    pointer named it, else by the move that skips its sequence when checkpoints are written
    at multiples of ``every`` (module docstring)."""
    prefix = checkpoint_prefix(run, task, state.seq)
    writer = os.urandom(_DIGEST_BYTES)
    cuts = {
        "urls": _cut(state.urls.blocks(), part_bytes),
        "commits": _cut(state.commits.blocks(), part_bytes),
    }
    head = {
        "seq": state.seq,
        # Two writers of one sequence may cut their blocks differently (blocks depend on the
        # merges a map went through): each part names its writer, and a reader takes only
        # the parts of its head's, never a mix.
        "writer": writer.hex(),
        "parts": {name: len(cut) for name, cut in cuts.items()},
        "quality": {str(k): v for k, v in state.quality.items()},
        "sample_parts": state.sample_parts,
        "items_parts": state.parts,
        "thru": state.thru,
        "closed": state.closed,
    }
    written = [f"{prefix}head.json"]
    blobs.put(written[0], json.dumps(head, separators=(",", ":")).encode())
    for name, cut in cuts.items():
        for n, blocks in enumerate(cut):
            payload = b"".join(
                b for keys, values in blocks for b in (_COUNT.pack(len(keys)), keys, values)
            )  # one part's copy at a time
            written.append(f"{prefix}{name}-{n:05d}.bin")
            blobs.put(written[-1], writer + _digest(payload) + payload)
    moved = _move_pointer(table, blobs, run, task, state.seq, every)
    if moved is None:  # a later one is named: this one never will be
        blobs.delete_many(written)
    return bool(moved)


def _cut(blocks: list[Block], part_bytes: int) -> list[list[Block]]:
    """The blocks in parts of at most ``part_bytes`` (a block alone may pass it)."""
    parts: list[list[Block]] = []
    size = 0
    for block in blocks:
        weight = _COUNT.size + 12 * len(block[0])
        if not parts or (size + weight > part_bytes and parts[-1]):
            parts.append([])
            size = 0
        parts[-1].append(block)
        size += weight
    return parts


def _digest(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=_DIGEST_BYTES).digest()


def _move_pointer(
    table: Table, blobs: BlobStore, run: str, task: str, seq: int, every: int | None
) -> bool | None:
    """Point to the checkpoint at ``seq``: ``True`` if moved, ``None`` if the pointer names a
    later one (and not this one as its previous), ``False`` if it names this one already or
    other writers kept moving it."""
    key = checkpoint_key(run, task)
    for _ in range(_MOVE_ATTEMPTS):
        current = table.get(key, consistent=True)
        if current is not None and int(current["seq"]) >= seq:
            if int(current["seq"]) != seq and int(current.get("prev", 0)) != seq:
                return None
            return False
        previous = int(current["seq"]) if current else 0
        condition = Cond("seq", "eq", previous) if current else Cond("pk", "not_exists")
        item = {"pk": key[0], "sk": key[1], "seq": seq, "prev": previous}
        if table.put(item, condition=condition):
            if current is not None and (older := int(current.get("prev", 0))):
                _delete(blobs, run, task, older)  # two back: no reader should still need it
            for skipped in _skipped(previous, seq, every):
                _delete(blobs, run, task, skipped)  # named never, and now never will be
            return True
    return False


def _skipped(previous: int, seq: int, every: int | None) -> list[int]:
    """The round sequences strictly between the pointer's old and new checkpoints, newest
    first, at most :data:`SKIPPED_DELETES`."""
    if not every:
        return []
    newest = (seq - 1) // every * every  # the last round sequence below seq
    return list(itertools.islice(range(newest, previous, -every), SKIPPED_DELETES))


def _delete(blobs: BlobStore, run: str, task: str, seq: int) -> None:
    """Delete a checkpoint: the parts its head names, and the head (no listing: the
    functions may not list the bucket)."""
    prefix = checkpoint_prefix(run, task, seq)
    try:
        parts = dict(json.loads(blobs.get(f"{prefix}head.json"))["parts"])
    except KeyError:
        return  # deleted already
    except (ValueError, TypeError):
        parts = {}  # a damaged head: its own name at least
    names = [f"{prefix}{name}-{n:05d}.bin" for name, count in parts.items() for n in range(count)]
    blobs.delete_many([*names, f"{prefix}head.json"])


def load_checkpoint(
    table: Table, blobs: BlobStore, run: str, task: str, *, newer_than: int = 0
) -> ViewState | None:
    """The task's latest checkpoint, or ``None`` (none yet, none past ``newer_than``, or none
    readable: the caller reads the log instead)."""
    for _ in range(_READ_ATTEMPTS):
        # Eventually consistent (half the units): a pointer read stale names an older
        # checkpoint, or none, and the caller reads more of the log; never a wrong view.
        pointer = table.get(checkpoint_key(run, task), consistent=False)
        if pointer is None:
            return None
        seq = int(pointer["seq"])
        if seq <= newer_than:
            return None
        try:
            return _read(blobs, checkpoint_prefix(run, task, seq), seq)
        except KeyError:
            continue  # deleted meanwhile, two checkpoints later: read the pointer again
        except (ValueError, StepcrawlError) as bad:
            # Damaged, mixed, or not readable by this role (an S3 error, a grant missing):
            # the log itself is always there to read.
            logger.warning("task %s: checkpoint %d unreadable (%s); reads the log", task, seq, bad)
            return None
    return None


def _read(blobs: BlobStore, prefix: str, seq: int) -> ViewState:
    head: dict[str, Any] = json.loads(blobs.get(f"{prefix}head.json"))
    if head.get("seq") != seq:
        raise ValueError(f"head names sequence {head.get('seq')}, expected {seq}")
    loaded = {name: FingerprintMap.of_blocks(_blocks(blobs, prefix, name, head)) for name in _MAPS}
    return ViewState(
        seq=seq,
        urls=loaded["urls"],
        commits=loaded["commits"],
        quality=Counter({int(k): int(v) for k, v in head["quality"].items()}),
        sample_parts=list(head["sample_parts"]),
        parts=int(head["items_parts"]),
        thru=int(head.get("thru", 0)),
        closed=bool(head.get("closed", False)),
    )


def _blocks(blobs: BlobStore, prefix: str, name: str, head: dict[str, Any]) -> list[Block]:
    """The blocks of map ``name``, part by part, each part checked against its writer and its
    digest."""
    writer = bytes.fromhex(str(head["writer"]))
    blocks: list[Block] = []
    for n in range(int(head["parts"][name])):
        part = memoryview(blobs.get(f"{prefix}{name}-{n:05d}.bin"))
        payload = part[2 * _DIGEST_BYTES :]
        if bytes(part[:_DIGEST_BYTES]) != writer:
            raise ValueError(f"part {name}-{n:05d} is another writer's than its head")
        if _digest(payload) != bytes(part[_DIGEST_BYTES : 2 * _DIGEST_BYTES]):
            raise ValueError(f"part {name}-{n:05d} does not match its digest")
        at = 0
        while at < len(payload):
            (count,) = _COUNT.unpack_from(payload, at)
            at += _COUNT.size
            keys, values = array("Q"), array("I")
            keys.frombytes(payload[at : at + 8 * count])
            values.frombytes(payload[at + 8 * count : at + 12 * count])
            at += 12 * count
            blocks.append((keys, values))
    return blocks
