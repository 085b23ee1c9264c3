"""What each worker may do, granted only through the constructs' ``grant_*`` methods.

| worker   | table | bucket                                       | send to       | machines      |
|----------|-------|----------------------------------------------|---------------|---------------|
| dispatch | rw    | rw+delete ``items/``, ``quarantine/``,       | fetch (feed), | task response |
|          |       | ``profiles/``, ``log/``, ``views/`` and each | control       |               |
|          |       | S3 load target's prefix                      |               |               |
| fetch    | rw    | put ``bodies/``                              | fetch, parse  | -             |
| parse    | rw    | get ``bodies/``; get+put+delete ``items/``,  | fetch, control| task response |
|          |       | ``views/``; get+put ``log/``; put            |               |               |
|          |       | ``archive/`` (``archive: warc``),            |               |               |
|          |       | ``profiles/``                                |               |               |
| sweeper  | rw    | get ``items/``, put ``profiles/``, get+put   | fetch, control| task response |
|          |       | ``log/``, get+put+delete ``views/``          |               |               |
| scaler   | rw    | -                                            | -             | -             |
| notify   | get, put, delete | -                                 | -             | -             |

plus, for dispatch, parse and sweeper (they finish crawl tasks), ``sns:Publish`` on the alert
topic (:mod:`infra.alerting`: data-quality alerts); for the scaler,
``sqs:GetQueueAttributes`` on the fetch and parse queues (the sweeper's stall watch reads
every crawl queue's depth: the parse queue's by its own grant, fetch's and render's through
``grant_send_messages``),
``lambda:GetEventSourceMapping``/``UpdateEventSourceMapping`` on those two mappings only, and
``cloudwatch:GetMetricStatistics`` (which takes no resource: cdk-nag's finding is acknowledged
in :mod:`infra.nag`); and, for dispatch, write access to the DynamoDB tables that deployed
load tasks name (imported by name: ``Table.from_table_name(...).grant_write_data``), and, for
fetch, read access to the proxy secrets deployed crawl tasks name (``proxy.secret``).
Receiving from its own queue is granted by the event-source mapping. ``grant_send_messages``
also allows ``sqs:GetQueueAttributes``, which the feeder needs to read the fetch queue's depth.

"control": a task admitted when another gives its ``parallelism`` slot back is handed to
dispatch through the control queue (an ETL stage needs dispatch's timeout).

The bucket prefixes come from :mod:`stepcrawl.crawl.paths` (the functions that build the
keys), so a layout change there moves the grants with it. ``grant_task_response`` is scoped to
the state-machine ARNs: IAM checks SendTaskSuccess/Failure/Heartbeat against the ARN of the
machine that issued the token.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Annotations, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secrets
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.functions import Workers
from infra.pipelines import PipelineSource
from infra.queues import WorkQueues
from infra.storage import Storage
from stepcrawl.alerts.secrets import SSM_PREFIX
from stepcrawl.archive.warc import archive_key
from stepcrawl.crawl.checkpoints import checkpoint_prefix
from stepcrawl.crawl.paths import body_key, items_part_key, quarantine_prefix
from stepcrawl.crawl.tasklog import spill_key
from stepcrawl.names import ENV_PROXY_SECRETS
from stepcrawl.pipeline import CrawlTask
from stepcrawl.quality import profile_object_key

__all__ = [
    "ARCHIVES",
    "BODIES",
    "ITEMS",
    "LOG_SPILLS",
    "PROFILES",
    "QUARANTINE",
    "VIEWS",
    "WorkerAccess",
    "load_prefix_pattern",
    "proxy_secrets",
]


def _top(key: str) -> str:
    """``items/p/r/t/parts/b.jsonl`` -> ``items/*`` (the key's first path segment)."""
    return key.split("/", 1)[0] + "/*"


BODIES = _top(body_key("run", "task", "url", 1))
ITEMS = _top(items_part_key("pipeline", "run", "task", "bundle"))
QUARANTINE = _top(quarantine_prefix("pipeline", "run", "task"))
#: Payloads of task log entries too big for a table item (crawl/tasklog.py): written and read
#: by whoever appends to or reads a task's log.
LOG_SPILLS = _top(spill_key("run", "task", "name"))
#: Checkpoints of task logs' views (crawl/checkpoints.py): written, read and deleted by
#: whoever appends to a task's log (the commit of every round sequence writes one).
VIEWS = _top(checkpoint_prefix("run", "task", 1) + "head.json")
ARCHIVES = _top(archive_key("pipeline", "run", "task", "bundle"))  # archive: warc
#: Data profiles (crawl/quality_check.py): written by whoever finishes a crawl task, which
#: reads a sample of the task's items parts to build it.
PROFILES = _top(profile_object_key("pipeline", "run", "task"))


def load_prefix_pattern(template: str) -> str:
    """Object-key pattern covering every key an S3 load target's prefix template can yield.

    ``exports/{pipeline}/{run}/{task}/`` -> ``exports/*``; a template that starts with a
    placeholder covers the whole bucket (``*``).
    """
    return template.split("{", 1)[0] + "*"


def proxy_secrets(sources: Sequence[PipelineSource]) -> list[str]:
    """The Secrets Manager secrets (names or ARNs) the pipelines' crawl tasks name as
    ``proxy.secret``: what the fetch function may read (docs/pipelines.md, Requests)."""
    return sorted(
        {
            task.proxy.secret
            for source in sources
            for task in source.pipeline.tasks
            if isinstance(task, CrawlTask) and task.proxy is not None and task.proxy.secret
        }
    )


def _secret(scope: Construct, construct_id: str, name: str) -> secrets.ISecret:
    """A secret by ARN or by name (``from_secret_name_v2``: any version suffix)."""
    if name.startswith("arn:"):
        return secrets.Secret.from_secret_complete_arn(scope, construct_id, name)
    return secrets.Secret.from_secret_name_v2(scope, construct_id, name)


class WorkerAccess(Construct):
    """Applies the grants of the table above (a construct so imported tables have a scope)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workers: Workers,
        storage: Storage,
        queues: WorkQueues,
        machines: Sequence[sfn.IStateMachine],
        sources: Sequence[PipelineSource],
        sampling_rule: str,
        alert_secrets: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        table, bucket = storage.table, storage.bucket
        dispatch, fetch, parse = workers.dispatch, workers.fetch, workers.parse

        # dispatch: seeds the frontier, feeds, runs ETL stages, answers task tokens.
        table.grant_read_write_data(dispatch)
        self.dispatch_patterns = sorted(
            {ITEMS, QUARANTINE, LOG_SPILLS, VIEWS, PROFILES, *self._load_patterns(sources)}
        )
        for pattern in self.dispatch_patterns:
            bucket.grant_read_write(dispatch, pattern)  # includes s3:DeleteObject*
        queues.fetch.queue.grant_send_messages(dispatch)
        queues.control.queue.grant_send_messages(dispatch)
        for machine in machines:
            machine.grant_task_response(dispatch)
        self.load_tables = sorted({t for s in sources for t in s.load_tables()})
        for number, name in enumerate(self.load_tables):
            target = dynamodb.Table.from_table_name(self, f"LoadTable{number}", name)
            target.grant_write_data(dispatch)

        # fetch: writes large raw pages only; requeues retries; hands pages to parse.
        table.grant_read_write_data(fetch)
        bucket.grant_put(fetch, BODIES)
        queues.fetch.queue.grant_send_messages(fetch)
        queues.parse.queue.grant_send_messages(fetch)
        # fetch: the proxy secrets deployed crawl tasks name (proxy.secret), and no other;
        # their names travel in ENV_PROXY_SECRETS, the fetcher's allow-list.
        self.proxy_secrets = proxy_secrets(sources)
        if self.proxy_secrets:
            fetch.add_environment(ENV_PROXY_SECRETS, ",".join(self.proxy_secrets))
        for number, name in enumerate(self.proxy_secrets):
            _secret(self, f"ProxySecret{number}", name).grant_read(fetch)

        # parse: reads large raw pages, writes (and empties) item parts, feeds, finishes tasks.
        table.grant_read_write_data(parse)
        bucket.grant_read(parse, BODIES)
        bucket.grant_read(parse, ITEMS)  # a finishing task's profile samples its parts
        bucket.grant_put(parse, ITEMS)
        bucket.grant_delete(parse, ITEMS)
        bucket.grant_put(parse, PROFILES)
        bucket.grant_put(parse, ARCHIVES)  # archive: warc, one file per bundle
        bucket.grant_read(parse, LOG_SPILLS)
        bucket.grant_put(parse, LOG_SPILLS)
        bucket.grant_read_write(parse, VIEWS)  # includes s3:DeleteObject*
        queues.fetch.queue.grant_send_messages(parse)
        queues.control.queue.grant_send_messages(parse)
        for machine in machines:
            machine.grant_task_response(parse)

        self._grant_sweeper(workers.sweeper, storage, queues, machines)

        # scaler: reads the queues and the functions' metrics, sets the two mappings.
        scaler = workers.scaler
        table.grant_read_write_data(scaler)
        for queue in (queues.fetch.queue, queues.parse.queue):
            queue.grant(scaler, "sqs:GetQueueAttributes")
        iam.Grant.add_to_principal(
            grantee=scaler,
            actions=["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"],
            resource_arns=[
                workers.fetch_mapping.event_source_mapping_arn,
                workers.parse_mapping.event_source_mapping_arn,
            ],
        )
        iam.Grant.add_to_principal(
            grantee=scaler, actions=["cloudwatch:GetMetricStatistics"], resource_arns=["*"]
        )
        # Shedding: the rate of the stage's own sampling rule, and no other rule.
        iam.Grant.add_to_principal(
            grantee=scaler,
            actions=["xray:UpdateSamplingRule"],
            resource_arns=[
                Stack.of(self).format_arn(
                    service="xray", resource="sampling-rule", resource_name=sampling_rule
                )
            ],
        )

        # notify: its post records in the table, and the channel secrets it is configured with.
        notify = workers.notify
        table.grant(notify, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
        for number, name in enumerate(alert_secrets):
            if name.startswith(SSM_PREFIX):
                ssm.StringParameter.from_secure_string_parameter_attributes(
                    self, f"AlertParameter{number}", parameter_name=name[len(SSM_PREFIX) :]
                ).grant_read(notify)
            elif name.startswith("arn:"):
                secrets.Secret.from_secret_complete_arn(
                    self, f"AlertSecret{number}", name
                ).grant_read(notify)
            else:
                secrets.Secret.from_secret_name_v2(self, f"AlertSecret{number}", name).grant_read(
                    notify
                )

    @staticmethod
    def _grant_sweeper(
        sweeper: lambda_.IFunction,
        storage: Storage,
        queues: WorkQueues,
        machines: Sequence[sfn.IStateMachine],
    ) -> None:
        """Feeds starved shards, heartbeats running crawls, answers orphaned tokens."""
        storage.table.grant_read_write_data(sweeper)
        storage.bucket.grant_read(sweeper, LOG_SPILLS)  # the cost guard's drain appends
        storage.bucket.grant_put(sweeper, LOG_SPILLS)
        storage.bucket.grant_read_write(sweeper, VIEWS)  # the drain's commit may checkpoint
        storage.bucket.grant_read(sweeper, ITEMS)  # finishing a task: its data profile
        storage.bucket.grant_put(sweeper, PROFILES)
        queues.fetch.queue.grant_send_messages(sweeper)
        queues.control.queue.grant_send_messages(sweeper)
        # The stall watch (crawl/stalls.py) reads every crawl queue's depth; sending to
        # fetch (and render, infra/render.py) allows it there already.
        queues.parse.queue.grant(sweeper, "sqs:GetQueueAttributes")
        for machine in machines:
            machine.grant_task_response(sweeper)

    def _load_patterns(self, sources: Sequence[PipelineSource]) -> list[str]:
        patterns = []
        for source in sources:
            for task_id, target in source.s3_targets():
                if target.bucket is not None:
                    # The library refuses other buckets at run time; fail the synth instead.
                    Annotations.of(self).add_error(
                        f"pipeline {source.name} task {task_id}: loading into another bucket "
                        f"({target.bucket}) is not supported by the stack yet; leave bucket unset"
                    )
                    continue
                patterns.append(load_prefix_pattern(target.prefix))
        return patterns
