"""Pipelines -> state machines (one per file) and their EventBridge Scheduler schedules.

Each definition is exactly ``definition_json(compile_pipeline(load_pipeline(path)))`` with its
``${Placeholders}`` (:data:`stepcrawl.names.PLACEHOLDERS`) filled by CloudFormation through
``DefinitionSubstitutions``; a placeholder the stack has no value for fails the synth. The
state machine's role gets what its definition calls and no more: the integrations are read
from the compiled definition (:func:`integrations`), and an integration this module does not
know fails the synth instead of failing a run.

The name of a state machine is fixed, ``stepcrawl-<stage>-<pipeline>``: its role may then
describe and stop the machine's own executions (the run lock, see
``stepcrawl/compiler/asl.py``) through an ARN built from that name, where the machine's own
ARN attribute would make the role's policy depend on the machine that depends on the role.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from aws_cdk import RemovalPolicy, TimeZone
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import StackConfig
from infra.retention import retention_days
from stepcrawl.compiler import compile_pipeline, definition_json, placeholders_in
from stepcrawl.names import PLACEHOLDER_CONTROL_QUEUE_URL, PLACEHOLDER_TABLE_NAME
from stepcrawl.pipeline import DynamoDBTarget, LoadTask, Pipeline, S3Target, discover, load_pipeline

__all__ = [
    "PipelineError",
    "PipelineMachine",
    "PipelineSource",
    "Pipelines",
    "integrations",
    "load_pipelines",
    "state_machine_name",
]

#: The placeholders the stack fills (DefinitionSubstitutions in PipelineMachine).
SUBSTITUTED: Final = frozenset({PLACEHOLDER_CONTROL_QUEUE_URL, PLACEHOLDER_TABLE_NAME})

#: Service integrations a compiled definition may use -> what its role must be allowed.
SQS_SEND_WAIT: Final = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
TABLE_ACTIONS: Final = {
    "arn:aws:states:::dynamodb:putItem": "dynamodb:PutItem",
    "arn:aws:states:::dynamodb:getItem": "dynamodb:GetItem",
    "arn:aws:states:::dynamodb:deleteItem": "dynamodb:DeleteItem",
}
OWN_EXECUTION_ACTIONS: Final = {
    "arn:aws:states:::aws-sdk:sfn:describeExecution": "states:DescribeExecution",
    "arn:aws:states:::aws-sdk:sfn:stopExecution": "states:StopExecution",
}


class PipelineError(ValueError):
    """A pipeline directory the stack cannot deploy; the message says which file and why."""


@dataclass(frozen=True)
class PipelineSource:
    """One pipeline file, validated and compiled."""

    path: Path
    pipeline: Pipeline
    definition: str

    @property
    def name(self) -> str:
        return self.pipeline.name

    def load_tables(self) -> list[str]:
        """DynamoDB tables its load tasks write to (dispatch needs write access)."""
        return [
            t.target.table
            for t in self.pipeline.tasks
            if isinstance(t, LoadTask) and isinstance(t.target, DynamoDBTarget)
        ]

    def s3_targets(self) -> list[tuple[str, S3Target]]:
        return [
            (t.id, t.target)
            for t in self.pipeline.tasks
            if isinstance(t, LoadTask) and isinstance(t.target, S3Target)
        ]


def load_pipelines(directory: Path) -> list[PipelineSource]:
    """Every pipeline file of ``directory`` (as ``stepcrawl validate`` finds them), compiled.

    The functions look a pipeline up as ``<name>.yaml|.yml|.json`` in the pipelines layer, so
    a file's stem must be its pipeline's name (and names are therefore unique).
    """
    sources = []
    for path in discover([directory]):
        pipeline = load_pipeline(path)  # InvalidPipelineError lists every problem
        if path.stem != pipeline.name:
            raise PipelineError(
                f"{path}: the file must be named after its pipeline ({pipeline.name}{path.suffix});"
                " the functions look pipelines up by name"
            )
        definition = definition_json(compile_pipeline(pipeline))
        unknown = placeholders_in(definition) - SUBSTITUTED
        if unknown:
            raise PipelineError(f"{path}: the stack cannot fill placeholder(s) {sorted(unknown)}")
        sources.append(PipelineSource(path=path, pipeline=pipeline, definition=definition))
    return sources


def state_machine_name(config: StackConfig, pipeline: str) -> str:
    """``stepcrawl-<stage>-<pipeline>``: at most 10 + 16 + 1 + 40 = 67 of the allowed 80."""
    return f"{config.prefix}-{pipeline}"


def _resources(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Resource" and isinstance(value, str):
                yield value
            else:
                yield from _resources(value)
    elif isinstance(node, list):
        for value in node:
            yield from _resources(value)


def integrations(definition: str) -> set[str]:
    """The service-integration ARNs the definition's Task states call."""
    return set(_resources(json.loads(definition)))


