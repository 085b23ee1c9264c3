"""Storage interfaces (queue, table, blob store) and their in-memory and AWS implementations."""

from __future__ import annotations

from stepcrawl.storage.memory import MemoryBlobStore, MemoryQueue, MemoryTableWriter
from stepcrawl.storage.memory_table import MemoryTable
from stepcrawl.storage.meter import Meter, Usage
from stepcrawl.storage.protocols import BlobStore, OutMessage, Queue
from stepcrawl.storage.table import (
    All,
    AnyOf,
    Cond,
    Condition,
    Key,
    Table,
    TransactionConflict,
    Write,
)

__all__ = [
    "All",
    "AnyOf",
    "BlobStore",
    "Cond",
    "Condition",
    "Key",
    "MemoryBlobStore",
    "MemoryQueue",
    "MemoryTable",
    "MemoryTableWriter",
    "Meter",
    "OutMessage",
    "Queue",
    "Table",
    "TransactionConflict",
    "Usage",
    "Write",
]
