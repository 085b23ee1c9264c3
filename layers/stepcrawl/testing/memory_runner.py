"""Run a pipeline's tasks through the real stages on in-memory storage, in one process.

A miniature of Lambda + SQS: the queues are drained into the stage functions, batch by batch,
and the tasks of the DAG are started in dependency order, as the state machine would. Tests
use it (with a delivery hook that injects crashes and duplicates) and so do the benchmarks;
``stepcrawl run`` uses the faithful emulator instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from stepcrawl.crawl.context import CrawlConfig, CrawlServices, StaticRegistry
from stepcrawl.crawl.dispatch import handle_control
from stepcrawl.crawl.fetch_stage import process_fetch_batch
from stepcrawl.crawl.frontier import LEASE_SKEW
from stepcrawl.crawl.messages import ControlMessage, FetchMessage, ParseBundle
from stepcrawl.crawl.parse_stage import process_bundles
from stepcrawl.crawl.sweeper import sweep_running
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.fetch import Fetcher
from stepcrawl.pipeline import DynamoDBTarget, LoadTask, Pipeline
from stepcrawl.storage import (
    MemoryBlobStore,
    MemoryQueue,
    MemoryTable,
    MemoryTableWriter,
    MemoryTopic,
    Meter,
    OutMessage,
)

__all__ = ["TASK_TOKEN_CHARS", "MemoryRunner", "OffsetClock", "RunnerStats"]

#: The longest task token SendTaskSuccess takes (its ``taskToken``: 1 to 2,048 characters).
TASK_TOKEN_CHARS: Final = 2048

Work = Callable[[], object]


class OffsetClock:
    """Wall-clock time plus whatever was skipped ahead (to expire leases without waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class RunnerStats:
    """What a real deployment would have invoked (for cost estimates)."""

    fetch_invocations: int = 0
    parse_invocations: int = 0
    dispatch_invocations: int = 0
    fetch_messages: int = 0
    parse_messages: int = 0
    cpu_seconds: dict[str, float] = field(default_factory=dict)


def _deliver_once(work: Work) -> None:
    work()


class MemoryRunner:
    """Drives one run of ``pipeline`` through the stages; see the module docstring."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        run_id: str = "run-1",
        config: CrawlConfig | None = None,
        wrap: Callable[[Any], Any] | None = None,
        deliver: Callable[[Work], None] = _deliver_once,
        fetch_batch: int = 25,
        parse_batch: int = 5,
        real_time: bool = False,
        after: MemoryRunner | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.run_id = run_id
        self.clock = OffsetClock()
        if after is not None:  # a later run starts after the earlier one's (simulated) end
            self.clock.advance(max(0.0, after.clock() - self.clock()) + 1.0)
        self.meter = Meter()
        # ``after``: a later run of the same deployment (its table and bucket: history, items).
        self.table: MemoryTable = after.table if after is not None else MemoryTable(self.meter)
        self.fetch_queue = MemoryQueue(self.meter, self.clock)
        self.parse_queue = MemoryQueue(self.meter, self.clock)
        self.blobs: MemoryBlobStore = (
            after.blobs if after is not None else MemoryBlobStore(self.meter)
        )
        self.alerts: MemoryTopic = after.alerts if after is not None else MemoryTopic()
        self.tokens = MemoryTokens()
        self.writers: dict[str, MemoryTableWriter] = {}
        self.deliver = deliver
        self.fetch_batch = fetch_batch
        self.parse_batch = parse_batch
        self.real_time = real_time
        self.stats = RunnerStats()
        wrap = wrap or (lambda x: x)
        self.services = CrawlServices(
            table=wrap(self.table),
            fetch_queue=wrap(self.fetch_queue),
            parse_queue=wrap(self.parse_queue),
            blobs=wrap(self.blobs),
            tokens=self.tokens,
            registry=StaticRegistry([pipeline]),
            meter=self.meter,
            config=config or CrawlConfig(),
            clock=self.clock,
            table_writers=self._writer,
            alerts=self.alerts,
        )
        self.fetcher = Fetcher()
        self.loop = asyncio.new_event_loop()

    def _writer(self, table: str) -> MemoryTableWriter:
        if table not in self.writers:
            keys = [
                t.target.key
                for t in self.pipeline.tasks
                if isinstance(t, LoadTask)
                and isinstance(t.target, DynamoDBTarget)
                and t.target.table == table
            ]
            self.writers[table] = MemoryTableWriter(keys[0] if keys else ["id"], self.meter)
        return self.writers[table]

    # ------------------------------------------------------------------ driving

    def run(self) -> list[str]:
        """Every task in dependency order; the ids of the tasks that succeeded."""
        succeeded = []
        for task_id in self.pipeline.dag().topological_order():
            self.start(task_id)
            if self.pipeline.task(task_id).type == "crawl":
                self.drain(task_id)
            answer = next((a for a in self.tokens.answers if a.token == self.token(task_id)), None)
            if answer is None or answer.kind != "success":
                break
            succeeded.append(task_id)
        return succeeded

    def token(self, task_id: str) -> str:
        """The task's Step Functions task token, as long as the API takes one: what the
        engine stores of it weighs in every measurement as much as it could on AWS (a
        token on the task record, which every commit writes, once cost 0.055 write units a
        page; moto's and this runner's were 20 to 40 characters)."""
        name = f"token-{self.run_id}-{task_id}-"
        return name.ljust(TASK_TOKEN_CHARS, "x")

    def start(self, task_id: str) -> None:
        task = self.pipeline.task(task_id)
        message = ControlMessage(
            v=1,
            pipeline=self.pipeline.name,
            pipeline_version=self.pipeline.version_hash(),
            run_id=self.run_id,
            execution_arn=f"arn:aws:states:local:000000000000:execution:{self.pipeline.name}:"
            f"{self.run_id}",
            task_id=task_id,
            task_type=task.type,
            priority=task.priority,
            parallelism=self.pipeline.parallelism,
            inputs=task.consumes,
            task_token=self.token(task_id),
        )
        self.stats.dispatch_invocations += 1
        self._timed(
            "dispatch", lambda: self.deliver(lambda: handle_control(self.services, message))
        )

    def drain(self, task_id: str, max_rounds: int = 100_000) -> None:
        """Move messages through fetch and parse until the task has nothing left to do."""
        for _ in range(max_rounds):
            moved = self._round()
            if moved or self._sweep(task_id):
                continue
            if self.pending():
                self._wait_for_delayed()
                continue
            # A feeder that died holding a shard lease blocks that shard until the lease
            # expires; skip ahead as the periodic sweep would, a few times.
            if self._sweep_later(task_id):
                continue
            self._sweep(task_id)  # the sweeper also finishes a task whose finisher died
            return
        raise RuntimeError(f"task {task_id} did not settle")

    def _round(self) -> int:
        fetched = [FetchMessage.model_validate_json(m.body) for m in self.fetch_queue.drain()]
        for chunk in _chunks(fetched, self.fetch_batch):
            self.stats.fetch_invocations += 1
            self.stats.fetch_messages += len(chunk)
            self._timed(
                "fetch",
                lambda c=chunk: self.deliver(  # type: ignore[misc]
                    lambda: self.loop.run_until_complete(
                        process_fetch_batch(self.services, self.fetcher, c)
                    )
                ),
            )
        parsed = [ParseBundle.model_validate_json(m.body) for m in self.parse_queue.drain()]
        for chunk in _chunks(parsed, self.parse_batch):
            self.stats.parse_invocations += 1
            self.stats.parse_messages += len(chunk)
            self._timed(
                "parse",
                lambda c=chunk: self.deliver(lambda: self._parse(c)),  # type: ignore[misc]
            )
        return len(fetched) + len(parsed)

    def _parse(self, bundles: list[ParseBundle]) -> None:
        """One parse invocation; a bundle that failed comes back, as SQS redelivers it."""
        outcomes = process_bundles(self.services, bundles)
        failed = [
            b for b, out in zip(bundles, outcomes, strict=True) if isinstance(out, BaseException)
        ]
        if failed:
            self.parse_queue.send_batch([OutMessage(b.model_dump_json()) for b in failed])

    def _sweep(self, task_id: str) -> int:
        """What the scheduled sweeper does (for every running task of this runner)."""
        del task_id  # the sweeper sweeps every running task, like the deployed one
        sent = 0

        def work() -> None:
            nonlocal sent
            sent = sweep_running(self.services).sent

        self.deliver(work)
        return sent

    def _sweep_later(self, task_id: str, tries: int = 10) -> bool:
        for _ in range(tries):
            self.clock.advance(self.services.config.lease_seconds + LEASE_SKEW + 1)
            if self._sweep(task_id) or self.pending():
                return True
        return False

    def _wait_for_delayed(self) -> None:
        """Let delayed messages (politeness, backoff, Retry-After) come due: in real time
        when ``real_time`` (to measure timing against a site), else by skipping ahead."""
        due = [q.next_due() for q in (self.fetch_queue, self.parse_queue)]
        soonest = min((d for d in due if d is not None), default=self.clock())
        wait = max(0.0, soonest - self.clock())
        if self.real_time:
            time.sleep(min(1.0, wait))
        else:
            self.clock.advance(wait)

    def pending(self) -> int:
        """Messages waiting in the fetch and parse queues."""
        return self.fetch_queue.approximate_depth() + self.parse_queue.approximate_depth()

    def _timed(self, stage: str, work: Work) -> None:
        start, wall = time.process_time(), time.perf_counter()
        try:
            work()
        finally:
            spent = time.process_time() - start
            self.stats.cpu_seconds[stage] = self.stats.cpu_seconds.get(stage, 0.0) + spent
            self.meter.lambda_ms(1000 * (time.perf_counter() - wall))

    def close(self) -> None:
        self.loop.run_until_complete(self.fetcher.aclose())
        self.loop.close()

    def __enter__(self) -> MemoryRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