class PipelineMachine(Construct):
    """A pipeline's state machine with its log group, role grants and optional schedule."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: PipelineSource,
        config: StackConfig,
        table: dynamodb.ITable,
        control_queue: sqs.IQueue,
        schedule_group: scheduler.IScheduleGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self.source = source
        name = state_machine_name(config, source.name)
        # /aws/vendedlogs/ names share one log-delivery resource policy instead of adding
        # every log group to the account's (size-limited) policy.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{name}",
            retention=retention_days(config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(source.definition),
            definition_substitutions={
                PLACEHOLDER_CONTROL_QUEUE_URL: control_queue.queue_url,
                PLACEHOLDER_TABLE_NAME: table.table_name,
            },
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
            tracing_enabled=True,
        )
        self._grant(name, table, control_queue)
        self.schedule: scheduler.Schedule | None = None
        if source.pipeline.schedule is not None:
            self.schedule = self._schedule(schedule_group)

    def _grant(self, name: str, table: dynamodb.ITable, control_queue: sqs.IQueue) -> None:
        used = integrations(self.source.definition)
        unknown = used - {SQS_SEND_WAIT, *TABLE_ACTIONS, *OWN_EXECUTION_ACTIONS}
        if unknown:
            raise PipelineError(
                f"{self.source.path}: the compiled definition calls {sorted(unknown)}, which "
                "infra/pipelines.py does not know how to grant"
            )
        machine = self.state_machine
        if SQS_SEND_WAIT in used:
            control_queue.grant_send_messages(machine)
        table_actions = sorted(TABLE_ACTIONS[r] for r in used & TABLE_ACTIONS.keys())
        if table_actions:
            table.grant(machine, *table_actions)
        own_actions = sorted(OWN_EXECUTION_ACTIONS[r] for r in used & OWN_EXECUTION_ACTIONS.keys())
        if own_actions:
            # The machine imported by its fixed name: grant_execution on it yields
            # arn:<partition>:states:<region>:<account>:execution:<name>:* without a cycle.
            own = sfn.StateMachine.from_state_machine_name(self, "Own", name)
            own.grant_execution(machine, *own_actions)

    def _schedule(self, group: scheduler.IScheduleGroup) -> scheduler.Schedule:
        schedule = self.source.pipeline.schedule
        assert schedule is not None
        return scheduler.Schedule(
            self,
            "Schedule",
            schedule_name=self.source.name,
            schedule_group=group,
            description=f"stepcrawl pipeline {self.source.name}: {schedule.cron}",
            # cron() fires by the wall clock of the pipeline's time zone (DST included); for
            # rate() the zone changes nothing, and the L2 would otherwise write UTC.
            schedule=scheduler.ScheduleExpression.expression(
                schedule.cron, TimeZone.of(schedule.timezone)
            ),
            enabled=schedule.enabled,
            # The role it creates may only start this state machine.
            target=targets.StepFunctionsStartExecution(
                self.state_machine,
                input=scheduler.ScheduleTargetInput.from_object(
                    {
                        "trigger": "schedule",
                        "schedule": scheduler.ContextAttribute.schedule_arn,
                        "scheduled_time": scheduler.ContextAttribute.scheduled_time,
                    }
                ),
            ),
        )


class Pipelines(Construct):
    """One :class:`PipelineMachine` per pipeline, scheduled in the stage's schedule group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        sources: Sequence[PipelineSource],
        config: StackConfig,
        table: dynamodb.ITable,
        control_queue: sqs.IQueue,
        schedule_group: scheduler.IScheduleGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        ids = [construct_name(s.name) for s in sources]
        clash = sorted({i for i in ids if ids.count(i) > 1})
        if clash:
            raise PipelineError(f"pipeline names that differ only in '-' placement: {clash}")
        self.machines = {
            source.name: PipelineMachine(
                self,
                construct_name(source.name),
                source=source,
                config=config,
                table=table,
                control_queue=control_queue,
                schedule_group=schedule_group,
            )
            for source in sources
        }


def construct_name(pipeline: str) -> str:
    """``market-watch`` -> ``MarketWatch`` (construct ids and output names)."""
    return "".join(part.capitalize() for part in pipeline.split("-"))
