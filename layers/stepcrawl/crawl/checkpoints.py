"""Checkpoints of a task's view: what a cold container reads instead of the whole log.

A container that never served a task used to read every entry of its log before its first
commit (a read request per ~100 entries: 400 per million URLs, ``bench/long_task.py``). Every
:attr:`~stepcrawl.crawl.context.CrawlConfig.log_checkpoint_entries` entries, the commit that
appends the round sequence writes its view of the task (:class:`ViewState`) to the blob store:

- the compact maps' arrays (``crawl/fingerprints.py``) as parts of at most
  :data:`PART_BYTES` each, so neither the writer nor the reader holds a second copy of the
  view, only one part;
- a head naming the parts with their digests, the sequence, and the view's small fields
  (the data profile's counts, its sample of items parts);
- then a pointer item (:func:`~stepcrawl.table_keys.checkpoint_key`), moved by a condition
  on the checkpoint it replaces: the head and parts exist before anything names them.

A cold container reads the pointer, the head and the parts, and then only the entries after
the checkpoint. A view is the fold of entries 1..seq in order, so every writer of sequence
``seq`` writes the same bytes under the same names, and a checkpoint is as good as the
log it replaces. The pointer keeps the checkpoint before it; the one before that is deleted
when the pointer moves, so a reader one checkpoint behind still finds its parts, and a reader
that finds a part gone (or not matching its digest) reads the pointer again, or falls back to
the log, which is kept whole (:data:`~stepcrawl.crawl.tasklog.LOG_TTL`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.fingerprints import FingerprintMap
from stepcrawl.storage import BlobStore, Cond, Table
from stepcrawl.table_keys import checkpoint_key

__all__ = [
    "PART_BYTES",
    "ViewState",
    "checkpoint_prefix",
    "load_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger("stepcrawl.checkpoints")

#: Most bytes of one part: what a writer or reader holds besides the view itself.
PART_BYTES: Final = 64 * 1024 * 1024
#: Times a reader reads the pointer again when the checkpoint it named went away meanwhile.
_READ_ATTEMPTS: Final = 3
#: Times a writer moves the pointer against other writers before it leaves it to them.
_MOVE_ATTEMPTS: Final = 5
#: The arrays of a view, in the order they are written: (map, keys or values, typecode).
_ARRAYS: Final = (
    ("urls", "keys", "Q"),
    ("urls", "values", "I"),
    ("commits", "keys", "Q"),
    ("commits", "values", "I"),
)


@dataclass
class ViewState:
    """What a task's view holds as far as ``seq`` (:class:`~stepcrawl.crawl.tasklog.TaskLog`)."""

    seq: int
    urls: FingerprintMap
    commits: FingerprintMap
    quality: Counter[int] = field(default_factory=Counter)
    sample_parts: list[str] = field(default_factory=list)
    parts: int = 0


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
    part_bytes: int = PART_BYTES,
) -> bool:
    """Write ``state`` as the task's checkpoint and point to it; ``False`` if the pointer
    already names a later one (this one is then deleted). The head goes first, so a writer
    that dies half-way leaves parts a later delete finds by it."""
    prefix = checkpoint_prefix(run, task, state.seq)
    maps = {"urls": state.urls.arrays(), "commits": state.commits.arrays()}
    parts: dict[str, list[memoryview]] = {}
    for name, side, _ in _ARRAYS:
        data = memoryview(maps[name][0 if side == "keys" else 1]).cast("B")
        parts[f"{name}-{side}"] = [
            data[start : start + part_bytes] for start in range(0, len(data), part_bytes)
        ]
    head = {
        "seq": state.seq,
        "arrays": {kind: [_digest(part) for part in cut] for kind, cut in parts.items()},
        "quality": {str(k): v for k, v in state.quality.items()},
        "sample_parts": state.sample_parts,
        "parts": state.parts,
    }
    blobs.put(f"{prefix}head.json", json.dumps(head, separators=(",", ":")).encode())
    for kind, cut in parts.items():
        for n, part in enumerate(cut):
            blobs.put(f"{prefix}{kind}-{n:05d}.bin", bytes(part))  # one part's copy at a time
    return _move_pointer(table, blobs, run, task, state.seq)


def _digest(part: memoryview) -> str:
    return hashlib.blake2b(part, digest_size=16).hexdigest()


def _move_pointer(table: Table, blobs: BlobStore, run: str, task: str, seq: int) -> bool:
    key = checkpoint_key(run, task)
    for _ in range(_MOVE_ATTEMPTS):
        current = table.get(key, consistent=True)
        if current is not None and int(current["seq"]) >= seq:
            if int(current["seq"]) != seq and int(current.get("prev", 0)) != seq:
                _delete(blobs, run, task, seq)  # a later one is named: this one never will be
            return False
        previous = int(current["seq"]) if current else 0
        condition = Cond("seq", "eq", previous) if current else Cond("pk", "not_exists")
        item = {"pk": key[0], "sk": key[1], "seq": seq, "prev": previous}
        if table.put(item, condition=condition):
            if current is not None and (older := int(current.get("prev", 0))):
                _delete(blobs, run, task, older)  # two back: no reader should still need it
            return True
    return False


def _delete(blobs: BlobStore, run: str, task: str, seq: int) -> None:
    """Delete a checkpoint: the parts its head names, and the head (no listing: the
    functions may not list the bucket)."""
    prefix = checkpoint_prefix(run, task, seq)
    try:
        head = json.loads(blobs.get(f"{prefix}head.json"))
    except KeyError:
        return  # deleted already (or never whole: its parts share the names of a rewrite)
    names = [
        f"{prefix}{kind}-{n:05d}.bin"
        for kind, parts in head["arrays"].items()
        for n in range(len(parts))
    ]
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
        except ValueError as bad:
            logger.warning("task %s: checkpoint %d unreadable (%s); reads the log", task, seq, bad)
            return None
    return None


def _read(blobs: BlobStore, prefix: str, seq: int) -> ViewState:
    head: dict[str, Any] = json.loads(blobs.get(f"{prefix}head.json"))
    if head.get("seq") != seq:
        raise ValueError(f"head names sequence {head.get('seq')}, expected {seq}")
    loaded: dict[str, array[int]] = {}
    for name, side, typecode in _ARRAYS:
        values = array(typecode)
        for n, digest in enumerate(head["arrays"][f"{name}-{side}"]):
            part = blobs.get(f"{prefix}{name}-{side}-{n:05d}.bin")
            if _digest(memoryview(part)) != digest:
                raise ValueError(f"part {name}-{side}-{n:05d} does not match its digest")
            values.frombytes(part)
        loaded[f"{name}-{side}"] = values
    return ViewState(
        seq=seq,
        urls=FingerprintMap.of_arrays(loaded["urls-keys"], loaded["urls-values"]),
        commits=FingerprintMap.of_arrays(loaded["commits-keys"], loaded["commits-values"]),
        quality=Counter({int(k): int(v) for k, v in head["quality"].items()}),
        sample_parts=list(head["sample_parts"]),
        parts=int(head["parts"]),
    )
