"""Typed keys of the single table: what lives where, in one place.

| item            | pk                               | sk                         |
|-----------------|----------------------------------|----------------------------|
| task record     | ``RUN#<run>``                    | ``TASK#<task>``            |
| shard lease     | ``RUN#<run>``                    | ``SHARD#<task>#<shard>``   |
| URL record      | ``URL#<run>#<task>#<url hash>``  | ``U``                      |
| backlog chunk   | ``BL#<run>#<task>#<shard>``      | ``<depth>#<chunk id>#<n>`` |
| bundle ledger   | ``RUN#<run>``                    | ``LEDGER#<task>#<bundle>`` |
| failure record  | ``FAIL#<run>#<task>``            | ``<url hash>``             |
| running task    | ``RUNNING``                      | ``<run>#<task>``           |

URL records are spread over many partitions (one per URL) so that claims never make a hot
partition; backlog chunks of one shard share a partition so the feeder reads them in order.
"""

from __future__ import annotations

import hashlib

from stepcrawl.storage.table import Key

__all__ = [
    "backlog_pk",
    "failures_pk",
    "shard_key",
    "task_key",
    "url_hash",
    "url_key",
]


def url_hash(url: str) -> str:
    """Stable 20-hex-digit id of a canonical URL."""
    return hashlib.blake2b(url.encode(), digest_size=10).hexdigest()


def task_key(run: str, task: str) -> Key:
    return (f"RUN#{run}", f"TASK#{task}")


def url_key(run: str, task: str, url: str) -> Key:
    return (f"URL#{run}#{task}#{url_hash(url)}", "U")


def shard_key(run: str, task: str, shard: int) -> Key:
    return (f"RUN#{run}", f"SHARD#{task}#{shard:03d}")


def backlog_pk(run: str, task: str, shard: int) -> str:
    return f"BL#{run}#{task}#{shard:03d}"


def failures_pk(run: str, task: str) -> str:
    return f"FAIL#{run}#{task}"
