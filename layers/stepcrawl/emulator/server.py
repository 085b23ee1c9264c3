"""The embedded AWS of local mode: moto on 127.0.0.1, with the stack's own resources.

The CloudFormation template that ``cdk synth`` produces is deployed into moto, so local mode
has no second, hand-kept list of resources. moto needs a few fix-ups (each met in practice;
docs/architecture.md, "moto, made faithful where we rely on it"): no bootstrap version
parameter or rules, no ``Custom::`` resources; asset objects must exist (empty zips stand in:
the functions run in-process); and state machines created by CloudFormation land in moto's
non-executing backend, so they are re-created, with the same names and definitions, once
execution is switched on.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import time
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

from stepcrawl.compiler import substitute
from stepcrawl.emulator.in_process import serve_in_process, stop_serving_in_process
from stepcrawl.emulator.moto_iam import Identity, admin_identity, enforcing, role_identity
from stepcrawl.emulator.moto_patches import apply_moto_patches
from stepcrawl.emulator.template import TemplateResolver, references
from stepcrawl.errors import ConfigError

__all__ = ["EAGER_APPS", "DeployedStack", "Emulator", "moto_ready_template"]

ACCOUNT = "123456789012"
LOCAL_CREDENTIAL = "local"  # the deployment's, before IAM is enforced; not a secret
REGION = "us-east-1"
# moto cannot create these through CloudFormation. Schedules are played by local mode itself,
# from the template's own expressions (emulator/scheduler.py). ``Custom::`` resources are run by
# Lambda providers that moto would start in Docker (the stack has none today). moto's
# CloudFormation skips alarms but then refuses the template where anything (the dashboard, a
# composite alarm's rule) refers to one; local mode creates and evaluates them itself
# (emulator/alarms.py).
_DROPPED_PREFIXES = (
    "Custom::",
    "AWS::Scheduler::",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::CompositeAlarm",
)
#: Services whose app moto's server makes before the run instead of on their first request.
#: The server makes an app under the lock every request takes; X-Ray's imports the X-Ray SDK,
#: which builds a botocore client: ~0.9 s during which the server answered nothing, landing
#: in the middle of a crawl at the scaler's first sampling-rule call (docs/performance.md,
#: "Stalls at the start").
EAGER_APPS = ("xray",)


def moto_ready_template(template: dict[str, Any]) -> dict[str, Any]:
    """The template with what moto cannot create removed (a copy)."""
    fixed = copy.deepcopy(template)
    fixed.get("Parameters", {}).pop("BootstrapVersion", None)
    fixed.pop("Rules", None)
    resources = fixed["Resources"]
    for resource in resources.values():
        if resource["Type"] == "AWS::Lambda::EventSourceMapping":
            # An enabled mapping makes moto invoke functions itself (in Docker, which is not
            # here); the local Lambda runtime polls the queues instead.
            resource["Properties"]["Enabled"] = False
    dropped = {n for n, r in resources.items() if r["Type"].startswith(_DROPPED_PREFIXES)}
    for name in dropped:
        del resources[name]
    for resource in resources.values():
        _trust_without_conditions_on(resource, dropped)
    # Whatever still points at a dropped resource (a policy granting it, a DependsOn) goes too.
    while True:
        dangling = {n for n, r in resources.items() if _refers_to(r, dropped)}
        if not dangling:
            return fixed
        for name in dangling:
            del resources[name]
        dropped |= dangling


def _make_apps(server: Any, services: tuple[str, ...]) -> None:
    """Have moto's server make the apps of ``services`` now (werkzeug's server keeps the WSGI
    app, moto's ``DomainDispatcherApplication``, as ``app``)."""
    dispatcher = server._server.app  # moto keeps its werkzeug server private
    with dispatcher.lock:
        for service in services:
            if service not in dispatcher.app_instances:
                dispatcher.app_instances[service] = dispatcher.create_app(service)


def _trust_without_conditions_on(resource: dict[str, Any], names: set[str]) -> None:
    """A role's trust conditions naming a dropped resource, taken out: the schedules' roles
    trust the scheduler on condition of their schedule group's ARN (``aws:SourceArn``), and
    the role would go with the group. moto does not evaluate those conditions anyway
    (docs/local.md, "IAM"); the role, its grants and its trust of the service stay."""
    if resource.get("Type") != "AWS::IAM::Role":
        return
    document = resource.get("Properties", {}).get("AssumeRolePolicyDocument", {})
    for statement in document.get("Statement", []):
        if "Condition" in statement and references(statement["Condition"]) & names:
            del statement["Condition"]


