"""Regional services the stack cannot do without: EventBridge Scheduler (the sweeper's and
the scaler's schedules, and the pipelines' own) and X-Ray (active tracing and the stage's
sampling rule, which the scaler adjusts).

A region without a service has no endpoint for it: the call fails to connect (botocore
resolves a name that does not exist), which is what "not available" looks like from here.
"""

from __future__ import annotations

from typing import Final

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.model import (
    CheckResult,
    Refusal,
    RefusalKind,
    Status,
    could_not_check,
)

__all__ = ["SCHEDULER_CHECK", "XRAY_CHECK", "check_scheduler", "check_xray"]

SCHEDULER_CHECK: Final = "eventbridge scheduler"
XRAY_CHECK: Final = "x-ray"


def _available(
    name: str, service: str, account: AwsAccount, answer: dict[str, object] | Refusal
) -> CheckResult:
    if not isinstance(answer, Refusal):
        return CheckResult(name, Status.ok, f"available in {account.region}")
    if answer.kind is RefusalKind.unreachable:
        return CheckResult(
            name,
            Status.fail,
            f"not available in {account.region}: no {service} endpoint answered ({answer.message})",
            f"deploy to a region that offers {service} (--region here, AWS_REGION or the "
            "profile's region for cdk deploy)",
        )
    return could_not_check(name, answer)


def check_scheduler(account: AwsAccount) -> CheckResult:
    """EventBridge Scheduler answers in the region (its schedule groups can be listed)."""
    answer = account.ask("scheduler", "list_schedule_groups", MaxResults=1)
    return _available(SCHEDULER_CHECK, "EventBridge Scheduler", account, answer)


def check_xray(account: AwsAccount) -> CheckResult:
    """X-Ray answers in the region (its sampling rules can be read)."""
    answer = account.ask("xray", "get_sampling_rules")
    return _available(XRAY_CHECK, "X-Ray", account, answer)
