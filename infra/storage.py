"""The data: one DynamoDB table and one S3 bucket for everything stepcrawl keeps.

Both are retained when the stack is deleted (they hold crawl results); docs/deploy.md shows
how to delete them by hand. Their physical names are generated from the stack name, which
carries the stage, so stages coexist and a retained table never blocks a redeploy.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.queues import DLQ_RETENTION_DAYS, QUEUE_RETENTION_DAYS
from stepcrawl.crawl.checkpoints import checkpoint_prefix
from stepcrawl.crawl.tasklog import LOG_TTL, spill_key

__all__ = ["BODIES_EXPIRE_DAYS", "BODIES_PREFIX", "TTL_ATTRIBUTE", "Storage"]

#: The crawl engine writes this epoch-seconds attribute on items that may expire (ledgers).
TTL_ATTRIBUTE: Final = "expires_at"
#: Raw pages too large for a parse message (stepcrawl.crawl.paths.body_key); only parse reads
#: them, from the message that names them. That message may wait in the parse DLQ (14 days
#: from when it was first sent) and then, moved back, in the parse queue (4 days more): a
#: body outlives both, with a day to spare, so a bundle re-driven from the DLQ still reads it.
BODIES_PREFIX: Final = "bodies/"
BODIES_EXPIRE_DAYS: Final = DLQ_RETENTION_DAYS + QUEUE_RETENTION_DAYS + 1
#: Task log payloads too big for a table item (crawl/tasklog.py): kept as long as the entries.
LOG_SPILLS_PREFIX: Final = spill_key("run", "task", "name").split("/", 1)[0] + "/"
#: Checkpoints of task logs' views (crawl/checkpoints.py): kept as long as the logs.
VIEWS_PREFIX: Final = checkpoint_prefix("run", "task", 1).split("/", 1)[0] + "/"


class Storage(Construct):
    """``table`` (pk/sk, typed key prefixes, TTL) and ``bucket`` (bodies, items, exports)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # The AWS managed key (aws/dynamodb): encryption visible in the template and in
            # CloudTrail, no key to administer, no monthly key fee.
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-raw-bodies",
                    prefix=BODIES_PREFIX,
                    expiration=Duration.days(BODIES_EXPIRE_DAYS),
                ),
                s3.LifecycleRule(
                    id="expire-log-spills",
                    prefix=LOG_SPILLS_PREFIX,
                    expiration=Duration.days(LOG_TTL // 86400),  # with the entries naming them
                ),
                s3.LifecycleRule(
                    id="expire-log-checkpoints",
                    prefix=VIEWS_PREFIX,
                    expiration=Duration.days(LOG_TTL // 86400),  # with the logs they stand for
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
