"""Log retention in days -> CDK's :class:`RetentionDays` (jsii enums carry names, not days)."""

from __future__ import annotations

from typing import Final

from aws_cdk.aws_logs import RetentionDays

__all__ = ["RETENTION_BY_DAYS", "retention_days"]

#: Every retention CloudWatch Logs offers (a test checks each against the synthesized value).
RETENTION_BY_DAYS: Final[dict[int, RetentionDays]] = {
    1: RetentionDays.ONE_DAY,
    3: RetentionDays.THREE_DAYS,
    5: RetentionDays.FIVE_DAYS,
    7: RetentionDays.ONE_WEEK,
    14: RetentionDays.TWO_WEEKS,
    30: RetentionDays.ONE_MONTH,
    60: RetentionDays.TWO_MONTHS,
    90: RetentionDays.THREE_MONTHS,
    120: RetentionDays.FOUR_MONTHS,
    150: RetentionDays.FIVE_MONTHS,
    180: RetentionDays.SIX_MONTHS,
    365: RetentionDays.ONE_YEAR,
    400: RetentionDays.THIRTEEN_MONTHS,
    545: RetentionDays.EIGHTEEN_MONTHS,
    731: RetentionDays.TWO_YEARS,
    1096: RetentionDays.THREE_YEARS,
    1827: RetentionDays.FIVE_YEARS,
    2192: RetentionDays.SIX_YEARS,
    2557: RetentionDays.SEVEN_YEARS,
    2922: RetentionDays.EIGHT_YEARS,
    3288: RetentionDays.NINE_YEARS,
    3653: RetentionDays.TEN_YEARS,
}


def retention_days(days: int) -> RetentionDays:
    """The enum member for ``days`` (validated by :class:`infra.config.StackConfig`)."""
    return RETENTION_BY_DAYS[days]
