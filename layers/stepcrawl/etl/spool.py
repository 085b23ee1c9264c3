"""Items parked in an anonymous temporary file on local disk, to be read back afterwards.

CSV and Parquet need facts about *all* items (the columns, their types) before the first row
is written; a spool gives a second pass over a one-pass stream without holding it in memory.
The file has no name and disappears when closed (or when the process ends).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from stepcrawl.etl.items_io import dump_item
from stepcrawl.etl.types import Item

__all__ = ["Spool"]


class Spool:
    """Append items, then read them back in order (as often as needed)."""

    def __init__(self, spill_dir: str | Path | None = None) -> None:
        # Lives as long as the spool, across calls: closed by close() / the with block.
        self._file = tempfile.TemporaryFile(prefix="stepcrawl-spool-", dir=spill_dir)  # noqa: SIM115
        self.count = 0

    def add(self, item: Item) -> None:
        """Park one item."""
        self._file.write(dump_item(item))
        self.count += 1

    def read(self) -> Iterator[tuple[Item, int]]:
        """Each item with the size of its JSON line; do not :meth:`add` while reading."""
        self._file.flush()
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line), len(line)
        self._file.seek(0, 2)

    def close(self) -> None:
        """Delete the file."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
