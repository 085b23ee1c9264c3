"""cdk-nag (AwsSolutionsChecks) findings that were reviewed and accepted, each with its reason.

cdk-nag 3 runs as a CDK validation plugin: any finding not acknowledged here fails the synth
(``cdk synth``, ``cdk deploy`` and the tests alike). Acknowledgments (``Validations.of(...)
.acknowledge``, v3's replacement of ``NagSuppressions``) are placed on the narrowest construct
and name the exact finding (``AwsSolutions-IAM5[Resource::...]``), so a new wildcard anywhere
else still fails.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnElement, DefaultStackSynthesizer, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

from infra.access import ARCHIVES, BODIES, ITEMS, LOG_SPILLS, PROFILES, VIEWS
from infra.console import Console
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
ALERT_KEY_REASON = (
    "Added by the alert topic's grant_publish: publishing to a topic under a customer managed "
    "key needs kms:GenerateDataKey* (AWS's SNS encryption docs); limited to that one key."
)
PREFIX_REASON = (
    "Objects under one key prefix of the stack's own bucket, the prefix this worker's keys are "
    "built under by stepcrawl.crawl.paths (see the table in infra/access.py)."
)
RUNTIME_REASON = (
    "Python 3.12 on purpose: the library layer is built from cp312 manylinux aarch64 wheels "
    "(infra/bundling.py); moving to a newer runtime is a deliberate change of LAMBDA_PYTHON and "
    "the runtime together."
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
        _ack(function, "L1", RUNTIME_REASON)
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
        stack.workers.parse: sorted({ARCHIVES, BODIES, ITEMS, LOG_SPILLS, PROFILES, VIEWS}),
        stack.workers.sweeper: sorted({ITEMS, LOG_SPILLS, PROFILES, VIEWS}),
    }
    actions = {
        stack.workers.dispatch: ["Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"],
        stack.workers.fetch: ["Abort*"],
        stack.workers.parse: ["Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"],
        stack.workers.sweeper: ["Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"],
    }
    for function, patterns in worker_prefixes.items():
        policy = _policy(function.role)
        if function is not stack.workers.fetch:  # it finishes crawl tasks: their alerts
            _ack(policy, "IAM5[Action::kms:GenerateDataKey*]", ALERT_KEY_REASON)
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

    if stack.render is not None:  # render: browser (infra/render.py): the fetch function's grants
        policy = _policy(stack.render.role)
        _ack(policy, "IAM5[Resource::*]", XRAY_REASON)
        _ack(policy, f"IAM5[Resource::<{bucket}.Arn>/{BODIES}]", PREFIX_REASON)
        _ack(policy, "IAM5[Action::s3:Abort*]", S3_ACTION_REASON)

    if stack.console is not None:
        _console(stack, stack.console)


def _console(stack: StepcrawlStack, console: Console) -> None:
    """The console's findings (context ``console``; infra/console.py)."""
    _console_page(console)
    _console_function(stack, console)
    _console_deployment(stack, console)


def _console_page(console: Console) -> None:
    """The page's bucket and the distribution in front of it and of the API."""
    _ack(
        console.bucket,
        "S1",
        "Holds only the console's built page and config.json, written by the stack's "
        "deployment; private (public access blocked, TLS only) and read only by the console's "
        "distribution through Origin Access Control. Server access logs would need a log bucket "
        "the stack does not keep (as for the data bucket); the HTTP API's access log records "
        "every request that reads or changes data.",
    )
    distribution = console.distribution
    _ack(
        distribution,
        "CFR1",
        "A team console, used from wherever its users are: they are created by an "
        "administrator, sign in with TOTP MFA, and every API request needs their JWT.",
    )
    _ack(
        distribution,
        "CFR2",
        "A web ACL bills per month, ACL and rule; the page is static files, every API route "
        "needs a Cognito JWT, the API stage is throttled (infra/console.py THROTTLE) and "
        "Cognito's threat protection (Plus plan) guards the sign-in.",
    )
    _ack(
        distribution,
        "CFR3",
        "Standard logging needs an ACL-enabled log bucket the stack does not keep; behind the "
        "distribution are the public page files (no data) and the HTTP API, whose access log "
        "records every request with the signed-in user, route and status.",
    )
    _ack(
        distribution,
        "CFR4",
        "The distribution has no custom domain, so it uses the default *.cloudfront.net "
        "certificate, with which CloudFront accepts TLSv1 whatever the security policy. A custom "
        "domain with an ACM certificate and TLSv1.2_2021 removes this; the stack does not "
        "manage domains.",
    )


