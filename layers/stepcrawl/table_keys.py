"""Every key of the single table, in one place: what lives where.

| item              | pk                              | sk                         |
|-------------------|---------------------------------|----------------------------|
| task record       | ``TASK#<run>#<task>``           | ``T``                      |
| run's task index  | ``RUN#<run>``                   | ``TASK#<task>``            |
| shard lease       | ``SHARD#<run>#<task>#<shard>``  | ``LEASE``                  |
| task log entry    | ``LOG#<run>#<task>#<stripe>``   | ``<sequence, 10 digits>``  |
| backlog chunk     | ``BL#<run>#<task>#<shard>``     | ``<depth>#<chunk id>#<n>`` |
| failure record    | ``FAIL#<run>#<task>``           | ``<url hash>``             |
| running task      | ``RUNNING``                     | ``<run>#<task>``           |
| host breaker      | ``BREAKER#<host>``              | ``B``                      |
| pipeline-run lock | ``PIPELINE#<pipeline>``         | ``RUNLOCK``                |
| scaler state      | ``SCALER#<function>``           | ``S``                      |
| alert post record | ``ALERT#<change and channel>``  | ``A``                      |
| run's task slots  | ``ADMIT#<run>``                 | ``SLOTS``                  |
| task admission    | ``ADMIT#<run>``                 | ``Q#<task>``               |
| admitting run     | ``ADMITTING``                   | ``<run>``                  |
| page state        | ``PAGE#<pipeline>#<task>#<url hash>`` | ``S``                  |
| data profile      | ``QUALITY#<pipeline>#<task>``   | ``<newest first>#<run>``   |

There is no item per URL: a task's URL state is its log (:mod:`stepcrawl.crawl.tasklog`), one
sequence whose entries are spread over :data:`LOG_STRIPES` partitions by sequence number
(``stripe = seq % LOG_STRIPES``: AWS's "calculated suffix" write sharding), so one task's
appends and reads never sit on one partition key; a reader knows where entry ``n`` lives and
reads entries by key. Backlog chunks of one shard share a partition so the feeder reads them in
order. Each shard lease has its own partition: leases are written on every feed, and on the
run's partition they added up with the task records (docs/performance.md). Each task record
has its own partition too: every commit of the task writes it, and ten tasks of one run at
10,000 pages/s each would pass one partition's limits if they shared one. The run's partition
holds an index of its tasks instead (one item per task, written once when the task is
created), so that one query lists a run's tasks. The run lock is
written by the state machine itself (a DynamoDB ``putItem`` task state), so its key is also
compiled into every definition.

A run's admission items (:mod:`stepcrawl.crawl.admission`: the slot counter that enforces the
pipeline's ``parallelism`` and one entry per task that asked to start) share a partition of
their own, apart from the task records, which every commit writes: they take a few writes per
task start and finish, and one query reads a run's whole queue. ``ADMITTING`` lists the runs
that have tasks waiting or holding a slot, for the periodic sweep (as ``RUNNING`` lists the
running crawl tasks).

A task's data profiles (:mod:`stepcrawl.quality.history`) outlive runs too: one small item
per run, newest first in sort order, so the baseline is one query of the first few.

Page states are the one item per URL, and only for ``incremental: true`` tasks
(:mod:`stepcrawl.crawl.incremental`): they outlive runs (the TTL ``expires_at``), so their
key names the pipeline and task, not a run; one partition per URL spreads their reads and
writes.
"""

from __future__ import annotations

import hashlib
from typing import Final

from stepcrawl.storage.table import Key

__all__ = [
    "ADMITTING_PK",
    "ADMIT_PREFIX",
    "LEASE_SK",
    "LOG_STRIPES",
    "PROPOSAL_STRIPES",
    "RUNNING_PK",
    "RUN_LOCK_SK",
    "SLOTS_SK",
    "STALLED_PK",
    "TASK_PREFIX",
    "admission_key",
    "admission_pk",
    "admitting_key",
    "alert_key",
    "backlog_pk",
    "breaker_key",
    "checkpoint_key",
    "failure_key",
    "failures_pk",
    "log_key",
    "log_pk",
    "log_stripe",
    "page_state_key",
    "pipeline_pk",
    "quality_key",
    "quality_pk",
    "run_lock_key",
    "run_pk",
    "running_key",
    "scaler_key",
    "shard_key",
    "slots_key",
    "stalled_key",
    "task_index_key",
    "task_key",
    "task_token_key",
    "url_hash",
]

#: Partition listing the crawl tasks that are running (what the periodic sweep walks).
RUNNING_PK: Final = "RUNNING"
#: The crawl tasks the sweep found stalled (crawl/stalls.py): ``run#task`` as on RUNNING.
STALLED_PK: Final = "STALLED"
#: Sort-key prefix of a run's task index (``query(run_pk(run), sk_prefix=TASK_PREFIX)``), and
#: partition-key prefix of the task records.
TASK_PREFIX: Final = "TASK#"
#: Sort key of the pipeline-run lock item (partition key: :func:`pipeline_pk`).
RUN_LOCK_SK: Final = "RUNLOCK"
#: Sort key of a shard lease (partition key: ``SHARD#<run>#<task>#<shard>``).
LEASE_SK: Final = "LEASE"
#: Partitions a task's log is spread over. Part of the stored layout: a reader finds entry
#: ``n`` at stripe ``n % LOG_STRIPES``, so changing it strands the logs already written. Eight
#: keep each stripe under a tenth of a partition's write limit at 10,000 pages/s per task.
LOG_STRIPES: Final = 8
#: Partitions a task's proposal log is spread over (crawl/proposals.py), part of the stored
#: layout as ``LOG_STRIPES`` is. Each proposal is read by every partition's judge, so its
#: reads grow with the partitions: 64 keys keep a stripe at an eighth of what 8 took
#: (``bench/hot_keys.py --partitions 32``), at no cost (a batch read spans keys).
PROPOSAL_STRIPES: Final = 64
_BREAKER_SK: Final = "B"
_TASK_SK: Final = "T"
_CALLBACK_SK: Final = "K"  # the item holding the task's Step Functions callback handle
_SCALER_SK: Final = "S"
_PAGE_STATE_SK: Final = "S"
#: Partition listing the runs with tasks waiting for, or holding, a slot (the sweep walks it).
ADMITTING_PK: Final = "ADMITTING"
#: Sort key of a run's slot counter (partition key: :func:`admission_pk`).
SLOTS_SK: Final = "SLOTS"
#: Sort-key prefix of a run's task admission entries (``Q#<task>``).
ADMIT_PREFIX: Final = "Q#"


