"""``merge: {mode: join}``: items of all inputs that share a key merged into one, on disk.

Memory stays bounded however many items there are: the inputs are first spilled to local disk,
partitioned by the key's hash (every item of one key lands in one partition), then each
partition is merged on its own. A partition larger than ``max_partition_bytes`` is split again
on other bits of the hash, so a skewed key distribution does not defeat the bound. Memory is
then about one partition's merged items; disk (Lambda's ``/tmp``, up to 10 GB of ephemeral
storage) must hold all joined inputs once, as compact JSON.

Semantics: a full outer merge. Every key found in any input yields one item: the fields of
its items merged in input order, then arrival order, so **later inputs override earlier ones**
field by field (a ``filter`` with ``exists`` on a field only one input has turns this into an
inner join). Items without a key field (absent or null) are dropped and counted as
``"merge"``. The output order is deterministic (same inputs, same order) but not the input
order: partition by partition, and in order of first appearance within one.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Final

from stepcrawl.etl.items_io import dump_item
from stepcrawl.etl.join_keys import DIGEST_SIZE, key_digest, key_values
from stepcrawl.etl.stats import TransformStats
from stepcrawl.etl.types import Item

__all__ = ["DEFAULT_MAX_PARTITION_BYTES", "DEFAULT_PARTITIONS", "join_items"]

DEFAULT_PARTITIONS: Final = 64
DEFAULT_MAX_PARTITION_BYTES: Final = 64 * 1024 * 1024

# Each level of splitting reads the next 4 bytes of the 16-byte digest.
_LEVEL_BYTES: Final = 4
_MAX_LEVEL: Final = DIGEST_SIZE // _LEVEL_BYTES - 1


def _partition(digest: bytes, level: int, partitions: int) -> int:
    start = level * _LEVEL_BYTES
    return int.from_bytes(digest[start : start + _LEVEL_BYTES], "big") % partitions


def _spill(
    records: Iterable[tuple[bytes, bytes]], base: Path, level: int, partitions: int
) -> list[Path]:
    """Write ``(digest, json line)`` records into ``partitions`` files ``<base>-NNN`` by digest."""
    paths = [base.with_name(f"{base.name}-{index:03d}") for index in range(partitions)]
    files: list[BinaryIO] = []
    try:
        for path in paths:
            files.append(path.open("wb"))
        for digest, line in records:
            # The digest travels with the line, so re-splitting never re-hashes.
            files[_partition(digest, level, partitions)].write(digest.hex().encode() + line)
    finally:
        for file in files:
            file.close()
    return paths


def _read(path: Path) -> Iterator[tuple[bytes, bytes]]:
    with path.open("rb") as file:
        for line in file:
            yield bytes.fromhex(line[: DIGEST_SIZE * 2].decode()), line[DIGEST_SIZE * 2 :]


def _merged(
    path: Path, level: int, partitions: int, max_bytes: int, stats: TransformStats
) -> Iterator[Item]:
    if path.stat().st_size > max_bytes and level < _MAX_LEVEL:
        parts = _spill(_read(path), path, level + 1, partitions)
        path.unlink()
        for part in parts:
            yield from _merged(part, level + 1, partitions, max_bytes, stats)
        return
    groups: dict[bytes, Item] = {}
    for digest, line in _read(path):
        item = json.loads(line)
        group = groups.get(digest)
        if group is None:
            groups[digest] = item
        else:
            group.update(item)
            stats.merged += 1
    path.unlink()
    yield from groups.values()


def join_items(
    key: Sequence[str],
    inputs: Iterable[Iterator[Item]],
    stats: TransformStats,
    *,
    spill_dir: str | Path | None = None,
    partitions: int = DEFAULT_PARTITIONS,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
) -> Iterator[Item]:
    """The joined items of ``inputs`` (in input order), one per distinct ``key``.

    Spill files live in a fresh temporary folder under ``spill_dir`` (default: the system's,
    ``/tmp`` on Lambda), removed when the iterator is exhausted or closed.
    """
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    fields = tuple(key)

    def records() -> Iterator[tuple[bytes, bytes]]:
        for items in inputs:
            for item in items:
                stats.items_in += 1
                values = key_values(item, fields)
                if values is None:
                    stats.drop("merge")
                    continue
                yield key_digest(values), dump_item(item)

    with tempfile.TemporaryDirectory(prefix="stepcrawl-join-", dir=spill_dir) as folder:
        for path in _spill(records(), Path(folder) / "p", 0, partitions):
            yield from _merged(path, 0, partitions, max_partition_bytes, stats)
