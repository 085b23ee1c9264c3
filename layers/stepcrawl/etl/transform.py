"""A ``transform`` task as a stream: merge the inputs, then apply the operations in order.

Nothing is materialised: items flow one at a time from the inputs through the compiled steps.
The only state that grows with the data is a ``dedupe``'s set of 16-byte key digests (~90 MB
per million distinct keys) and, for ``merge: join``, spill files on local disk (see
:mod:`stepcrawl.etl.join`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from stepcrawl.etl.join import DEFAULT_MAX_PARTITION_BYTES, DEFAULT_PARTITIONS, join_items
from stepcrawl.etl.operations import Step, compile_operations
from stepcrawl.etl.stats import TransformStats
from stepcrawl.etl.types import Item, ItemSource
from stepcrawl.pipeline.etl_tasks import TransformTask

__all__ = ["run_transform"]


def _opened(inputs: Mapping[str, ItemSource]) -> Iterator[Iterator[Item]]:
    # Each input is opened only when the previous one is used up.
    for source in inputs.values():
        yield source()


def _union(inputs: Mapping[str, ItemSource], stats: TransformStats) -> Iterator[Item]:
    for items in _opened(inputs):
        for item in items:
            stats.items_in += 1
            yield item


def _apply(
    items: Iterator[Item], steps: list[tuple[str, Step]], stats: TransformStats
) -> Iterator[Item]:
    for original in items:
        # A private copy: steps change items in place, and a caller's generator may hand out
        # objects it still uses (or the same object twice).
        item = dict(original)
        for label, step in steps:
            result = step(item)
            if result is None:
                stats.drop(label)
                break
            item = result
        else:
            stats.items_out += 1
            yield item


def run_transform(
    task: TransformTask,
    inputs: Mapping[str, ItemSource],
    *,
    stats: TransformStats | None = None,
    spill_dir: str | Path | None = None,
    join_partitions: int = DEFAULT_PARTITIONS,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
) -> Iterator[Item]:
    """The items ``task`` produces from ``inputs`` (input task id -> opener), lazily.

    ``inputs`` are taken in the mapping's order (pass them in ``task.consumes`` order): a union
    yields all items of the first input, then of the next, ... Pass ``stats`` to observe the
    counts; they are final once the iterator is exhausted. Raises
    :class:`~stepcrawl.etl.TransformError` (a ``FatalError``) while iterating when an
    operation with ``on_error: fail`` meets a value it cannot convert.
    """
    counts = stats if stats is not None else TransformStats()
    steps = compile_operations(task.operations, counts)
    if task.merge.mode == "join":
        merged = join_items(
            task.merge.key,
            _opened(inputs),
            counts,
            spill_dir=spill_dir,
            partitions=join_partitions,
            max_partition_bytes=max_partition_bytes,
        )
    else:
        merged = _union(inputs, counts)
    return _apply(merged, steps, counts)
