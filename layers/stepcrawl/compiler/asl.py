"""Compile a :class:`Pipeline` into an Amazon States Language definition.

Shape of every compiled machine::

    [run lock, per schedule.overlap] ─> Run (Parallel, one branch: the task plan)
                                             │ ok                    │ any failure
                                     ReleaseRunLock (end)    ReleaseRunLockAfterFailure
                                                                     │
                                                                 RunFailed

A successful run enters the lock's put, Run, its tasks and the lock's delete, nothing else:
Step Functions bills each state entered, so the input and output are shaped inside those
states (Run's ``InputPath`` and ``ResultSelector`` read the context object) rather than in
Pass states of their own. Whatever the run's input was (an object, a string), tasks see one
shape, and the run's output is ``{pipeline, run_id, status}``.

Each task is ``sqs:sendMessage.waitForTaskToken`` to the control queue; the dispatcher answers
the token. Task states have no ASL ``Retry``: workers retry pages and stages themselves (and
moto re-uses the token on a callback retry). A failing task goes to its own Fail state whose
cause names the task, which fails the Run block, which releases the lock and fails the run.

The run lock is one DynamoDB item per pipeline written with a conditional put. When it is
taken, the holder's execution is described: a holder that is no longer RUNNING (it crashed,
timed out or was aborted before releasing) is taken over by a put conditioned on that holder,
so stale locks heal themselves without clocks. A live holder means: ``forbid`` -> this run is
skipped, ``replace`` -> the holder is stopped and its lock taken over. ``allow`` has no lock.

``${Placeholders}`` (:mod:`stepcrawl.names`) stand for deployment values; CDK fills them via
``DefinitionSubstitutions``, local mode with :func:`substitute`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from stepcrawl.compiler.plan import Block, Leaf, Plan, Series, plan_dag
from stepcrawl.errors import SubstitutionError
from stepcrawl.names import (
    CONTROL_MESSAGE_VERSION,
    PLACEHOLDER_CONTROL_QUEUE_URL,
    PLACEHOLDER_TABLE_NAME,
    REPLACED_ERROR,
    TASK_FAILED_ERROR,
)
from stepcrawl.pipeline.models import Pipeline
from stepcrawl.table_keys import run_lock_key

__all__ = [
    "RUN_STATE",
    "compile_pipeline",
    "definition_json",
    "placeholders_in",
    "substitute",
]

State = dict[str, Any]

RUN_STATE = "Run"
#: Entered only when a successful run could not release its lock.
_LOCK_LEFT = "RunSucceeded"
_SEND_WAIT = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z][A-Za-z0-9_]*)\}")
_DDB_RETRY = [
    {
        "ErrorEquals": [
            "DynamoDB.ProvisionedThroughputExceededException",
            "DynamoDB.RequestLimitExceeded",
            "DynamoDB.ThrottlingException",
            "DynamoDB.InternalServerErrorException",
        ],
        "IntervalSeconds": 1,
        "MaxAttempts": 6,
        "BackoffRate": 2.0,
        "JitterStrategy": "FULL",
    }
]
_CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"


def _placeholder(name: str) -> str:
    return "${" + name + "}"


def compile_pipeline(pipeline: Pipeline, plan: Plan | None = None) -> dict[str, Any]:
    """The state machine of ``pipeline`` as a JSON-ready dict (deterministic)."""
    return _Compiler(pipeline, plan or plan_dag(pipeline.dag())).definition()


def definition_json(definition: dict[str, Any]) -> str:
    """Stable text form: same pipeline, same bytes (what CDK and diffs see)."""
    return json.dumps(definition, indent=2, ensure_ascii=False) + "\n"


def placeholders_in(definition: dict[str, Any] | str) -> set[str]:
    """Names of the ``${Placeholders}`` a definition still contains."""
    text = definition if isinstance(definition, str) else json.dumps(definition)
    return set(_PLACEHOLDER.findall(text))


def substitute(definition: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """Fill placeholders as CloudFormation would; every placeholder must have a value."""
    missing = placeholders_in(definition) - values.keys()
    if missing:
        raise SubstitutionError(sorted(missing))
    text = _PLACEHOLDER.sub(
        lambda m: json.dumps(values[m[1]])[1:-1], json.dumps(definition, ensure_ascii=False)
    )
    result: dict[str, Any] = json.loads(text)
    return result


class _Compiler:
    def __init__(self, pipeline: Pipeline, plan: Plan) -> None:
        self.pipeline = pipeline
        self.plan = plan
        self.version = pipeline.version_hash()
        self.parallel_count = 0

    # ------------------------------------------------------------------ whole machine

    def definition(self) -> dict[str, Any]:
        p = self.pipeline
        overlap = p.schedule.overlap if p.schedule else "forbid"
        states: dict[str, State] = {}
        if overlap != "allow":
            states |= self.lock_states(overlap)
        unlock = overlap != "allow"
        # Run shapes its own input (the branches') and output from the context object, so
        # no Pass state is entered to do it: Step Functions bills every state entered, and a
        # transition costs as much as ~40 DynamoDB write units (docs/performance.md).
        run_id = "$$.Execution.Name"
        states[RUN_STATE] = {
            "Type": "Parallel",
            "Comment": "The task DAG; any task failure lands in the Catch below.",
            # The branches' input: the execution's context (its id, name, input...), an object
            # whatever the run's input was, so a task's Catch can add its failure to it.
            # (Parallel's Parameters would do too, but cfn-lint's schema refuses them.)
            "InputPath": "$$.Execution",
            "Branches": [self.branch(self.plan.root)],
            "ResultSelector": {"pipeline": p.name, "run_id.$": run_id, "status": "SUCCEEDED"},
            "ResultPath": "$",
            "Catch": [
                {
                    # "$": whatever the run's input was (a string, a list), the error is kept.
                    "ErrorEquals": ["States.ALL"],
                    "ResultPath": "$",
                    "Next": "ReleaseRunLockAfterFailure" if unlock else "RunFailed",
                }
            ],
        }
        if unlock:
            states[RUN_STATE]["Next"] = "ReleaseRunLock"
            states["ReleaseRunLock"] = self.release(None)
            states["ReleaseRunLockAfterFailure"] = self.release("RunFailed")
            states[_LOCK_LEFT] = {
                "Type": "Succeed",
                "Comment": "The run succeeded; its lock could not be released (stale: taken over).",
            }
        else:
            states[RUN_STATE]["End"] = True
        states["RunFailed"] = {"Type": "Fail", "ErrorPath": "$.Error", "CausePath": "$.Cause"}
        return {
            "Comment": f"stepcrawl pipeline {p.name} (version {self.version})",
            "StartAt": "AcquireRunLock" if unlock else RUN_STATE,
            "TimeoutSeconds": self.machine_timeout(),
            "States": states,
        }

    def machine_timeout(self) -> int:
        """Longest possible run: the slowest chain of task timeouts, plus a margin for locks."""
        own = {t.id: self.pipeline.settings_for(t.id).timeout for t in self.pipeline.tasks}
        dag = self.pipeline.dag()
        finish: dict[str, float] = {}
        for task in dag.topological_order():
            start = max((finish[d] for d in dag.nodes[task].depends_on), default=0.0)
            finish[task] = start + own[task]
        return math.ceil(max(finish.values())) + 3600

    # ------------------------------------------------------------------ the task plan

    def branch(self, block: Block) -> dict[str, Any]:
        """A self-contained state list (a Parallel branch) running ``block``."""
        states: dict[str, State] = {}
        start = self.emit(block, states, next_state=None)
        return {"StartAt": start, "States": states}

    def emit(self, block: Block, states: dict[str, State], next_state: str | None) -> str:
        """Add ``block``'s states, chained to ``next_state``; return the entry state's name."""
        if isinstance(block, Leaf):
            states |= self.task_states(block.task, next_state)
            return block.task
        if isinstance(block, Series):
            entry = next_state
            for part in reversed(block.parts):
                entry = self.emit(part, states, entry)
            assert entry is not None
            return entry
        self.parallel_count += 1
        name = f"Parallel {self.parallel_count}"
        state: State = {
            "Type": "Parallel",
            "Comment": "Ready together; branches in dispatch order (priority, id).",
            "Branches": [],
            "ResultPath": None,
        }
        states[name] = state  # insert before the branches so numbering reads top-down
        state["Branches"] = [self.branch(b) for b in block.branches]
        _chain(state, next_state)
        return name

    def task_states(self, task_id: str, next_state: str | None) -> dict[str, State]:
        task = self.pipeline.task(task_id)
        settings = self.pipeline.settings_for(task_id)
        timeout = math.ceil(settings.timeout)
        failed = f"{task_id} failed"
        state: State = {
            "Type": "Task",
            "Comment": f"{task.type} task, priority {task.priority}",
            "Resource": _SEND_WAIT,
            "Parameters": {
                "QueueUrl": _placeholder(PLACEHOLDER_CONTROL_QUEUE_URL),
                "MessageBody": {
                    "v": CONTROL_MESSAGE_VERSION,
                    "pipeline": self.pipeline.name,
                    "pipeline_version": self.version,
                    "run_id.$": "$$.Execution.Name",
                    "execution_arn.$": "$$.Execution.Id",
                    "task_id": task_id,
                    "task_type": task.type,
                    "priority": task.priority,
                    "parallelism": self.pipeline.parallelism,
                    "inputs": task.consumes,
                    "task_token.$": "$$.Task.Token",
                },
            },
            "TimeoutSeconds": timeout,
            "ResultPath": None,
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.failure", "Next": failed}],
        }
        heartbeat = math.ceil(settings.heartbeat)
        if heartbeat < timeout:
            state["HeartbeatSeconds"] = heartbeat
        _chain(state, next_state)
        fail: State = {
            "Type": "Fail",
            "Comment": "Names the failed task in the run's cause.",
            "Error": TASK_FAILED_ERROR,
            # JsonToString: the Cause key may be absent, a path to it would fail the Fail state.
            "CausePath": f"States.Format('task {task_id} failed: {{}}', "
            "States.JsonToString($.failure))",
        }
        return {task_id: state, failed: fail}

    # ------------------------------------------------------------------ run lock

    def lock_key(self) -> dict[str, Any]:
        pk, sk = run_lock_key(self.pipeline.name)
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def put_lock(
        self, condition: str, values: dict[str, Any] | None, next_on_conflict: str
    ) -> State:
        params: dict[str, Any] = {
            "TableName": _placeholder(PLACEHOLDER_TABLE_NAME),
            "Item": self.lock_key()
            | {
                "holder": {"S.$": "$$.Execution.Id"},
                "run_id": {"S.$": "$$.Execution.Name"},
                "pipeline_version": {"S": self.version},
            },
            "ConditionExpression": condition,
        }
        if values:
            params["ExpressionAttributeValues"] = values
        return {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": params,
            "ResultPath": None,
            "Retry": _DDB_RETRY,
            "Catch": [
                # "$": the next state adds to it, whatever the run's input was (a string...).
                {"ErrorEquals": [_CONDITION_FAILED], "ResultPath": "$", "Next": next_on_conflict}
            ],
            "Next": RUN_STATE,
        }

    def lock_states(self, overlap: str) -> dict[str, State]:
        """The states that take the run lock before Run, for ``overlap`` forbid or replace."""
        if overlap == "forbid":
            on_live_holder, live_holder_state = (
                "SkippedOverlap",
                _skipped_overlap(self.pipeline.name),
            )
        else:
            on_live_holder, live_holder_state = "StopLockHolder", _stop_lock_holder()
        return {
            "AcquireRunLock": self.put_lock("attribute_not_exists(pk)", None, "ReadRunLock")
            | {"Comment": f"overlap: {overlap}; one live run of this pipeline at a time."},
            "ReadRunLock": self.read_lock(),
            "RunLockHeld": _lock_still_held(),
            "DescribeLockHolder": _describe_lock_holder(),
            "LockHolderRunning": _lock_holder_running(on_live_holder),
            "TakeOverRunLock": self.put_lock(
                "holder = :stale",
                {":stale": {"S.$": "$.lock.Item.holder.S"}},
                "ReadRunLock",
            ),
            on_live_holder: live_holder_state,
        }

    def read_lock(self) -> State:
        """Read the lock item a conditional put found taken (consistently: it may be new)."""
        return {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:getItem",
            "Parameters": {
                "TableName": _placeholder(PLACEHOLDER_TABLE_NAME),
                "Key": self.lock_key(),
                "ConsistentRead": True,
            },
            "ResultPath": "$.lock",
            "Retry": _DDB_RETRY,
            "Next": "RunLockHeld",
        }

    def release(self, next_state: str | None) -> State:
        """Delete the lock if it is still ours, then go to ``next_state`` (``None``: the end,
        with the Run's output)."""
        state: State = {
            "Type": "Task",
            "Comment": "Only our own lock: a replacing run may own it by now.",
            "Resource": "arn:aws:states:::dynamodb:deleteItem",
            "Parameters": {
                "TableName": _placeholder(PLACEHOLDER_TABLE_NAME),
                "Key": self.lock_key(),
                "ConditionExpression": "holder = :me",
                "ExpressionAttributeValues": {":me": {"S.$": "$$.Execution.Id"}},
            },
            "ResultPath": None,
            "Retry": _DDB_RETRY,
        }
        # A lock we cannot release is stale once we end; the next run takes it over.
        after_error = next_state or _LOCK_LEFT
        state["Catch"] = [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": after_error}]
        _chain(state, next_state)
        return state


def _chain(state: State, next_state: str | None) -> None:
    if next_state is None:
        state["End"] = True
    else:
        state["Next"] = next_state


# ---------------------------------------------------------------------- run lock (fixed states)


def _lock_still_held() -> State:
    return {
        "Type": "Choice",
        "Comment": "Released meanwhile? Then try to take it again.",
        "Choices": [{"Variable": "$.lock.Item", "IsPresent": False, "Next": "AcquireRunLock"}],
        "Default": "DescribeLockHolder",
    }


def _describe_lock_holder() -> State:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::aws-sdk:sfn:describeExecution",
        "Parameters": {"ExecutionArn.$": "$.lock.Item.holder.S"},
        "ResultSelector": {"status.$": "$.Status"},
        "ResultPath": "$.holder",
        "Catch": [
            {
                "ErrorEquals": ["Sfn.ExecutionDoesNotExistException"],
                "ResultPath": None,
                "Next": "TakeOverRunLock",
            }
        ],
        "Next": "LockHolderRunning",
    }


def _lock_holder_running(on_live_holder: str) -> State:
    return {
        "Type": "Choice",
        "Comment": "A holder that ended without releasing left a stale lock.",
        "Choices": [
            {"Variable": "$.holder.status", "StringEquals": "RUNNING", "Next": on_live_holder}
        ],
        "Default": "TakeOverRunLock",
    }


def _skipped_overlap(pipeline: str) -> State:
    return {
        "Type": "Pass",
        "Comment": "overlap: forbid, and the previous run is still going.",
        "Parameters": {
            "pipeline": pipeline,
            "run_id.$": "$$.Execution.Name",
            "status": "SKIPPED",
            "running_run_id.$": "$.lock.Item.run_id.S",
        },
        "End": True,
    }


def _stop_lock_holder() -> State:
    return {
        "Type": "Task",
        "Comment": "overlap: replace; the newer run wins.",
        "Resource": "arn:aws:states:::aws-sdk:sfn:stopExecution",
        "Parameters": {
            "ExecutionArn.$": "$.lock.Item.holder.S",
            "Error": REPLACED_ERROR,
            "Cause.$": "States.Format('replaced by run {}', $$.Execution.Name)",
        },
        "ResultPath": None,
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": "TakeOverRunLock"}],
        "Next": "TakeOverRunLock",
    }
