"""Every key of the single table, in one place: what lives where.

| item              | pk                              | sk                         |
|-------------------|---------------------------------|----------------------------|
| task record       | ``RUN#<run>``                   | ``TASK#<task>``            |
| shard lease       | ``RUN#<run>``                   | ``SHARD#<task>#<shard>``   |
| task log entry    | ``LOG#<run>#<task>``            | ``<sequence, 10 digits>``  |
| backlog chunk     | ``BL#<run>#<task>#<shard>``     | ``<depth>#<chunk id>#<n>`` |
| failure record    | ``FAIL#<run>#<task>``           | ``<url hash>``             |
| running task      | ``RUNNING``                     | ``<run>#<task>``           |
| host breaker      | ``BREAKER#<host>``              | ``B``                      |
| pipeline-run lock | ``PIPELINE#<pipeline>``         | ``RUNLOCK``                |

There is no item per URL: a task's URL state is its log (:mod:`stepcrawl.crawl.tasklog`), read
in order from one partition; backlog chunks of one shard share a partition so the feeder reads
them in order; the records of one run (tasks, leases) share the run's partition so that one
query lists a run's tasks. The run lock is written by the state machine itself (a DynamoDB
``putItem`` task state), so its key is also compiled into every definition.
"""

from __future__ import annotations

import hashlib
from typing import Final

from stepcrawl.storage.table import Key

__all__ = [
    "RUNNING_PK",
    "RUN_LOCK_SK",
    "TASK_PREFIX",
    "backlog_pk",
    "breaker_key",
    "failure_key",
    "failures_pk",
    "log_key",
    "log_pk",
    "pipeline_pk",
    "run_lock_key",
    "run_pk",
    "running_key",
    "shard_key",
    "task_key",
    "url_hash",
]

#: Partition listing the crawl tasks that are running (what the periodic sweep walks).
RUNNING_PK: Final = "RUNNING"
#: Sort-key prefix of a run's task records (``query(run_pk(run), sk_prefix=TASK_PREFIX)``).
TASK_PREFIX: Final = "TASK#"
#: Sort key of the pipeline-run lock item (partition key: :func:`pipeline_pk`).
RUN_LOCK_SK: Final = "RUNLOCK"
_BREAKER_SK: Final = "B"


def url_hash(url: str) -> str:
    """Stable 20-hex-digit id of a canonical URL."""
    return hashlib.blake2b(url.encode(), digest_size=10).hexdigest()


def run_pk(run: str) -> str:
    return f"RUN#{run}"


def task_key(run: str, task: str) -> Key:
    return (run_pk(run), f"{TASK_PREFIX}{task}")


def shard_key(run: str, task: str, shard: int) -> Key:
    return (run_pk(run), f"SHARD#{task}#{shard:03d}")


def log_pk(run: str, task: str) -> str:
    return f"LOG#{run}#{task}"


def log_key(run: str, task: str, seq: int) -> Key:
    return (log_pk(run, task), f"{seq:010d}")


def backlog_pk(run: str, task: str, shard: int) -> str:
    return f"BL#{run}#{task}#{shard:03d}"


def failures_pk(run: str, task: str) -> str:
    return f"FAIL#{run}#{task}"


def failure_key(run: str, task: str, url: str) -> Key:
    return (failures_pk(run, task), url_hash(url))


def running_key(run: str, task: str) -> Key:
    return (RUNNING_PK, f"{run}#{task}")


def breaker_key(host: str) -> Key:
    """Key of ``host``'s breaker item; ``host`` as :func:`stepcrawl.extract.urls.url_host`
    gives it (lower case, no port)."""
    return (f"BREAKER#{host}", _BREAKER_SK)


def pipeline_pk(pipeline: str) -> str:
    """Partition key of items that belong to a pipeline as a whole."""
    return f"PIPELINE#{pipeline}"


def run_lock_key(pipeline: str) -> Key:
    return (pipeline_pk(pipeline), RUN_LOCK_SK)
