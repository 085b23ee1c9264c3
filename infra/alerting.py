"""Where alerts go: one encrypted SNS topic for the stage, fed by alarms and by run failures.

CloudWatch alarms (:mod:`infra.alarms`) publish their state changes to the topic, and an
EventBridge rule publishes the stage's Step Functions executions that end FAILED, TIMED_OUT or
ABORTED, and the functions that finish crawl tasks publish their data-quality checks that
changed state; the notify function (docs/alerts.md) turns each into one chat message. The topic is
encrypted with a key of its own: CloudWatch and EventBridge cannot publish to a topic under
the AWS-managed SNS key, whose policy does not let them use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stepcrawl.names import ENV_ALERT_TOPIC_ARN

__all__ = ["FAILED_STATUSES", "AlertTopic"]

#: Execution statuses that page someone (SUCCEEDED and RUNNING do not).
FAILED_STATUSES: Final = ("FAILED", "TIMED_OUT", "ABORTED")


class AlertTopic(Construct):
    """``topic`` (KMS-encrypted, TLS only), the notifier subscribed to it, the rule
    sending failed runs to it, and the functions that finish crawl tasks allowed to publish
    their data-quality alerts to it (``finishers``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        machines: Sequence[sfn.IStateMachine],
        notifier: lambda_.IFunction,
        finishers: Sequence[lambda_.Function] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description=f"{prefix} alerts topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.topic = sns.Topic(
            self, "Topic", display_name=f"{prefix} alerts", master_key=self.key, enforce_ssl=True
        )
        self.topic.add_subscription(subscriptions.LambdaSubscription(notifier))
        for service in ("cloudwatch.amazonaws.com", "events.amazonaws.com"):
            principal = iam.ServicePrincipal(service)
            self.key.grant(principal, "kms:Decrypt", "kms:GenerateDataKey*")
            self.topic.grant_publish(principal)
        for finisher in finishers:
            # Finishing crawl tasks publish their data-quality checks (crawl/quality_check.py);
            # grant_publish covers the topic key's kms:Decrypt / GenerateDataKey* too.
            self.topic.grant_publish(finisher)
            finisher.add_environment(ENV_ALERT_TOPIC_ARN, self.topic.topic_arn)
        self.failed_runs: events.Rule | None = None
        if machines:
            self.failed_runs = events.Rule(
                self,
                "FailedRuns",
                description=f"{prefix}: runs that failed, timed out or were aborted",
                event_pattern=events.EventPattern(
                    source=["aws.states"],
                    detail_type=["Step Functions Execution Status Change"],
                    detail={
                        "status": list(FAILED_STATUSES),
                        "stateMachineArn": [m.state_machine_arn for m in machines],
                    },
                ),
                targets=[targets.SnsTopic(self.topic)],
            )
