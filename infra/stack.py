"""The whole stepcrawl system of one stage: this module only assembles the constructs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.access import WorkerAccess
from infra.alarms import Alarms
from infra.alerting import AlertTopic
from infra.config import StackConfig
from infra.console import Console
from infra.dashboard import Dashboard
from infra.functions import DISPATCH, FETCH, PARSE, Workers
from infra.layers import PIPELINES_MOUNT, LibraryLayer, PipelinesLayer
from infra.pipelines import Pipelines, construct_name, load_pipelines
from infra.queues import WorkQueues
from infra.render import RenderWorker, renders_pages
from infra.storage import Storage
from infra.tracing import RunSampling, sampling_rule_name
from stepcrawl.names import (
    OUTPUT_BUCKET_NAME,
    OUTPUT_CONSOLE_URL,
    OUTPUT_CONSOLE_USER_POOL_ID,
    OUTPUT_CONTROL_DLQ_URL,
    OUTPUT_CONTROL_QUEUE_URL,
    OUTPUT_FETCH_DLQ_URL,
    OUTPUT_FETCH_QUEUE_URL,
    OUTPUT_PARSE_DLQ_URL,
    OUTPUT_PARSE_QUEUE_URL,
    OUTPUT_RENDER_QUEUE_URL,
    OUTPUT_STATE_MACHINE_ARN_PREFIX,
    OUTPUT_TABLE_NAME,
)

__all__ = ["StepcrawlStack"]


class StepcrawlStack(Stack):
    """Storage, queues, layers, workers, one state machine (+ schedule) per pipeline, the
    alert topic, alarms, the runs' trace sampling and, with the ``console`` context, the
    console (``console`` is None without it)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StackConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.sources = load_pipelines(config.pipelines_dir)

        self.storage = Storage(self, "Storage")
        self.queues = WorkQueues(
            self,
            "Queues",
            dispatch_timeout=DISPATCH.timeout,
            fetch_timeout=FETCH.timeout,
            parse_timeout=PARSE.timeout,
        )
        # Every timer of the stage in one place: the sweeper and the pipelines' schedules.
        self.schedule_group = scheduler.ScheduleGroup(
            self,
            "Schedules",
            schedule_group_name=config.prefix,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.library = LibraryLayer(self, "Library")
        self.pipelines_layer = PipelinesLayer(
            self, "PipelineFiles", files=[s.path for s in self.sources]
        )
        self.workers = Workers(
            self,
            "Workers",
            config=config,
            storage=self.storage,
            queues=self.queues,
            layers=[self.library.layer, self.pipelines_layer.layer],
            pipelines_dir=PIPELINES_MOUNT,
            schedule_group=self.schedule_group,
        )
        # render: browser pages: a container-image function, only where a pipeline renders
        self.render: RenderWorker | None = None
        if renders_pages([s.pipeline for s in self.sources]):
            self.render = RenderWorker(
                self,
                "Render",
                config=config,
                storage=self.storage,
                queues=self.queues,
                workers=self.workers,
                pipeline_files=[s.path for s in self.sources],
            )
        self.pipelines = Pipelines(
            self,
            "Pipelines",
            sources=self.sources,
            config=config,
            table=self.storage.table,
            control_queue=self.queues.control.queue,
            schedule_group=self.schedule_group,
        )
        self.access = WorkerAccess(
            self,
            "Access",
            workers=self.workers,
            storage=self.storage,
            queues=self.queues,
            machines=[m.state_machine for m in self.pipelines.machines.values()],
            sources=self.sources,
            alert_secrets=config.alert_webhook_secrets,
            sampling_rule=sampling_rule_name(config.prefix),
        )
        machines = {name: m.state_machine for name, m in self.pipelines.machines.items()}
        self.alerts = AlertTopic(
            self,
            "Alerts",
            prefix=config.prefix,
            machines=list(machines.values()),
            notifier=self.workers.notify,
            finishers=[self.workers.dispatch, self.workers.parse, self.workers.sweeper],
        )
        self.alarms = Alarms(
            self,
            "Alarms",
            prefix=config.prefix,
            queues=self.queues,
            machines=machines,
            pipelines={s.name: s.pipeline for s in self.sources},
            topic=self.alerts.topic,
            fetch_logs=self.workers.fetch.log_group,
        )
        self.sampling = RunSampling(
            self, "Tracing", prefix=config.prefix, rate=config.shedding.trace_rate
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            prefix=config.prefix,
            queues=self.queues,
            machines=machines,
            pipelines={s.name: s.pipeline for s in self.sources},
            alarms=self.alarms.alarms,
        )
        self.console: Console | None = None
        if config.console.enabled:
            self.console = Console(
                self,
                "Console",
                config=config,
                storage=self.storage,
                queues=self.queues,
                machines=machines,
                layers=[self.library.layer, self.pipelines_layer.layer],
                pipelines_dir=PIPELINES_MOUNT,
            )
        self._outputs()

    def _outputs(self) -> None:
        # Clients find the deployment by these names (stepcrawl.names, stepcrawl.deployment).
        CfnOutput(self, OUTPUT_TABLE_NAME, value=self.storage.table.table_name)
        CfnOutput(self, OUTPUT_BUCKET_NAME, value=self.storage.bucket.bucket_name)
        for url, dead_letters_url, queue in (
            (OUTPUT_CONTROL_QUEUE_URL, OUTPUT_CONTROL_DLQ_URL, self.queues.control),
            (OUTPUT_FETCH_QUEUE_URL, OUTPUT_FETCH_DLQ_URL, self.queues.fetch),
            (OUTPUT_PARSE_QUEUE_URL, OUTPUT_PARSE_DLQ_URL, self.queues.parse),
        ):
            CfnOutput(self, url, value=queue.queue.queue_url)
            CfnOutput(self, dead_letters_url, value=queue.dead_letters.queue_url)
        if self.render is not None:  # render: browser (infra/render.py)
            CfnOutput(self, OUTPUT_RENDER_QUEUE_URL, value=self.render.queue.queue.queue_url)
        for name, machine in self.pipelines.machines.items():
            CfnOutput(
                self,
                OUTPUT_STATE_MACHINE_ARN_PREFIX + construct_name(name),
                value=machine.state_machine.state_machine_arn,
                description=f"state machine of pipeline {name}",
            )
        if self.console is not None:
            CfnOutput(
                self,
                OUTPUT_CONSOLE_URL,
                value=self.console.url,
                description="the console (sign in with a user of the console's user pool)",
            )
            CfnOutput(
                self,
                OUTPUT_CONSOLE_USER_POOL_ID,
                value=self.console.user_pool.user_pool_id,
                description="the console's users (aws cognito-idp admin-create-user ...)",
            )
