"""CloudWatch alarm evaluation, the pure part: alarms' definitions, their states and reasons.

moto stores alarms but never evaluates them; local mode does (:mod:`stepcrawl.emulator.alarms`
fetches the data and delivers the changes, :mod:`~stepcrawl.emulator.alarm_definitions` reads
the template). What is here is what CloudWatch decides, kept free of I/O so that the unit
tests pin it down:

* **M out of N.** The last ``EvaluationPeriods`` (N) periods are the evaluation range; the
  alarm is ALARM when at least ``DatapointsToAlarm`` (M, default N) of them breach, else OK.
* **Missing data** (``TreatMissingData``): ``notBreaching`` and ``breaching`` stand a missing
  datapoint in as good or bad; with ``missing`` and ``ignore`` only the datapoints present
  count, and when none is present the alarm goes to INSUFFICIENT_DATA (``missing``) or stays
  as it is (``ignore``).
* **Metric math**: exactly the subset the stack's alarms use (``infra/alarms.py``), parsed
  and computed in :mod:`stepcrawl.emulator.alarm_math`; here, an alarm's expressions are
  evaluated in dependency order (:func:`series_of`).
* **Composite alarms**: rules of the form ``ALARM("a") AND ALARM("b") ...`` (optionally in
  parentheses), which is what ``AlarmRule.all_of`` synthesizes.
* **Reasons** in CloudWatch's wording ("Threshold Crossed: 1 datapoint [0.9 (01/12/26
  03:04:00)] was greater than the threshold (0.25)."), since the notifier reads the current
  value and the threshold back out of them.

**Time scale.** A local run lasts seconds, an alarm period minutes, so every period is scaled
by ``scale`` (:func:`scaled_period`): with ``scale = 1/60`` a 5-minute period lasts 5 s and the
evaluation range shrinks alike; metric *values* are not scaled (a queue-age threshold of 900 s
still means a message 15 real minutes old). Periods are whole seconds, at least one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

from stepcrawl.emulator.alarm_math import MathExpression, Series, UnsupportedAlarmError, Value

__all__ = [
    "ALARM",
    "INSUFFICIENT_DATA",
    "OK",
    "CompositeAlarm",
    "Evaluation",
    "MathExpression",
    "MetricAlarm",
    "MetricStat",
    "Query",
    "State",
    "UnsupportedAlarmError",
    "composite_state",
    "evaluate",
    "evaluation_grid",
    "parse_rule",
    "scaled_period",
    "series_of",
]

State = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]
OK: Final[State] = "OK"
ALARM: Final[State] = "ALARM"
INSUFFICIENT_DATA: Final[State] = "INSUFFICIENT_DATA"

#: ComparisonOperator -> (test, CloudWatch's words in a reason).
_COMPARISONS: Final[Mapping[str, tuple[Callable[[float, float], bool], str]]] = {
    "GreaterThanThreshold": (lambda v, t: v > t, "greater than"),
    "GreaterThanOrEqualToThreshold": (lambda v, t: v >= t, "greater than or equal to"),
    "LessThanThreshold": (lambda v, t: v < t, "less than"),
    "LessThanOrEqualToThreshold": (lambda v, t: v <= t, "less than or equal to"),
}
_TREATMENTS: Final = frozenset({"missing", "ignore", "breaching", "notBreaching"})


def scaled_period(seconds: int, scale: float) -> int:
    """A period on the local clock: whole seconds, at least one."""
    return max(1, round(seconds * scale))


# ---- definitions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricStat:
    """One metric, one statistic, one period (seconds, as defined: unscaled)."""

    namespace: str
    metric_name: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str
    period: int


@dataclass(frozen=True)
class Query:
    """An entry of an alarm's ``Metrics``: a metric (``stat``) or an expression."""

    id: str
    stat: MetricStat | None = None
    expression: str | None = None
    label: str | None = None
    return_data: bool = True


