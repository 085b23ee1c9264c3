"""A deployed stack seen from outside: start, follow, read and cancel runs (an AWS adapter).

One code path for AWS and for the local emulator: everything is found from the stack's
CloudFormation outputs (``stepcrawl-<stage>``) with ordinary boto3 clients, so pointing
``AWS_ENDPOINT_URL`` at ``stepcrawl serve`` is all it takes to use these against local mode.

A run is a Step Functions execution named by its run id; its tasks are read from the state
machine's own definition (each task state sends a control message naming the task and its
type), their progress from the execution history and, for crawl tasks, from the task
records in the table.

AWS errors leave as :mod:`stepcrawl.errors` classes, mapped by the AWS boundary's one
mapping (:mod:`stepcrawl.storage.aws.errors`): no ``ClientError`` reaches callers.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import boto3

from stepcrawl.crawl.admission import WAITING_ON_PARALLELISM, waiting_tasks
from stepcrawl.crawl.commit import PROGRESS_AT
from stepcrawl.crawl.context import CrawlConfig, CrawlServices, PipelineRegistry, StaticRegistry
from stepcrawl.crawl.items import output_items
from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.stopping import cancel_run
from stepcrawl.crawl.waiting import InFlight, in_flight_urls
from stepcrawl.errors import ConfigError
from stepcrawl.names import (
    CANCELLED_ERROR,
    ENV_TABLE,
    OUTPUT_BUCKET_NAME,
    OUTPUT_CONTROL_DLQ_URL,
    OUTPUT_FETCH_DLQ_URL,
    OUTPUT_FETCH_QUEUE_URL,
    OUTPUT_PARSE_DLQ_URL,
    OUTPUT_PARSE_QUEUE_URL,
    OUTPUT_RENDER_QUEUE_URL,
    OUTPUT_STATE_MACHINE_ARN_PREFIX,
    OUTPUT_TABLE_NAME,
)
from stepcrawl.run_status import (
    RunStatus,
    TaskDef,
    TaskStatus,
    apply_event,
    aware,
    new_run_id,
    tasks_of_definition,
)
from stepcrawl.storage.aws import DynamoTable, S3BlobStore, SfnTokens, SqsQueue
from stepcrawl.storage.aws.errors import call
from stepcrawl.table_keys import task_key

__all__ = ["Deployment", "execution_events", "stack_name"]

ClientFactory = Callable[[str], Any]
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
#: Step Functions' answers to ``DescribeExecution`` of a run that is not this machine's.
_NO_EXECUTION = frozenset({"ExecutionDoesNotExist", "InvalidArn"})


def _aws(
    method: Callable[..., Any], /, *, answers: frozenset[str] = frozenset(), **request: Any
) -> Any:
    """``method(**request)``'s response; ``None`` for an error whose code is in ``answers``
    (an answer to the caller, not an error); any other AWS error raised as its
    :mod:`stepcrawl.errors` class naming the stack, machine or queue the request was about:
    :func:`stepcrawl.storage.aws.errors.call`, with the request as keywords."""
    return call(method, request, answers=answers)


def stack_name(stage: str) -> str:
    return f"stepcrawl-{stage}"


class Deployment:
    """The stack ``stepcrawl-<stage>`` as its outputs describe it."""

    def __init__(
        self,
        stage: str,
        *,
        client: ClientFactory | None = None,
        config: CrawlConfig | None = None,
        stall_after: float | None = None,
    ) -> None:
        self.stage = stage
        #: Seconds a crawl task with URLs in flight may go without a commit, while no queue
        #: holds a message waiting, before `status` names them; ``None``: the stack's setting
        #: (``CrawlConfig.stall_after``, which the sweep's stall alert uses too).
        self.stall_after = stall_after
        #: the last :class:`InFlight` read, by (run, task, claimed, finished): a stalled task
        #: does not change, so following it does not read its whole log on every tick
        self._in_flight: dict[tuple[str, str, int, int], InFlight] = {}
        self._client: ClientFactory = client or _default_client
        #: The engine's settings when the caller has them already (a function of the stack
        #: reads them from its own environment): :meth:`crawl_config` need not look.
        self._config = config
        self._clients: dict[str, Any] = {}
        # CloudFormation answers a stack that does not exist with a ValidationError.
        stacks = _aws(
            self.client("cloudformation").describe_stacks,
            answers=frozenset({"ValidationError"}),
            StackName=stack_name(stage),
        )
        if stacks is None:
            raise ConfigError(
                f"stack {stack_name(stage)} not found; deploy it (`make deploy`), start "
                "`stepcrawl serve` for a local one, or pick another with --stage"
            )
        self.outputs = {
            o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs", [])
        }
        prefix = f"{stack_name(stage)}-"
        self.state_machines = {
            arn.rsplit(":", 1)[-1].removeprefix(prefix): arn
            for key, arn in self.outputs.items()
            if key.startswith(OUTPUT_STATE_MACHINE_ARN_PREFIX)
        }
        self._definitions: dict[str, dict[str, TaskDef]] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._client(service)
        return self._clients[service]

    def output(self, key: str) -> str:
        """The stack output ``key`` (a name from :mod:`stepcrawl.names`)."""
        try:
            return str(self.outputs[key])
        except KeyError:
            raise ConfigError(
                f"stack {stack_name(self.stage)} has no output {key}; deployed by an older "
                "stepcrawl? deploy it again"
            ) from None

    @property
    def table(self) -> DynamoTable:
        return DynamoTable(self.output(OUTPUT_TABLE_NAME), client=self.client("dynamodb"))

    @property
    def blobs(self) -> S3BlobStore:
        return S3BlobStore(self.output(OUTPUT_BUCKET_NAME), client=self.client("s3"))

    def queue(self, output: str) -> SqsQueue:
        """The queue whose URL is the stack output ``output``."""
        return SqsQueue(self.output(output), client=self.client("sqs"))

    def dead_letters(self) -> dict[str, int]:
        """Messages waiting in each queue's dead-letter queue (a handler failed on them
        :data:`~stepcrawl.names.MAX_RECEIVE_COUNT` times): what `status` and reports show."""
        outputs = {
            "control": OUTPUT_CONTROL_DLQ_URL,
            "fetch": OUTPUT_FETCH_DLQ_URL,
            "parse": OUTPUT_PARSE_DLQ_URL,
        }
        return {name: self.queue(output).approximate_depth() for name, output in outputs.items()}

    def crawl_config(self) -> CrawlConfig:
        """The crawl engine's settings as the deployed functions have them.

        Read from a worker function's environment, where the stack put them: a client that
        writes to the frontier (``stepcrawl redrive``) must shard it as the functions do.
        """
        if self._config is not None:
            return self._config
        cloudformation, functions = self.client("cloudformation"), self.client("lambda")
        request: dict[str, Any] = {"StackName": stack_name(self.stage)}
        while True:
            page = _aws(cloudformation.list_stack_resources, **request)
            for resource in page["StackResourceSummaries"]:
                if resource["ResourceType"] != "AWS::Lambda::Function":
                    continue
                configuration = _aws(
                    functions.get_function_configuration,
                    FunctionName=resource["PhysicalResourceId"],
                )
                environment = configuration.get("Environment", {}).get("Variables", {})
                if ENV_TABLE in environment:  # a worker, not a CDK helper function
                    # Read once: `status` asks on every tick of a followed run.
                    self._config = CrawlConfig.from_env(environment)
                    return self._config
            if not page.get("NextToken"):
                break
            request["NextToken"] = page["NextToken"]
        raise ConfigError(f"stack {stack_name(self.stage)} has no stepcrawl function")

    def crawl_services(self, registry: PipelineRegistry) -> CrawlServices:
        """What the crawl stages use, on this deployment: for a client acting as they do
        (``stepcrawl redrive``). ``registry`` holds the deployed pipelines: the stack keeps
        their files only inside its functions' layer."""
        return CrawlServices(
            table=self.table,
            fetch_queue=self.queue(OUTPUT_FETCH_QUEUE_URL),
            parse_queue=self.queue(OUTPUT_PARSE_QUEUE_URL),
            blobs=self.blobs,
            tokens=SfnTokens(client=self.client("stepfunctions")),
            registry=registry,
            config=self.crawl_config(),
            # render: browser pages are fed to the render queue (crawl/render.py)
            render_queue=(
                self.queue(OUTPUT_RENDER_QUEUE_URL)
                if OUTPUT_RENDER_QUEUE_URL in self.outputs
                else None
            ),
        )

    def machine(self, pipeline: str) -> str:
        try:
            return str(self.state_machines[pipeline])
        except KeyError:
            known = ", ".join(sorted(self.state_machines)) or "none"
            raise ConfigError(
                f"pipeline {pipeline!r} is not deployed in {stack_name(self.stage)} "
                f"(deployed: {known})"
            ) from None

    def tasks(self, pipeline: str) -> dict[str, TaskDef]:
        if pipeline not in self._definitions:
            described = _aws(
                self.client("stepfunctions").describe_state_machine,
                stateMachineArn=self.machine(pipeline),
            )
            self._definitions[pipeline] = tasks_of_definition(json.loads(described["definition"]))
        return self._definitions[pipeline]

    # -- runs ---------------------------------------------------------------------------------

    def start(
        self, pipeline: str, run: str | None = None, payload: dict[str, Any] | None = None
    ) -> str:
        """Start a run of ``pipeline``; its execution ARN (the run id is its name)."""
        run = run or new_run_id()
        if not _RUN_ID.match(run):
            raise ConfigError(
                f"run id {run!r}: use 1-80 letters, digits, '-' or '_' (it names the execution)"
            )
        started = _aws(
            self.client("stepfunctions").start_execution,
            answers=frozenset({"ExecutionAlreadyExists"}),
            stateMachineArn=self.machine(pipeline),
            name=run,
            input=json.dumps(payload or {"trigger": "manual"}),
        )
        if started is None:
            raise ConfigError(f"run {run} already exists; pick another --run-id")
        return str(started["executionArn"])

    def execution_arn(self, run: str) -> tuple[str, str]:
        """(pipeline, execution ARN) of run ``run``, looked up in every deployed pipeline."""
        sfn = self.client("stepfunctions")
        for pipeline, machine in self.state_machines.items():
            arn = machine.replace(":stateMachine:", ":execution:") + f":{run}"
            if _aws(sfn.describe_execution, answers=_NO_EXECUTION, executionArn=arn) is None:
                continue
            return pipeline, arn
        raise ConfigError(f"no run {run} in {stack_name(self.stage)}")

    def status(self, run: str, *, pipeline: str | None = None) -> RunStatus:
        if pipeline is None:
            pipeline, arn = self.execution_arn(run)
        else:
            arn = self.machine(pipeline).replace(":stateMachine:", ":execution:") + f":{run}"
        sfn = self.client("stepfunctions")
        described = _aws(sfn.describe_execution, answers=_NO_EXECUTION, executionArn=arn)
        if described is None:
            raise ConfigError(f"no run {run} of {pipeline} in {stack_name(self.stage)}")
        tasks = {t: TaskStatus(t, d.type) for t, d in self.tasks(pipeline).items()}
        for event in execution_events(sfn, arn):
            apply_event(tasks, event)
        table = self.table
        for task in tasks.values():
            if task.type == "crawl":
                record = table.get(task_key(run, task.id), consistent=False)
                task.counters = dict(record or {})
                # The record, not the execution: a task that timed out is failed there but
                # still running here, or cancelled once its stopped run is swept
                # (crawl/stopping.py), with the URLs it waited for.
                if record and record.get("status") in (TaskState.RUNNING, TaskState.CANCELLED):
                    task.in_flight = self._stalled(run, task.id, task.counters)
                if record and record.get("status") == TaskState.CANCELLED:
                    task.state = "cancelled"  # its run stopped under it (crawl/stopping.py)
        for waiting in waiting_tasks(table, run):
            if waiting in tasks and tasks[waiting].state == "running":
                tasks[waiting].state = "waiting"
                tasks[waiting].waiting_on = WAITING_ON_PARALLELISM
        return RunStatus(
            run=run,
            pipeline=pipeline,
            execution_arn=arn,
            status=str(described["status"]),
            started=aware(described["startDate"]),
            stopped=aware(described["stopDate"]) if described.get("stopDate") else None,
            tasks=tasks,
            error=described.get("error"),
            cause=described.get("cause"),
        )

    def _stalled(self, run: str, task: str, record: dict[str, Any]) -> InFlight | None:
        """The task's URLs in flight if it waits on nothing the engine can see."""
        claimed, finished = int(record.get("claimed", 0)), int(record.get("finished", 0))
        changed = float(record.get(PROGRESS_AT) or record.get("started_at") or 0)
        idle = time.time() - changed
        if claimed <= finished:
            return None
        after = self.stall_after
        if after is None:
            after = self.crawl_config().stall_after
        if idle < after:
            return None
        waiting, not_visible = self._crawl_queues()
        if waiting:
            return None
        key = (run, task, claimed, finished)
        found = self._in_flight.get(key)
        if found is None:
            shards = self.crawl_config().shards
            found = in_flight_urls(self.table, run, task, shards, idle, blobs=self.blobs)
            kept = {k: v for k, v in self._in_flight.items() if k[:2] != key[:2]}
            self._in_flight = kept | {key: found}  # one reading per task followed
        if not found.urls:
            return None
        return replace(found, idle_seconds=idle, not_visible=not_visible)

    def _crawl_queues(self) -> tuple[int, dict[str, int]]:
        """Messages waiting (visible or delayed) in the fetch, render and parse queues, and
        each one's messages received and not deleted (not visible)."""
        outputs = {
            "fetch": OUTPUT_FETCH_QUEUE_URL,
            "render": OUTPUT_RENDER_QUEUE_URL,
            "parse": OUTPUT_PARSE_QUEUE_URL,
        }
        waiting, not_visible = 0, {}
        for name, output in outputs.items():
            if output not in self.outputs:
                continue  # no render queue: no pipeline renders
            attributes = _aws(
                self.client("sqs").get_queue_attributes,
                QueueUrl=self.output(output),
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesDelayed",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            waiting += int(attributes.get("ApproximateNumberOfMessages", 0))
            waiting += int(attributes.get("ApproximateNumberOfMessagesDelayed", 0))
            if hidden := int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)):
                not_visible[name] = hidden
        return waiting, not_visible

    def items(
        self, run: str, task: str, *, pipeline: str | None = None
    ) -> Iterator[dict[str, Any]]:
        if pipeline is None:
            pipeline, _ = self.execution_arn(run)
        kinds = self.tasks(pipeline)
        if task not in kinds:
            raise ConfigError(
                f"pipeline {pipeline} has no task {task!r} (tasks: {', '.join(kinds)})"
            )
        return output_items(
            self.table, self.blobs, pipeline, run, task, crawl=kinds[task].type == "crawl"
        )

    def cancel(self, run: str, *, cause: str = "cancelled by stepcrawl cancel") -> str:
        """Stop the run's execution; its previous status."""
        _, arn = self.execution_arn(run)
        sfn = self.client("stepfunctions")
        status = str(_aws(sfn.describe_execution, executionArn=arn)["status"])
        if status == "RUNNING":
            _aws(sfn.stop_execution, executionArn=arn, error=CANCELLED_ERROR, cause=cause)
        if status != "SUCCEEDED":
            # At once, not on the next heartbeat: the run's crawls stop (crawl/stopping.py);
            # also for a run stopped elsewhere (Step Functions' console) before they noticed.
            cancel_run(self.crawl_services(StaticRegistry([])), run, cause)
        return status

    def wait(
        self,
        run: str,
        *,
        pipeline: str | None = None,
        timeout: float | None = None,
        interval: float = 0.5,
        on_tick: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus:
        """Follow a run until it ends (``on_tick`` sees every status read)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status(run, pipeline=pipeline)
            if on_tick is not None:
                on_tick(status)
            if status.status != "RUNNING":
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run} still running after {timeout}s")
            time.sleep(interval)


def _default_client(service: str) -> Any:
    # boto3 reads region, credentials and AWS_ENDPOINT_URL (local mode) from the environment.
    return boto3.client(service)  # type: ignore[call-overload]


def execution_events(sfn: Any, arn: str) -> Iterator[dict[str, Any]]:
    """Every event of an execution's history, oldest first (page by page)."""
    kwargs: dict[str, Any] = {"executionArn": arn, "maxResults": 1000}
    while True:
        page = _aws(sfn.get_execution_history, **kwargs)
        yield from page["events"]
        if not page.get("nextToken"):
            return
        kwargs["nextToken"] = page["nextToken"]
