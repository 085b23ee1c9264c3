"""The shapes every ETL stage shares: an item, a source of items, a sink for items."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ["Item", "ItemSink", "ItemSource"]

#: One item: a JSON object. Fields starting with ``_`` are stepcrawl's own (``_url``, ``_task``,
#: ``_fetched_at``, ``_kind``); the others are the user's.
Item = dict[str, Any]

#: Opens a fresh stream of one input's items; called once, when the stage reaches that input,
#: so nothing is read (or downloaded) before it is needed.
ItemSource = Callable[[], Iterator[Item]]


class ItemSink(Protocol):
    """Where a stage sends items one by one (an :class:`~stepcrawl.etl.ItemWriter`, a list)."""

    def write(self, item: Item) -> None:
        """Accept one item."""
        ...