@dataclass(frozen=True)
class MetricAlarm:
    """An ``AWS::CloudWatch::Alarm`` with its references resolved (names, ARNs)."""

    name: str
    arn: str
    description: str | None
    queries: tuple[Query, ...]
    period: int
    threshold: float
    comparison: str
    evaluation_periods: int
    datapoints_to_alarm: int
    treat_missing: str
    alarm_actions: tuple[str, ...] = ()
    ok_actions: tuple[str, ...] = ()
    insufficient_data_actions: tuple[str, ...] = ()
    #: ``MetricName``/``Namespace``/... rather than ``Metrics``: shapes the Trigger JSON.
    single_metric: bool = True
    expressions: Mapping[str, MathExpression] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.comparison not in _COMPARISONS:
            raise UnsupportedAlarmError(
                f"alarm {self.name}: comparison {self.comparison} is not evaluated locally "
                f"(known: {', '.join(_COMPARISONS)})"
            )
        if self.treat_missing not in _TREATMENTS:
            raise UnsupportedAlarmError(
                f"alarm {self.name}: TreatMissingData {self.treat_missing!r} is unknown"
            )
        if not 1 <= self.datapoints_to_alarm <= self.evaluation_periods:
            raise UnsupportedAlarmError(
                f"alarm {self.name}: DatapointsToAlarm {self.datapoints_to_alarm} is not "
                f"within 1..EvaluationPeriods ({self.evaluation_periods})"
            )
        returned = [q for q in self.queries if q.return_data]
        if len(returned) != 1:
            raise UnsupportedAlarmError(
                f"alarm {self.name}: exactly one of its Metrics must return data, "
                f"{len(returned)} do"
            )
        ids = {q.id for q in self.queries}
        parsed = {
            q.id: MathExpression(q.expression, alarm=self.name, ids=ids)
            for q in self.queries
            if q.expression is not None
        }
        object.__setattr__(self, "expressions", parsed)

    @property
    def result_id(self) -> str:
        return next(q.id for q in self.queries if q.return_data)

    @property
    def stats(self) -> list[Query]:
        return [q for q in self.queries if q.stat is not None]

    def breaches(self, value: float) -> bool:
        return _COMPARISONS[self.comparison][0](value, self.threshold)


@dataclass(frozen=True)
class CompositeAlarm:
    """An ``AWS::CloudWatch::CompositeAlarm``; ``children`` are the ARNs or names its rule
    names, all of which must be in ALARM (the rule is a conjunction)."""

    name: str
    arn: str
    description: str | None
    rule: str
    alarm_actions: tuple[str, ...] = ()
    ok_actions: tuple[str, ...] = ()
    insufficient_data_actions: tuple[str, ...] = ()
    children: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", parse_rule(self.rule, alarm=self.name))


def series_of(
    alarm: MetricAlarm, fetched: Mapping[str, Series], grid: Sequence[datetime]
) -> Series:
    """The alarm's evaluated series: its returned metric, or its expression computed from the
    metrics ``fetched`` (id -> series; a metric left out has no data) over ``grid``."""
    values: dict[str, Value] = {q.id: {} for q in alarm.stats}
    values.update(fetched)
    pending = set(alarm.expressions)
    while pending:  # expressions may name expressions: evaluate in dependency order
        ready = [i for i in pending if alarm.expressions[i].references <= values.keys()]
        if not ready:
            raise UnsupportedAlarmError(
                f"alarm {alarm.name}: its expressions refer to each other in a cycle"
            )
        for query_id in sorted(ready):
            values[query_id] = alarm.expressions[query_id].evaluate(values, grid)
            pending.discard(query_id)
    result = values[alarm.result_id]
    return dict.fromkeys(grid, result) if isinstance(result, float) else dict(result)


# ---- evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation found: the state, CloudWatch's reason, and its reason data."""

    state: State
    reason: str
    points: tuple[tuple[datetime, float | None], ...]
    breaching: int


