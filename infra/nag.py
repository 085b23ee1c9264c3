"""cdk-nag (AwsSolutionsChecks) findings that were reviewed and accepted, each with its reason.

cdk-nag 3 runs as a CDK validation plugin: any finding not acknowledged here fails the synth
(``cdk synth``, ``cdk deploy`` and the tests alike). Acknowledgments (``Validations.of(...)
.acknowledge``, v3's replacement of ``NagSuppressions``) are placed on the narrowest construct
and name the exact finding (``AwsSolutions-IAM5[Resource::...]``), so a new wildcard anywhere
else still fails.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnElement, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from infra.access import BODIES, ITEMS
from infra.pipelines import OWN_EXECUTION_ACTIONS, integrations, state_machine_name
from infra.stack import StepcrawlStack

__all__ = ["acknowledge_reviewed_findings"]

PACK = "AwsSolutions"

XRAY_REASON = (
    "xray:PutTraceSegments and xray:PutTelemetryRecords (added by active tracing) do not "
    "support resource-level permissions; AWS requires Resource '*'."
)
SCALER_REASON = (
    XRAY_REASON + " cloudwatch:GetMetricStatistics has no resource-level permission either: "
    "the scaler reads the functions' metrics with it (its Lambda actions are scoped to the "
    "two event source mappings)."
)
SFN_SERVICE_REASON = (
    "Added by CDK for the state machine's logging and tracing: the CloudWatch Logs delivery "
    "actions (logs:CreateLogDelivery, ...) and the X-Ray actions do not support resource-level "
    "permissions; AWS documents Resource '*' for both."
)
S3_ACTION_REASON = (
    "Action groups of the CDK grant_* methods (the stack grants only through them); every one "
    "is limited to object-key prefixes of the stack's own bucket (infra/access.py)."
)
PREFIX_REASON = (
    "Objects under one key prefix of the stack's own bucket, the prefix this worker's keys are "
    "built under by stepcrawl.crawl.paths (see the table in infra/access.py)."
)
OWN_EXECUTIONS_REASON = (
    "The run lock describes (and for overlap=replace stops) the previous run of this same "
    "state machine; the ARN is limited to this machine's executions (execution:<name>:*)."
)


def _ack(scope: IConstruct, finding: str, reason: str) -> None:
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{PACK}-{finding}", reason=reason))


def _policy(role: iam.IRole | None) -> IConstruct:
    assert isinstance(role, iam.Role), "every role here is created by the stack"
    policy = role.node.try_find_child("DefaultPolicy")
    assert policy is not None, f"{role.node.path} has no default policy"
    return policy


def acknowledge_reviewed_findings(stack: StepcrawlStack) -> None:
    """Acknowledge the accepted findings of ``stack`` (see each reason)."""
    Validations.of(stack.storage.bucket).acknowledge(
        Acknowledgment(
            id=f"{PACK}::{PACK}-S1",
            reason=(
                "Server access logs would need a second bucket and bill a log object per "
                "request of a crawler that writes many objects; the bucket is private (public "
                "access blocked, TLS only) and written only by the stack's roles. Enable "
                "CloudTrail S3 data events where an audit trail is required."
            ),
        )
    )
    workers = stack.workers
    for function in (
        workers.dispatch,
        workers.fetch,
        workers.parse,
        workers.sweeper,
        workers.scaler,
        workers.notify,
    ):
        Validations.of(function).acknowledge(
            Acknowledgment(
                id=f"{PACK}::{PACK}-L1",
                reason=(
                    "Python 3.12 on purpose: the library layer is built from cp312 "
                    "manylinux aarch64 wheels (infra/bundling.py); moving to a newer runtime "
                    "is a deliberate change of LAMBDA_PYTHON and the runtime together."
                ),
            )
        )
        reason = XRAY_REASON if function is not workers.scaler else SCALER_REASON
        _ack(_policy(function.role), "IAM5[Resource::*]", reason)

    # The scheduler's role for the sweeper and the scaler is a stack-level singleton of the L2
    # target; the acknowledgment sits on the stack but names the exact findings (their ARNs).
    for name, scheduled in (("sweeper", workers.sweeper), ("scaler", workers.scaler)):
        cfn = scheduled.node.default_child
        assert isinstance(cfn, CfnElement)
        _ack(
            stack,
            f"IAM5[Resource::<{stack.resolve(stack.get_logical_id(cfn))}.Arn>:*]",
            f"lambda:InvokeFunction for the {name}'s schedule: the LambdaInvoke target grants "
            "the function and its versions/aliases (<arn>:*); one function, nothing else.",
        )

    bucket_resource = stack.storage.bucket.node.default_child
    assert isinstance(bucket_resource, CfnElement)
    bucket = stack.resolve(stack.get_logical_id(bucket_resource))
    worker_prefixes = {
        stack.workers.dispatch: stack.access.dispatch_patterns,
        stack.workers.fetch: [BODIES],
        stack.workers.parse: sorted({BODIES, ITEMS}),
    }
    actions = {
        stack.workers.dispatch: ["Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"],
        stack.workers.fetch: ["Abort*"],
        stack.workers.parse: ["Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"],
    }
    for function, patterns in worker_prefixes.items():
        policy = _policy(function.role)
        for pattern in patterns:
            _ack(policy, f"IAM5[Resource::<{bucket}.Arn>/{pattern}]", PREFIX_REASON)
        for action in actions[function]:
            _ack(policy, f"IAM5[Action::s3:{action}]", S3_ACTION_REASON)

    for name, machine in stack.pipelines.machines.items():
        policy = _policy(machine.state_machine.role)
        _ack(policy, "IAM5[Resource::*]", SFN_SERVICE_REASON)
        if integrations(machine.source.definition) & OWN_EXECUTION_ACTIONS.keys():
            arn = (
                "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
                f"{state_machine_name(stack.config, name)}:*"
            )
            _ack(policy, f"IAM5[Resource::{arn}]", OWN_EXECUTIONS_REASON)
