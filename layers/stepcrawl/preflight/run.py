"""The checks in order: who the caller is (every other check needs the account), then each
of the account's, then the local machine's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.bootstrap import check_bootstrap
from stepcrawl.preflight.concurrency import check_concurrency
from stepcrawl.preflight.model import (
    CheckResult,
    Refusal,
    StackSettings,
    Status,
    Target,
    could_not_check,
)
from stepcrawl.preflight.render_image import DockerFacts, check_render_image
from stepcrawl.preflight.secrets import check_alert_secrets
from stepcrawl.preflight.services import check_scheduler, check_xray

__all__ = ["IDENTITY_CHECK", "Preflight", "identify", "run_preflight"]

IDENTITY_CHECK: Final = "credentials"

#: A check of the account, given the account, where a deploy goes, and the stack's settings.
AccountCheck = Callable[[AwsAccount, Target, StackSettings], CheckResult]
ACCOUNT_CHECKS: Final[tuple[AccountCheck, ...]] = (
    check_bootstrap,
    lambda account, _target, settings: check_concurrency(account, settings),
    lambda account, _target, _settings: check_scheduler(account),
    lambda account, _target, _settings: check_xray(account),
    lambda account, _target, settings: check_alert_secrets(account, settings),
)


@dataclass(frozen=True)
class Preflight:
    """Every check's result, and where they were made."""

    target: Target | None
    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> bool:
        return any(r.status is Status.fail for r in self.results)

    def counts(self) -> dict[Status, int]:
        return {s: sum(r.status is s for r in self.results) for s in Status}


def identify(account: AwsAccount) -> Target | CheckResult:
    """The account the credentials belong to, or the failed check saying why not."""
    answer = account.ask("sts", "get_caller_identity")
    if isinstance(answer, Refusal):
        return could_not_check(IDENTITY_CHECK, answer)
    return Target(account=str(answer["Account"]), region=account.region)


def run_preflight(
    account: AwsAccount, settings: StackSettings, docker: DockerFacts | None
) -> Preflight:
    """Every check against ``account`` for a stack of ``settings``; ``docker`` is what the
    local Docker said (None when nothing renders: it is not asked)."""
    local = (check_render_image(settings, docker),)
    found = identify(account)
    if isinstance(found, CheckResult):
        # Without an account every other AWS call would fail the same way: say it once.
        failed = CheckResult(found.name, Status.fail, found.found, found.fix)
        return Preflight(None, (failed, *local))
    identity = CheckResult(IDENTITY_CHECK, Status.ok, f"account {found.account} in {found.region}")
    checked: Sequence[CheckResult] = [check(account, found, settings) for check in ACCOUNT_CHECKS]
    return Preflight(found, (identity, *checked, *local))