def _console_function(stack: StepcrawlStack, console: Console) -> None:
    """The API's function: its runtime and the wildcards of its grants."""
    function = console.function.function
    _ack(function, "L1", RUNTIME_REASON)
    policy = _policy(function.role)
    _ack(
        policy,
        "IAM5[Resource::*]",
        XRAY_REASON + " lambda:ListEventSourceMappings has no resource-level permission "
        "either: the topology reads a queue's consumer concurrency from its mapping (read only, "
        "configuration, no data).",
    )
    bucket_resource = stack.storage.bucket.node.default_child
    assert isinstance(bucket_resource, CfnElement)
    bucket = stack.resolve(stack.get_logical_id(bucket_resource))
    for prefix in (PROFILES, LOG_SPILLS, VIEWS):
        _ack(policy, f"IAM5[Resource::<{bucket}.Arn>/{prefix}]", PREFIX_REASON)
    for name in stack.pipelines.machines:
        arn = (
            "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
            f"{state_machine_name(stack.config, name)}:*"
        )
        _ack(
            policy,
            f"IAM5[Resource::{arn}]",
            "The console shows, follows and cancels runs: DescribeExecution, "
            "DescribeStateMachineForExecution, GetExecutionHistory and StopExecution take an "
            "execution ARN, here limited to the executions of this stage's own state machine "
            "(execution:<name>:*).",
        )


def _console_deployment(stack: StepcrawlStack, console: Console) -> None:
    """CDK's BucketDeployment, which copies the page at deploy time: its handler (a singleton
    function of the stack) and the grants it gives the role we hand it (infra/console.py
    DeployRole)."""
    handlers = [
        child
        for child in Stack.of(console).node.children
        if isinstance(child, lambda_.Function)
        and child.node.id.startswith("Custom::CDKBucketDeployment")
    ]
    assert len(handlers) == 1, [h.node.path for h in handlers]
    _ack(
        handlers[0],
        "L1",
        "The handler of CDK's BucketDeployment: aws-cdk-lib picks its runtime (and moves it "
        "with the library); it runs only while `cdk deploy` copies the console's page.",
    )
    deployer = _policy(console.deploy_role)
    deploy_reason = (
        "Granted by CDK's BucketDeployment to the deployment's own role (used only during "
        "`cdk deploy`): "
    )
    _ack(
        deployer,
        "IAM5[Resource::*]",
        deploy_reason + "cloudfront:CreateInvalidation/GetInvalidation, to invalidate the "
        "console's distribution after copying a new page.",
    )
    for action in ("Abort*", "DeleteObject*", "GetBucket*", "GetObject*", "List*"):
        _ack(
            deployer,
            f"IAM5[Action::s3:{action}]",
            deploy_reason + "the action groups of its grant_read (the asset bucket) and "
            "grant_read_write (the console's own bucket, which it syncs and prunes).",
        )
    qualifier = (
        stack.node.try_get_context("@aws-cdk/core:bootstrapQualifier")
        or DefaultStackSynthesizer.DEFAULT_QUALIFIER
    )
    _ack(
        deployer,
        f"IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-{qualifier}-assets-<AWS::AccountId>-"
        "<AWS::Region>/*]",
        deploy_reason + "the CDK bootstrap asset bucket, where the CLI uploaded the zipped "
        "page that the deployment reads.",
    )
    assets = console.bucket.node.default_child
    assert isinstance(assets, CfnElement)
    _ack(
        deployer,
        f"IAM5[Resource::<{stack.resolve(stack.get_logical_id(assets))}.Arn>/*]",
        deploy_reason + "every object of the console's own bucket: the page is synced (and "
        "stale files pruned) as a whole.",
    )
