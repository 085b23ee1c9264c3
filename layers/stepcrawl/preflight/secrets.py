"""The notifier's channel secrets (``alert_webhook_secrets``, docs/alerts.md) exist.

Only their metadata is read (``DescribeSecret``, ``DescribeParameters``), never a value: the
caller needs no read access to the webhook URLs, and nothing here could print one.
"""

from __future__ import annotations

from typing import Final

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.model import (
    CheckResult,
    Refusal,
    RefusalKind,
    StackSettings,
    Status,
    could_not_check,
)
from stepcrawl.preflight.verdicts import Finding, fold

__all__ = ["SECRETS_CHECK", "SSM_PREFIX", "check_alert_secrets"]

SECRETS_CHECK: Final = "alert channel secrets"
#: A source naming an SSM SecureString parameter (stepcrawl.alerts.secrets.SSM_PREFIX).
SSM_PREFIX: Final = "ssm:"
#: A channel as docs/alerts.md shows it; any of its types will do.
_EXAMPLE_CHANNEL: Final = '\'{"type": "slack", "url": "https://hooks.slack.com/services/…"}\''


def check_alert_secrets(account: AwsAccount, settings: StackSettings) -> CheckResult:
    """Every configured channel source exists (and is not being deleted)."""
    if not settings.alert_secrets:
        return CheckResult(
            SECRETS_CHECK,
            Status.warn,
            "no channels: alert_webhook_secrets is empty, so notify has nowhere to post and "
            "fails on every alert",
            f"aws secretsmanager create-secret --name stepcrawl/{settings.stage}/alerts/oncall "
            f"--secret-string {_EXAMPLE_CHANNEL}, then deploy with "
            f"-c alert_webhook_secrets='[\"stepcrawl/{settings.stage}/alerts/oncall\"]'",
        )
    findings = [
        _parameter(account, source.removeprefix(SSM_PREFIX))
        if source.startswith(SSM_PREFIX)
        else _secret(account, source)
        for source in settings.alert_secrets
    ]
    return fold(SECRETS_CHECK, findings)


def _secret(account: AwsAccount, name: str) -> Finding:
    answer = account.ask("secretsmanager", "describe_secret", SecretId=name)
    if isinstance(answer, Refusal):
        if answer.kind is RefusalKind.missing:
            if name.startswith("arn:"):
                return Finding(
                    Status.fail,
                    f"secret {name} does not exist",
                    "put the ARN of an existing secret in alert_webhook_secrets (a secret's "
                    "ARN ends in a random suffix: aws secretsmanager describe-secret --secret-id "
                    "NAME shows it)",
                )
            return Finding(
                Status.fail,
                f"secret {name} does not exist",
                f"aws secretsmanager create-secret --name {name} --secret-string "
                f"{_EXAMPLE_CHANNEL} (the channel's fields: docs/alerts.md)",
            )
        return _refused(f"secret {name}", answer)
    if answer.get("DeletedDate"):
        return Finding(
            Status.fail,
            f"secret {name} is scheduled for deletion",
            f"aws secretsmanager restore-secret --secret-id {name}",
        )
    return Finding(Status.ok, f"secret {name}")


def _parameter(account: AwsAccount, name: str) -> Finding:
    answer = account.ask(
        "ssm",
        "describe_parameters",
        ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}],
    )
    if isinstance(answer, Refusal):
        return _refused(f"parameter {name}", answer)
    found = answer.get("Parameters", [])
    if not found:
        return Finding(
            Status.fail,
            f"parameter {name} does not exist",
            f"aws ssm put-parameter --name {name} --type SecureString --value {_EXAMPLE_CHANNEL}",
        )
    kind = str(found[0].get("Type", ""))
    if kind != "SecureString":
        return Finding(
            Status.warn,
            f"parameter {name} is a {kind}, stored unencrypted",
            f"aws ssm put-parameter --name {name} --type SecureString --overwrite --value ...",
        )
    return Finding(Status.ok, f"parameter {name}")


def _refused(what: str, refusal: Refusal) -> Finding:
    said = could_not_check(SECRETS_CHECK, refusal)
    return Finding(said.status, f"{what}: {said.found}", said.fix)
