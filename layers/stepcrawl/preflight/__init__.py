"""Preflight: checks an AWS account and this machine before a deploy, and says what to fix.

One concern: would ``cdk deploy`` of this stack, and the stack once deployed, work here? Each
check is a function of the clients it needs (through :class:`AwsAccount`, the one AWS
boundary) and the stack's settings (:class:`StackSettings`, from its CDK context), returning a
:class:`CheckResult`: ok, warn (could not be verified, or a caveat) or fail, what was found,
and the command to run or the setting to change. ``stepcrawl preflight`` runs them
(docs/deploy.md, "Preflight").
"""

from __future__ import annotations

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.bootstrap import REQUIRED_BOOTSTRAP_VERSION, check_bootstrap
from stepcrawl.preflight.concurrency import (
    CONCURRENCY_QUOTA_CODE,
    MIN_MAPPING_CONCURRENCY,
    check_concurrency,
    fit_into,
)
from stepcrawl.preflight.model import (
    DEFAULT_QUALIFIER,
    CheckResult,
    QueueMapping,
    Refusal,
    RefusalKind,
    StackSettings,
    Status,
    Target,
)
from stepcrawl.preflight.render_image import DockerFacts, check_render_image, probe_docker
from stepcrawl.preflight.run import Preflight, identify, run_preflight
from stepcrawl.preflight.secrets import check_alert_secrets
from stepcrawl.preflight.services import check_scheduler, check_xray

__all__ = [
    "CONCURRENCY_QUOTA_CODE",
    "DEFAULT_QUALIFIER",
    "MIN_MAPPING_CONCURRENCY",
    "REQUIRED_BOOTSTRAP_VERSION",
    "AwsAccount",
    "CheckResult",
    "DockerFacts",
    "Preflight",
    "QueueMapping",
    "Refusal",
    "RefusalKind",
    "StackSettings",
    "Status",
    "Target",
    "check_alert_secrets",
    "check_bootstrap",
    "check_concurrency",
    "check_render_image",
    "check_scheduler",
    "check_xray",
    "fit_into",
    "identify",
    "probe_docker",
    "run_preflight",
]
