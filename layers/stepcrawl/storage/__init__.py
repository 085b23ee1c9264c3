"""Storage interfaces (queue, table, blob store) and their in-memory and AWS implementations."""

from __future__ import annotations

from stepcrawl.storage.memory import MemoryBlobStore, MemoryQueue, MemoryTableWriter, MemoryTopic
from stepcrawl.storage.memory_table import MemoryTable
from stepcrawl.storage.meter import Meter, Usage
from stepcrawl.storage.protocols import (
    MAX_SQS_DELAY,
    BlobStore,
    OutMessage,
    Queue,
    Table,
    TableWriter,
    Topic,
)
from stepcrawl.storage.table import (
    All,
    AnyOf,
    Cond,
    Condition,
    Key,
    TransactionConflict,
    Write,
)

__all__ = [
    "MAX_SQS_DELAY",
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
    "MemoryTopic",
    "Meter",
    "OutMessage",
    "Queue",
    "Table",
    "TableWriter",
    "Topic",
    "TransactionConflict",
    "Usage",
    "Write",
]
