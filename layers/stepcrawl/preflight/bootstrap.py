"""CDK bootstrap: the version parameter the stack's template checks, the toolkit stack, and
(when the render image is built) the image repository the bootstrap creates.

The stack uses the default synthesizer, whose template carries a ``CheckBootstrapVersion``
rule reading ``/cdk-bootstrap/<qualifier>/version``: a deploy into an environment without it,
or with an older version, fails before anything is created.
"""

from __future__ import annotations

from typing import Final

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.model import (
    DEFAULT_QUALIFIER,
    CheckResult,
    Refusal,
    RefusalKind,
    StackSettings,
    Status,
    Target,
    could_not_check,
)
from stepcrawl.preflight.verdicts import Finding, fold

__all__ = [
    "BOOTSTRAP_CHECK",
    "REQUIRED_BOOTSTRAP_VERSION",
    "TOOLKIT_STACK",
    "check_bootstrap",
    "image_repository",
    "version_parameter",
]

BOOTSTRAP_CHECK: Final = "cdk bootstrap"
#: ``MIN_BOOTSTRAP_STACK_VERSION`` of aws-cdk-lib 2.275's default synthesizer (the stack does
#: no lookups, which would need 8): its template's rule refuses versions 1-5.
REQUIRED_BOOTSTRAP_VERSION: Final = 6
#: The stack ``cdk bootstrap`` creates unless told ``--toolkit-stack-name``.
TOOLKIT_STACK: Final = "CDKToolkit"
_USABLE: Final = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"})


def version_parameter(qualifier: str) -> str:
    return f"/cdk-bootstrap/{qualifier}/version"


def image_repository(qualifier: str, target: Target) -> str:
    """The bootstrap's ECR repository, where ``cdk deploy`` pushes image assets."""
    return f"cdk-{qualifier}-container-assets-{target.account}-{target.region}"


def bootstrap_command(settings: StackSettings, target: Target) -> str:
    qualifier = settings.bootstrap_qualifier
    option = "" if qualifier == DEFAULT_QUALIFIER else f" --qualifier {qualifier}"
    return f"npx cdk bootstrap --no-notices{option} {target.environment}"


def check_bootstrap(account: AwsAccount, target: Target, settings: StackSettings) -> CheckResult:
    """The environment is bootstrapped, recently enough, and its toolkit stack is usable."""
    fix = bootstrap_command(settings, target)
    parameter = version_parameter(settings.bootstrap_qualifier)
    answer = account.ask("ssm", "get_parameter", Name=parameter)
    if isinstance(answer, Refusal):
        if answer.kind is RefusalKind.missing:
            return CheckResult(
                BOOTSTRAP_CHECK,
                Status.fail,
                f"{target.environment} is not bootstrapped: no SSM parameter {parameter}",
                fix,
            )
        return could_not_check(BOOTSTRAP_CHECK, answer)
    value = str(answer["Parameter"]["Value"])
    if not value.isdigit() or int(value) < REQUIRED_BOOTSTRAP_VERSION:
        return CheckResult(
            BOOTSTRAP_CHECK,
            Status.fail,
            f"bootstrap version {value} ({parameter}); the stack needs "
            f"{REQUIRED_BOOTSTRAP_VERSION} or later",
            f"{fix} (the project's CLI, from npm ci, upgrades it)",
        )
    findings = [Finding(Status.ok, f"version {value} ({parameter})")]
    findings.append(_toolkit_stack(account, fix))
    if settings.renders_pages:
        findings.append(_image_repository(account, settings, target, fix))
    return fold(BOOTSTRAP_CHECK, findings)


def _toolkit_stack(account: AwsAccount, fix: str) -> Finding:
    answer = account.ask("cloudformation", "describe_stacks", StackName=TOOLKIT_STACK)
    if isinstance(answer, Refusal):
        if answer.kind is RefusalKind.missing:
            # The parameter is what a deploy checks; a toolkit stack of another name is fine.
            return Finding(
                Status.ok, f"no {TOOLKIT_STACK} stack (bootstrapped under another name?)"
            )
        return Finding(Status.ok, f"{TOOLKIT_STACK} not read ({answer.permission}: {answer.kind})")
    status = str(answer["Stacks"][0]["StackStatus"])
    if status in _USABLE:
        return Finding(Status.ok, f"{TOOLKIT_STACK} {status}")
    if status.endswith("_IN_PROGRESS"):
        return Finding(
            Status.warn, f"{TOOLKIT_STACK} is {status}", "wait for it to finish, then run again"
        )
    if status == "UPDATE_ROLLBACK_COMPLETE":
        return Finding(
            Status.warn, f"{TOOLKIT_STACK} is {status}: its last update was rolled back", fix
        )
    return Finding(
        Status.fail,
        f"{TOOLKIT_STACK} is {status}",
        f"aws cloudformation delete-stack --stack-name {TOOLKIT_STACK}, then {fix}",
    )


def _image_repository(
    account: AwsAccount, settings: StackSettings, target: Target, fix: str
) -> Finding:
    name = image_repository(settings.bootstrap_qualifier, target)
    answer = account.ask("ecr", "describe_repositories", repositoryNames=[name])
    if not isinstance(answer, Refusal):
        return Finding(Status.ok, f"image repository {name}")
    if answer.kind is RefusalKind.missing:
        return Finding(
            Status.fail, f"no image repository {name} (the render image is pushed there)", fix
        )
    return Finding(
        Status.warn, f"image repository {name} not read ({answer.permission}: {answer.kind})"
    )
