"""Which partition of a task's seen set a URL is in, and how partitions split
(docs/architecture.md, "Flat state: the design"; tasks of ``limits.seen_partitions`` > 1).

A task starts with ``P`` partitions, cut by the fingerprint's high bits (:func:`partition_of`).
A partition whose view passes ``CrawlConfig.partition_split_urls`` splits in two by one more
bit (DRUM's buckets): its children are partitions ``2i`` and ``2i + 1`` of twice its grid,
which hold exactly its fingerprints, since ``floor(2x)`` is ``2 floor(x)`` or one more. So
the partitions are a prefix tree under the first ``P``, each node a :class:`Partition`: its
index, its grid and its depth, from which its name, its log, its parent and its fields on
the task record follow with nothing else known.

A child's log starts empty: its first state is its parent's view as far as the parent's last
entry (the split, which closes it), the child's half of it (:func:`inherited_from` names the
parent's log and the half; crawl/tasklog.py reads it so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_DEPTH",
    "SPLIT_PREFIX",
    "Partition",
    "inherited_from",
    "partition_of",
]

#: Splits below a first partition at most: 2^16 leaves of each (a grid stays under 2^32).
MAX_DEPTH: Final = 16
#: The id of the entry that closes a partition's log by splitting it (``split-<key>``).
SPLIT_PREFIX: Final = "split-"
#: What separates a task's id from a partition's key in the partition's log name.
_LOG_SEP: Final = "~"


def partition_of(fp: int, partitions: int) -> int:
    """The partition of fingerprint ``fp`` among ``partitions``: its high bits, so that a
    partition splits in two by one more bit (fingerprints are uniform 64-bit hashes)."""
    if partitions <= 1:
        return 0
    return (fp >> 32) * partitions >> 32


@dataclass(frozen=True, order=True)
class Partition:
    """A node of a task's partition tree: fingerprints ``fp`` with
    ``partition_of(fp, grid) == index``, ``depth`` splits below a first partition."""

    index: int
    grid: int
    depth: int = 0

    @property
    def key(self) -> str:
        """Its name among the task's partitions: a first partition's is its index (the
        task record's ``thru_<index>`` as before splits existed)."""
        if self.depth == 0:
            return str(self.index)
        return f"{self.index}_{self.grid}_{self.depth}"

    @classmethod
    def of_key(cls, key: str, grid: int) -> Partition:
        """The partition named ``key`` (``grid``: the task's first partitions' count, what a
        first partition's key does not say)."""
        index, _, rest = key.partition("_")
        if not rest:
            return cls(int(index), grid)
        cut, _, depth = rest.partition("_")
        return cls(int(index), int(cut), int(depth))

    def holds(self, fp: int) -> bool:
        """Whether fingerprint ``fp`` is this partition's."""
        return partition_of(fp, self.grid) == self.index

    def children(self) -> tuple[Partition, Partition]:
        """Its two halves, by one more bit."""
        half = (self.grid * 2, self.depth + 1)
        return Partition(self.index * 2, *half), Partition(self.index * 2 + 1, *half)

    def parent(self) -> Partition | None:
        """The partition it split from (``None``: a first partition)."""
        if self.depth == 0:
            return None
        return Partition(self.index // 2, self.grid // 2, self.depth - 1)

    def log(self, task: str) -> str:
        """Its log's name, a task log's (crawl/tasklog.py); an uncut task's one partition
        is the task."""
        if self.depth == 0 and self.grid <= 1:
            return task
        return f"{task}{_LOG_SEP}{self.key}"

    def split_id(self) -> str:
        """The id of the entry that closes its log by splitting it."""
        return f"{SPLIT_PREFIX}{self.key}"


def inherited_from(log: str) -> tuple[str, Partition] | None:
    """For the log of a partition made by a split: its parent's log and the partition (what
    its view starts from, filtered); ``None`` for any other log."""
    task, sep, key = log.rpartition(_LOG_SEP)
    if not sep or "_" not in key:
        return None
    part = Partition.of_key(key, 0)
    parent = part.parent()
    if parent is None:  # a key with "_" names a depth: only a damaged name has none
        return None
    return parent.log(task), part
