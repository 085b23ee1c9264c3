"""What the checks take and give: the stack's settings, the account, a check's result.

Plain data, no AWS SDK: the checks build results from these, the command line prints them,
and the tests construct them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "DEFAULT_QUALIFIER",
    "CheckResult",
    "QueueMapping",
    "Refusal",
    "RefusalKind",
    "StackSettings",
    "Status",
    "Target",
    "could_not_check",
]

#: The default synthesizer's qualifier (``DefaultStackSynthesizer.DEFAULT_QUALIFIER``); the
#: context key ``@aws-cdk/core:bootstrapQualifier`` changes it, as in infra/nag.py.
DEFAULT_QUALIFIER: Final = "hnb659fds"


class Status(StrEnum):
    """ok: ready for a deploy; warn: could not be verified, or works with a caveat;
    fail: the deploy, or the deployed stack, will not work until it is fixed."""

    ok = "ok"
    warn = "warn"
    fail = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: what it found, and, unless ok, what to do about it."""

    name: str
    status: Status
    found: str
    #: The command to run or the setting to change (None when there is nothing to do).
    fix: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "check": self.name,
            "status": self.status.value,
            "found": self.found,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Target:
    """The account and region a deploy would go to (from STS and the session)."""

    account: str
    region: str

    @property
    def environment(self) -> str:
        """The CDK environment, as ``cdk bootstrap`` takes it."""
        return f"aws://{self.account}/{self.region}"


@dataclass(frozen=True)
class QueueMapping:
    """One SQS event-source mapping of the stack and the context key that sets its ceiling."""

    function: str
    #: The CDK context key of its ``MaximumConcurrency`` (infra/config.py).
    context_key: str
    #: Its ``MaximumConcurrency`` at deploy.
    ceiling: int
    #: Whether the scaler raises it later, up to the scaler's ``max_concurrency``.
    scaled: bool = False


@dataclass(frozen=True)
class StackSettings:
    """What the checks need to know of the stack a deploy would create (its CDK context)."""

    stage: str
    mappings: tuple[QueueMapping, ...]
    #: The scaler's ``max_concurrency`` (the ``scaler`` context): the most a scaled mapping gets.
    scaler_max_concurrency: int
    #: Functions without a queue (scheduled, or invoked by SNS or HTTP): one execution each
    #: at a time is what they take from the account's concurrency.
    other_functions: tuple[str, ...]
    #: The notifier's channel sources (``alert_webhook_secrets``): secret names or ARNs, or
    #: ``ssm:<parameter>``.
    alert_secrets: tuple[str, ...] = ()
    #: Whether a deployed pipeline renders pages (then the render image is built at deploy).
    renders_pages: bool = False
    bootstrap_qualifier: str = DEFAULT_QUALIFIER


class RefusalKind(StrEnum):
    denied = "denied"  # the caller lacks the permission
    missing = "missing"  # the thing asked about does not exist
    unreachable = "unreachable"  # no endpoint answered (the service is not in the region)
    unsupported = "unsupported"  # the endpoint does not implement the call (an emulator)
    credentials = "credentials"  # no usable credentials
    failed = "failed"  # anything else AWS answered


@dataclass(frozen=True)
class Refusal:
    """An AWS call that did not answer: why, and the IAM action it needed."""

    kind: RefusalKind
    #: The IAM action of the call (``ssm:GetParameter``), from the service's model.
    permission: str
    code: str
    message: str

    def describe(self) -> str:
        return f"{self.permission}: {self.code}: {self.message}" if self.code else self.message


def could_not_check(name: str, refusal: Refusal) -> CheckResult:
    """The result of a check whose AWS call was refused for a reason the check does not
    interpret itself. A refused permission is a warn: the deploy runs with the CDK
    bootstrap roles, not the caller's, so it may well work; only the check could not tell."""
    if refusal.kind is RefusalKind.denied:
        return CheckResult(
            name,
            Status.warn,
            f"could not check: the caller may not call {refusal.permission} ({refusal.code})",
            f"allow {refusal.permission} for the caller (or run preflight with --profile of "
            "one that may), then run preflight again",
        )
    if refusal.kind is RefusalKind.unsupported:
        return CheckResult(
            name,
            Status.warn,
            f"could not check: the endpoint does not implement {refusal.permission} "
            f"({refusal.code}; an emulator?)",
            "run preflight against the AWS account itself",
        )
    if refusal.kind is RefusalKind.credentials:
        return CheckResult(
            name,
            Status.fail,
            f"no usable credentials: {refusal.message}",
            "aws configure (or aws sso login), or choose a profile with --profile",
        )
    if refusal.kind is RefusalKind.unreachable:
        return CheckResult(
            name,
            Status.fail,
            f"no answer from the endpoint of {refusal.permission}: {refusal.message}",
            "check the network and the region (--region), or --endpoint-url",
        )
    return CheckResult(name, Status.fail, f"AWS refused {refusal.describe()}", None)