def _refers_to(resource: Mapping[str, Any], names: set[str]) -> bool:
    """Whether ``resource`` names one of ``names``: in an intrinsic function anywhere in it, or
    in its ``DependsOn``."""
    depends_on = resource.get("DependsOn", [])
    depends = {depends_on} if isinstance(depends_on, str) else set(depends_on)
    return bool((references(resource) | depends) & names)


def _assets(template: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(bucket, key) of every code asset the template's functions and layers point at."""
    # Read before the deployment: the CDK's bucket is a Fn::Sub of the account and region.
    resolve = TemplateResolver(template, account=ACCOUNT, region=REGION)
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        code = props.get("Code") or props.get("Content")
        if not isinstance(code, dict) or "S3Key" not in code:
            continue
        yield resolve.text(code["S3Bucket"]), resolve.text(code["S3Key"])


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "stand-in: local mode runs the handlers in-process\n")
    return buffer.getvalue()


@dataclass
class DeployedStack:
    """What a deployment exposes: its outputs and the functions' configuration."""

    outputs: dict[str, str]
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    mappings: list[dict[str, Any]] = field(default_factory=list)
    state_machines: dict[str, str] = field(default_factory=dict)
    #: Logical id -> physical id (name, URL or ARN) of every resource moto created.
    resources: dict[str, str] = field(default_factory=dict)