def evaluate(
    alarm: MetricAlarm,
    points: Sequence[tuple[datetime, float | None]],
    current: State,
) -> Evaluation:
    """The alarm's state from the evaluation range's datapoints (oldest first, one per
    period, ``None`` where there is no data)."""
    n, m = alarm.evaluation_periods, alarm.datapoints_to_alarm
    present = [(t, v) for t, v in points if v is not None]
    missing = len(points) - len(present)
    treat = alarm.treat_missing
    words = _COMPARISONS[alarm.comparison][1]
    threshold = _num(alarm.threshold)
    bad = [(t, v) for t, v in present if alarm.breaches(v)]
    if not present:
        plural = "s" if missing != 1 else ""
        if treat in ("breaching", "notBreaching"):
            state: State = ALARM if treat == "breaching" else OK
            label = "Breaching" if treat == "breaching" else "NonBreaching"
            reason = (
                f"Threshold Crossed: no datapoints were received for {missing} period{plural} "
                f"and {missing} missing datapoint{plural} {'was' if missing == 1 else 'were'} "
                f"treated as [{label}]."
            )
            return Evaluation(state, reason, tuple(points), missing if state == ALARM else 0)
        if treat == "ignore":
            return Evaluation(current, "", tuple(points), 0)
        reason = (
            f"Insufficient Data: {missing} datapoint{plural} "
            f"{'was' if missing == 1 else 'were'} unknown."
        )
        return Evaluation(INSUFFICIENT_DATA, reason, tuple(points), 0)
    breaching = len(bad) + (missing if treat == "breaching" else 0)
    state = ALARM if breaching >= m else OK
    newest_first = sorted(bad if state == ALARM else present, key=lambda p: p[0], reverse=True)
    quoted = ", ".join(f"{_num(v)} ({t:%d/%m/%y %H:%M:%S})" for t, v in newest_first)
    if state == ALARM:
        if n == 1:
            reason = (
                f"Threshold Crossed: 1 datapoint [{quoted}] was {words} the threshold "
                f"({threshold})."
            )
        else:
            reason = (
                f"Threshold Crossed: {breaching} out of the last {n} datapoints [{quoted}] were "
                f"{words} the threshold ({threshold}) (minimum {m} datapoint"
                f"{'s' if m != 1 else ''} for OK -> ALARM transition)."
            )
    elif n == 1:
        reason = (
            f"Threshold Crossed: 1 datapoint [{quoted}] was not {words} the threshold "
            f"({threshold})."
        )
    else:
        good = n - breaching
        reason = (
            f"Threshold Crossed: {good} out of the last {n} datapoints [{quoted}] were not "
            f"{words} the threshold ({threshold}) (minimum 1 datapoint for ALARM -> OK "
            "transition)."
        )
    return Evaluation(state, reason, tuple(points), breaching)


def evaluation_grid(end: datetime, period: int, periods: int) -> list[datetime]:
    """The starts of the evaluation range's periods (oldest first); the range ends at
    ``end`` (the last whole second: the period in progress is not evaluated)."""
    step = timedelta(seconds=period)
    return [end - step * (periods - i) for i in range(periods)]


# ---- composite alarms ----------------------------------------------------------------------

_CHILD: Final = re.compile(r'^ALARM\(\s*"([^"]+)"\s*\)$')


def parse_rule(rule: str, *, alarm: str) -> tuple[str, ...]:
    """The children of ``ALARM("a") AND ALARM("b") ...`` (parentheses around it allowed);
    anything else is refused, naming the alarm."""
    text = rule.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    children: list[str] = []
    for part in re.split(r"\s+AND\s+", text):
        found = _CHILD.match(part.strip())
        if found is None:
            raise UnsupportedAlarmError(
                f"composite alarm {alarm}: rule {rule!r}: local evaluation implements only "
                'ALARM("name") AND ALARM("name") ... (what AlarmRule.all_of synthesizes)'
            )
        children.append(found.group(1))
    return tuple(children)


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def composite_state(alarm: CompositeAlarm, states: Mapping[str, State]) -> State:
    """ALARM when every child is in ALARM (children by ARN or name); OK otherwise."""
    return ALARM if all(states.get(child) == ALARM for child in alarm.children) else OK


def _num(value: float) -> str:
    """A number as CloudWatch prints it in reasons (Java's double: ``12.0``, ``0.25``)."""
    return repr(float(value))