def url_hash(url: str) -> str:
    """Stable 20-hex-digit id of a canonical URL."""
    return hashlib.blake2b(url.encode(), digest_size=10).hexdigest()


def run_pk(run: str) -> str:
    return f"RUN#{run}"


def task_key(run: str, task: str) -> Key:
    """The task record: its counters, written by every commit of the task."""
    return (f"{TASK_PREFIX}{run}#{task}", _TASK_SK)


def task_token_key(run: str, task: str) -> Key:
    """The task's Step Functions task token (written once, with the record): read only to
    answer or to send a heartbeat. Not on the record, which every commit writes and is
    billed by the KB: a token is hundreds of characters (the API takes up to 2,048)."""
    return (f"{TASK_PREFIX}{run}#{task}", _CALLBACK_SK)


def task_index_key(run: str, task: str) -> Key:
    """The task's entry in its run's index (written once): one query lists a run's tasks."""
    return (run_pk(run), f"{TASK_PREFIX}{task}")


def shard_key(run: str, task: str, shard: int) -> Key:
    return (f"SHARD#{run}#{task}#{shard:03d}", LEASE_SK)


def log_stripe(seq: int) -> int:
    return seq % LOG_STRIPES


def log_pk(run: str, task: str, stripe: int) -> str:
    return f"LOG#{run}#{task}#{stripe}"


def log_key(run: str, task: str, seq: int) -> Key:
    return (log_pk(run, task, log_stripe(seq)), f"{seq:010d}")


def checkpoint_key(run: str, task: str) -> Key:
    """The pointer to a task's latest checkpoint (``crawl/checkpoints.py``), on its own
    partition: written once per checkpoint, read once by each cold container."""
    return (f"CKPT#{run}#{task}", "C")


def backlog_pk(run: str, task: str, shard: int) -> str:
    return f"BL#{run}#{task}#{shard:03d}"


def failures_pk(run: str, task: str) -> str:
    return f"FAIL#{run}#{task}"


def failure_key(run: str, task: str, url: str) -> Key:
    return (failures_pk(run, task), url_hash(url))


def running_key(run: str, task: str) -> Key:
    return (RUNNING_PK, f"{run}#{task}")


def stalled_key(run: str, task: str) -> Key:
    return (STALLED_PK, f"{run}#{task}")


def breaker_key(host: str) -> Key:
    """Key of ``host``'s breaker item; ``host`` as :func:`stepcrawl.extract.urls.url_host`
    gives it (lower case, no port)."""
    return (f"BREAKER#{host}", _BREAKER_SK)


def pipeline_pk(pipeline: str) -> str:
    """Partition key of items that belong to a pipeline as a whole."""
    return f"PIPELINE#{pipeline}"


def run_lock_key(pipeline: str) -> Key:
    return (pipeline_pk(pipeline), RUN_LOCK_SK)


def admission_pk(run: str) -> str:
    """Partition of a run's slot counter and task admission entries."""
    return f"ADMIT#{run}"


def slots_key(run: str) -> Key:
    return (admission_pk(run), SLOTS_SK)


def admission_key(run: str, task: str) -> Key:
    return (admission_pk(run), f"{ADMIT_PREFIX}{task}")


def admitting_key(run: str) -> Key:
    return (ADMITTING_PK, run)


def scaler_key(function: str) -> Key:
    """The scaler's state for one function's mapping: what it remembers between ticks, the
    concurrency it set and (fetch) the feed window and the telemetry level (shedding)."""
    return (f"SCALER#{function}", _SCALER_SK)


def page_state_key(pipeline: str, task: str, url: str) -> Key:
    """What an incremental crawl task keeps of one canonical URL between runs (validators,
    items fingerprint, links; :mod:`stepcrawl.crawl.incremental`), with the TTL
    ``expires_at``. One partition per URL: the fetch stage reads a batch's states by key."""
    return (f"PAGE#{pipeline}#{task}#{url_hash(url)}", _PAGE_STATE_SK)


def alert_key(key: str) -> Key:
    """The record of one alert posted to one channel (the notifier's idempotency,
    docs/alerts.md); ``key`` hashes the state change and the channel."""
    return (f"ALERT#{key}", "A")


#: The sort keys of data profiles count down from this (newest first).
_QUALITY_EPOCH: Final = 10_000_000_000


def quality_pk(pipeline: str, task: str) -> str:
    """The partition of one task's data profiles across runs."""
    return f"QUALITY#{pipeline}#{task}"


def quality_key(pipeline: str, task: str, at: float, run: str) -> Key:
    """One run's data profile of one task, ``at`` its end (epoch seconds): newest first."""
    return (quality_pk(pipeline, task), f"{_QUALITY_EPOCH - at:017.3f}#{run}")