class Emulator:
    """A ThreadedMotoServer with the stack deployed; use as a context manager.

    The server is for other processes (the aws CLI, ``stepcrawl status`` against ``serve``);
    this process's clients reach the same backends in-process (:mod:`.in_process`).
    """

    def __init__(
        self,
        template: dict[str, Any],
        *,
        stack_name: str = "stepcrawl-local",
        enforce_iam: bool = True,
    ) -> None:
        self.template = template
        self.stack_name = stack_name
        self.enforce_iam = enforce_iam
        self.endpoint = ""
        self.stack: DeployedStack | None = None
        #: The local administrator's key (the CLI's, the runtime's, the tests'), once deployed.
        self.admin: Identity | None = None
        self._server: Any = None
        self._port = 0
        self._enforcing = contextlib.ExitStack()

    def client(self, service: str, identity: Identity | None = None) -> Any:
        """A client of this cloud, signed by ``identity`` (default: the administrator)."""
        identity = identity or self.admin
        credentials = (
            identity.client_arguments()
            if identity is not None
            else {"aws_access_key_id": LOCAL_CREDENTIAL, "aws_secret_access_key": LOCAL_CREDENTIAL}
        )
        return boto3.client(  # type: ignore[call-overload]
            service, endpoint_url=self.endpoint, region_name=REGION, **credentials
        )

    def role_identity(self, role_arn: str, service: str, session: str) -> Identity:
        """A session of ``role_arn``, as ``service`` (``lambda.amazonaws.com``...) assumes it."""
        return role_identity(ACCOUNT, role_arn, service, session)

    def start(self) -> DeployedStack:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 - local mode only

        apply_moto_patches()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        self._server.start()
        _make_apps(self._server, EAGER_APPS)
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self._port = int(port)
        # This process's clients reach the same backends without HTTP; the server stays up
        # for the aws CLI and other processes (emulator/in_process.py).
        serve_in_process(self._port)
        # Step Functions' service integrations inside the server call back into it.
        os.environ["MOTO_PORT"] = str(port)
        self._configure(execute=False)
        template = moto_ready_template(self.template)
        s3 = self.client("s3")
        for bucket, key in _assets(template):
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key=key, Body=_empty_zip())
        self.stack = self._deploy(template)
        machines = self._read_state_machines()
        self._configure(execute=True)
        self._recreate_state_machines(machines)
        # From here on every request is signed by an identity moto issued and allowed by its
        # policies, as on AWS (emulator/moto_iam.py); the deployment above was the account
        # owner's.
        self.admin = admin_identity(ACCOUNT)
        if self.enforce_iam:
            self._enforcing.enter_context(enforcing())
        return self.stack

    def _configure(self, *, execute: bool) -> None:
        body = json.dumps({"stepfunctions": {"execute_state_machine": execute}}).encode()
        self._moto_api("config", body)

    def _moto_api(self, path: str, body: bytes = b"") -> None:
        request = urllib.request.Request(  # noqa: S310 - our own server on 127.0.0.1
            f"{self.endpoint}/moto-api/{path}", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def _deploy(self, template: dict[str, Any]) -> DeployedStack:
        cfn = self.client("cloudformation")
        cfn.create_stack(
            StackName=self.stack_name,
            TemplateBody=json.dumps(template),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
        )
        deadline = time.monotonic() + 60
        while True:
            stack = cfn.describe_stacks(StackName=self.stack_name)["Stacks"][0]
            if not stack["StackStatus"].endswith("IN_PROGRESS"):
                break
            if time.monotonic() > deadline:
                raise ConfigError("the local stack did not finish deploying in 60 s")
            time.sleep(0.1)
        if stack["StackStatus"] != "CREATE_COMPLETE":
            raise ConfigError(f"the local stack failed: {stack['StackStatus']}")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        lam = self.client("lambda")
        functions = {f["FunctionName"]: f for f in lam.list_functions()["Functions"]}
        mappings = lam.list_event_source_mappings()["EventSourceMappings"]
        return DeployedStack(outputs=outputs, functions=functions, mappings=mappings)

    def _read_state_machines(self) -> list[dict[str, Any]]:
        # Only visible while execution is off: CloudFormation put them in that backend.
        sfn = self.client("stepfunctions")
        return [
            sfn.describe_state_machine(stateMachineArn=m["stateMachineArn"])
            for m in sfn.list_state_machines()["stateMachines"]
        ]

    def _recreate_state_machines(self, machines: list[dict[str, Any]]) -> None:
        assert self.stack is not None
        sfn = self.client("stepfunctions")
        resources = self.client("cloudformation").describe_stack_resources(
            StackName=self.stack_name
        )["StackResources"]
        physical = self.stack.resources = {
            r["LogicalResourceId"]: r["PhysicalResourceId"]
            for r in resources
            if "LogicalResourceId" in r and "PhysicalResourceId" in r
        }
        resolve = TemplateResolver(
            self.template, physical, account=ACCOUNT, region=REGION, stack_name=self.stack_name
        )
        substitutions = {
            str(r["Properties"]["StateMachineName"]): r["Properties"].get(
                "DefinitionSubstitutions", {}
            )
            for r in self.template["Resources"].values()
            if r["Type"] == "AWS::StepFunctions::StateMachine"
        }
        for described in machines:
            # moto's CloudFormation ignores DefinitionSubstitutions: fill them as AWS would.
            values = {
                name: resolve.text(value)
                for name, value in substitutions.get(described["name"], {}).items()
            }
            definition = substitute(json.loads(described["definition"]), values)
            created = sfn.create_state_machine(
                name=described["name"],
                definition=json.dumps(definition),
                roleArn=described["roleArn"],
            )
            self.stack.state_machines[described["name"]] = created["stateMachineArn"]

    # -- what moto keeps but no API of it answers (emulator/alarms.py) ------------------------

    def oldest_message_ages(self, now: float) -> dict[str, float]:
        """Queue name -> seconds since its oldest message not deleted was sent: what SQS
        publishes as ``ApproximateAgeOfOldestMessage`` (0 for an empty queue)."""
        from moto.sqs.models import sqs_backends  # noqa: PLC0415 - local mode only

        ages: dict[str, float] = {}
        for name, queue in dict(sqs_backends[ACCOUNT][REGION].queues).items():
            messages: list[Any] = list(queue._messages)  # private: no API has the age
            sent = [float(m.sent_timestamp) / 1000 for m in messages if m.sent_timestamp]
            ages[name] = max(0.0, now - min(sent)) if sent else 0.0
        return ages

    def put_composite_alarm(self, name: str, rule: str, **settings: Any) -> None:
        """Store a composite alarm (``description``, ``alarm_actions``, ``ok_actions``,
        ``insufficient_data_actions``), so ``describe-alarms`` lists it: moto's backend keeps
        composites, but its API has no ``PutCompositeAlarm``."""
        from moto.cloudwatch.models import cloudwatch_backends  # noqa: PLC0415

        backend: Any = cloudwatch_backends[ACCOUNT][REGION]
        backend.put_metric_alarm(
            name=name,
            namespace=None,
            metric_name=None,
            comparison_operator=None,
            evaluation_periods=None,
            period=None,
            threshold=None,
            statistic=None,
            dimensions=[],
            rule=rule,
            **settings,
        )

    def stop(self) -> None:
        self._enforcing.close()
        self.admin = None
        if self._server is not None:
            # moto keeps its state in the process, not in the server: without a reset, the
            # next emulator of this process would find this one's stack and resources.
            with contextlib.suppress(OSError):
                self._moto_api("reset")
            stop_serving_in_process(self._port)
            self._server.stop()
            self._server = None

    def __enter__(self) -> Emulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
