"""Lambda concurrency: whether the account's unreserved concurrency holds what the stack's
queues may use, and if not, which settings to lower or which quota to raise.

The stack reserves no concurrency: its functions share the account's unreserved pool. Each
queue's event-source mapping may run up to its ``MaximumConcurrency`` (at least 2, Lambda's
minimum for SQS), the scaler later raises fetch's and parse's up to its ``max_concurrency``,
and the functions without a queue (sweeper, scaler, notify, the console's) take one each.
Beyond the pool, Lambda throttles: a throttled batch returns to its queue, and each return
counts towards the 5 receives after which it lands in the dead-letter queue. A new account
gets 10 concurrent executions (AWS raises it with use, or on request).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from stepcrawl.preflight.aws import AwsAccount
from stepcrawl.preflight.model import (
    CheckResult,
    QueueMapping,
    Refusal,
    StackSettings,
    Status,
    could_not_check,
)

__all__ = [
    "CONCURRENCY_CHECK",
    "CONCURRENCY_QUOTA_CODE",
    "MIN_MAPPING_CONCURRENCY",
    "Fit",
    "check_concurrency",
    "fit_into",
    "scaled_peak",
]

CONCURRENCY_CHECK: Final = "lambda concurrency"
#: Service Quotas' code of Lambda's "Concurrent executions" quota.
CONCURRENCY_QUOTA_CODE: Final = "L-B99A9384"
#: Lambda's least ``MaximumConcurrency`` of an SQS event-source mapping.
MIN_MAPPING_CONCURRENCY: Final = 2
#: The quota every account gets once AWS has raised a new one's.
DEFAULT_QUOTA: Final = 1000


@dataclass(frozen=True)
class Fit:
    """Ceilings that fit a budget: each mapping's ``MaximumConcurrency`` and the scaler's
    ``max_concurrency``."""

    ceilings: dict[str, int]
    scaler_max_concurrency: int


def fit_into(mappings: Sequence[QueueMapping], scaler_max: int, budget: int) -> Fit | None:
    """The settings closest to the given ones whose peak (every mapping at its ceiling, the
    scaled ones at the scaler's maximum) is at most ``budget``; None if even the minimum per
    mapping is more."""
    if budget < MIN_MAPPING_CONCURRENCY * len(mappings):
        return None
    ceilings = {m.function: m.ceiling for m in mappings}
    total = sum(ceilings.values())
    if total > budget:
        # Shrink in proportion, so the busier queues keep the larger shares.
        ceilings = {
            m.function: max(MIN_MAPPING_CONCURRENCY, m.ceiling * budget // total) for m in mappings
        }
        while sum(ceilings.values()) > budget:
            largest = max(ceilings, key=ceilings.__getitem__)
            ceilings[largest] -= 1
    scaled = [m for m in mappings if m.scaled]
    if not scaled:
        return Fit(ceilings, scaler_max)
    fixed = sum(ceilings[m.function] for m in mappings if not m.scaled)
    # The scaler's maximum applies to each scaled mapping: they may all be there at once.
    per_scaled = min(scaler_max, (budget - fixed) // len(scaled))
    for mapping in scaled:
        ceilings[mapping.function] = min(mapping.ceiling, per_scaled)
    return Fit(ceilings, per_scaled)


def scaled_peak(mappings: Sequence[QueueMapping], scaler_max: int) -> int:
    """What the mappings may use once the scaler has raised its ones to its maximum (it
    keeps them within its bounds, so a larger deploy-time ceiling does not outlast a tick)."""
    return sum(scaler_max if m.scaled else m.ceiling for m in mappings)


def check_concurrency(account: AwsAccount, settings: StackSettings) -> CheckResult:
    """The account's unreserved concurrency against the stack's ceilings, now and scaled."""
    answer = account.ask("lambda", "get_account_settings")
    if isinstance(answer, Refusal):
        return could_not_check(CONCURRENCY_CHECK, answer)
    limits = answer["AccountLimit"]
    quota = int(limits["ConcurrentExecutions"])
    unreserved = int(limits.get("UnreservedConcurrentExecutions", quota))
    others = len(settings.other_functions)
    mappings = settings.mappings
    at_deploy = sum(m.ceiling for m in mappings) + others
    scaled = scaled_peak(mappings, settings.scaler_max_concurrency) + others
    pool = f"{unreserved} unreserved of the account's {quota}"
    fit = fit_into(mappings, settings.scaler_max_concurrency, unreserved - others)
    if at_deploy > unreserved:
        return CheckResult(
            CONCURRENCY_CHECK,
            Status.fail,
            f"{pool}; the stack needs {at_deploy} at deploy ({_needs(settings)}): Lambda throttles "
            "the queues' invocations, and throttled batches end in the dead-letter queues",
            _fail_fix(settings, fit, quota, at_deploy),
        )
    if scaled > unreserved:
        names = " and ".join(m.function for m in mappings if m.scaled)
        return CheckResult(
            CONCURRENCY_CHECK,
            Status.warn,
            f"{pool}; the stack needs {at_deploy} at deploy, but the scaler may raise {names} "
            f"to {settings.scaler_max_concurrency} each ({scaled} in all), and then Lambda "
            "throttles them",
            _context_args(settings, fit) if fit else _quota_request(max(DEFAULT_QUOTA, scaled)),
        )
    return CheckResult(
        CONCURRENCY_CHECK,
        Status.ok,
        f"{pool}; the stack needs {at_deploy} at deploy, {scaled} with the scaler at its maximum",
    )


def _needs(settings: StackSettings) -> str:
    queues = ", ".join(f"{m.context_key}={m.ceiling}" for m in settings.mappings)
    return f"{queues}, and 1 each for {', '.join(settings.other_functions)}"


def _quota_request(desired: int) -> str:
    return (
        "aws service-quotas request-service-quota-increase --service-code lambda "
        f"--quota-code {CONCURRENCY_QUOTA_CODE} --desired-value {desired}"
    )


def _fail_fix(settings: StackSettings, fit: Fit | None, quota: int, at_deploy: int) -> str:
    request = _quota_request(max(DEFAULT_QUOTA, at_deploy))
    if fit is None:
        least = MIN_MAPPING_CONCURRENCY * len(settings.mappings) + len(settings.other_functions)
        return (
            f"{request} (even at {MIN_MAPPING_CONCURRENCY} per queue the stack needs {least}, "
            f"more than this account's {quota})"
        )
    return f"{request}; or, until it is granted, deploy with {_context_args(settings, fit)}"


def _context_args(settings: StackSettings, fit: Fit) -> str:
    """The ``cdk deploy`` options that set ``fit``'s ceilings (only those that change)."""
    args = [
        f"-c {m.context_key}={fit.ceilings[m.function]}"
        for m in settings.mappings
        if fit.ceilings[m.function] != m.ceiling
    ]
    if fit.scaler_max_concurrency != settings.scaler_max_concurrency:
        scaler = json.dumps({"max_concurrency": fit.scaler_max_concurrency})
        args.append(f"-c scaler='{scaler}' (with your other scaler fields, if any)")
    return "npx cdk deploy " + " ".join(args)
