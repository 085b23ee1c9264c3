"""X-Ray sampling for the stage's runs.

A run's trace starts at its Step Functions execution (active tracing on every state machine)
and follows its messages into the functions. Step Functions applies X-Ray sampling rules, so
this rule decides which runs are traced: a reservoir of one run per second, then 5% of the
rest (X-Ray's default shape, made explicit and scoped to this stage's machines so that it can
be tuned without touching other rules). The rate is the scaler's shedding ``trace_rate``; the
scaler lowers it while the targets fail (docs/operations.md, "Shedding telemetry under load").
Functions invoked by SQS outside a traced run (feeds
of later pages, the sweeper, the scaler) use Lambda's own fixed sampling: the first request
each second and 5% of the others. The cost model (``stepcrawl cost``) prices traces with the
same figures.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_xray as xray
from constructs import Construct

__all__ = ["SAMPLING_RESERVOIR", "RunSampling", "sampling_rule_name"]

SAMPLING_RESERVOIR: Final = 1


def sampling_rule_name(prefix: str) -> str:
    """The rule's name (X-Ray allows 32 characters): what the scaler's shedding updates."""
    return f"{prefix}-runs"[:32]


class RunSampling(Construct):
    """``rule``: the X-Ray sampling rule of the stage's state machines (``<prefix>-*``)."""

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, rate: float) -> None:
        super().__init__(scope, construct_id)
        self.rule = xray.CfnSamplingRule(
            self,
            "Rule",
            sampling_rule=xray.CfnSamplingRule.SamplingRuleProperty(
                rule_name=sampling_rule_name(prefix),
                priority=9000,
                fixed_rate=rate,
                reservoir_size=SAMPLING_RESERVOIR,
                service_name=f"{prefix}-*",
                service_type="AWS::StepFunctions::StateMachine",
                host="*",
                http_method="*",
                url_path="*",
                resource_arn="*",
                version=1,
            ),
        )
