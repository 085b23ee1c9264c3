"""CloudWatch alarm evaluation, the pure part: definitions, metric math, states and reasons.

moto stores alarms but never evaluates them; local mode does (:mod:`stepcrawl.emulator.alarms`
reads the template, fetches the data and delivers the changes). What is here is what
CloudWatch decides, kept free of I/O so that the unit tests pin it down:

* **M out of N.** The last ``EvaluationPeriods`` (N) periods are the evaluation range; the
  alarm is ALARM when at least ``DatapointsToAlarm`` (M, default N) of them breach, else OK.
* **Missing data** (``TreatMissingData``): ``notBreaching`` and ``breaching`` stand a missing
  datapoint in as good or bad; with ``missing`` and ``ignore`` only the datapoints present
  count, and when none is present the alarm goes to INSUFFICIENT_DATA (``missing``) or stays
  as it is (``ignore``).
* **Metric math**: exactly the subset the stack's alarms use (``infra/alarms.py``): metric ids,
  numbers, ``+``, ``/``, ``FILL(x, n)``, ``IF(a > b, x, y)`` and parentheses. Any other
  expression is refused when the alarm is read, with an error naming it, rather than
  evaluated wrongly.
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

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal, NoReturn

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
    "UnsupportedAlarmError",
    "composite_state",
    "evaluate",
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


class UnsupportedAlarmError(ValueError):
    """An alarm local mode cannot evaluate faithfully; the message names the alarm."""


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


# ---- metric math ---------------------------------------------------------------------------

Series = dict[datetime, float]
Value = Series | float
_TOKEN: Final = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[(),+/>]))"
)
_FUNCTIONS: Final = ("FILL", "IF")
_SUBSET: Final = "metric ids, numbers, +, /, FILL(x, n), IF(a > b, x, y) and parentheses"


@dataclass(frozen=True)
class _Node:
    kind: str  # number | id | + | / | > | FILL | IF
    args: tuple[_Node, ...] = ()
    value: float = 0.0
    name: str = ""


class MathExpression:
    """One metric-math expression of the supported subset, parsed once (refused on read)."""

    def __init__(self, text: str, *, alarm: str, ids: set[str] | frozenset[str]) -> None:
        self.text, self.alarm, self.ids = text, alarm, frozenset(ids)
        self._tokens = self._tokenize(text)
        self._at = 0
        self.tree = self._sum()
        if self._at != len(self._tokens):
            self._refuse(f"unexpected {self._tokens[self._at]!r}")
        self.references = frozenset(self._names(self.tree))

    def _refuse(self, what: str) -> NoReturn:
        raise UnsupportedAlarmError(
            f"alarm {self.alarm}: metric math {self.text!r}: {what}; local alarm evaluation "
            f"implements only {_SUBSET} (the stack's own expressions)"
        )

    def _tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        at = 0
        while at < len(text):
            if text[at:].strip() == "":
                break
            found = _TOKEN.match(text, at)
            if found is None:
                self._refuse(f"{text[at:].strip()[:1]!r} is not supported")
            tokens.append(found.group(found.lastgroup or "op"))
            at = found.end()
        return tokens

    def _peek(self) -> str | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self, expected: str | None = None) -> str:
        token = self._peek()
        if token is None:
            self._refuse(f"expected {expected or 'more'!r} at the end")
        if expected is not None and token != expected:
            self._refuse(f"expected {expected!r}, found {token!r}")
        self._at += 1
        return token

    def _sum(self) -> _Node:
        node = self._quotient()
        while self._peek() == "+":
            self._take()
            node = _Node("+", (node, self._quotient()))
        return node

    def _quotient(self) -> _Node:
        node = self._atom()
        while self._peek() == "/":
            self._take()
            node = _Node("/", (node, self._atom()))
        return node

    def _atom(self) -> _Node:
        token = self._take()
        if token == "(":  # noqa: S105 - a token of the expression, not a password
            node = self._sum()
            self._take(")")
        elif token[0].isdigit():
            node = _Node("number", value=float(token))
        elif token in _FUNCTIONS:
            node = self._call(token)
        elif token[0].isalpha() and token[0].islower():
            if token not in self.ids:
                self._refuse(f"{token!r} is not the id of one of the alarm's metrics")
            node = _Node("id", name=token)
        else:
            self._refuse(f"{token!r} is not supported")
        return node

    def _call(self, function: str) -> _Node:
        self._take("(")
        if function == "FILL":
            series = self._sum()
            self._take(",")
            fill = self._take()
            if not fill[0].isdigit():
                self._refuse("FILL's second argument must be a number")
            self._take(")")
            return _Node("FILL", (series, _Node("number", value=float(fill))))
        condition = _Node(">", (self._sum(), self._after(">")))
        then = self._after(",")
        otherwise = self._after(",")
        self._take(")")
        return _Node("IF", (condition, then, otherwise))

    def _after(self, token: str) -> _Node:
        self._take(token)
        return self._sum()

    def _names(self, node: _Node) -> list[str]:
        return [node.name] if node.kind == "id" else [n for a in node.args for n in self._names(a)]

    def evaluate(self, values: Mapping[str, Value], grid: Sequence[datetime]) -> Series:
        """The expression over ``grid`` (the evaluation range's period starts), from the
        series of the ids it names."""
        result = self._eval(self.tree, values, grid)
        return dict.fromkeys(grid, result) if isinstance(result, float) else result

    def _eval(self, node: _Node, values: Mapping[str, Value], grid: Sequence[datetime]) -> Value:
        if node.kind == "number":
            return node.value
        if node.kind == "id":
            return values[node.name]
        args = [self._eval(a, values, grid) for a in node.args]
        if node.kind in _BINARY:
            return _combine(args[0], args[1], _BINARY[node.kind])
        if node.kind == "FILL":
            series, fill = args
            assert isinstance(fill, float)
            return series if isinstance(series, float) else {t: series.get(t, fill) for t in grid}
        return _choose(*args)


def _choose(condition: Value, then: Value, otherwise: Value) -> Value:
    """``IF``: per point of the condition, the first or the second branch's point."""
    if isinstance(condition, float):
        return then if condition else otherwise
    chosen: Series = {}
    for t, flag in condition.items():
        branch = then if flag else otherwise
        value = branch if isinstance(branch, float) else branch.get(t)
        if value is not None:
            chosen[t] = value
    return chosen


_BINARY: Final[Mapping[str, Callable[[float, float], float | None]]] = {
    "+": lambda a, b: a + b,
    "/": lambda a, b: a / b if b != 0 else None,
    ">": lambda a, b: 1.0 if a > b else 0.0,
}


def _combine(a: Value, b: Value, op: Callable[[float, float], float | None]) -> Value:
    """A binary operation as metric math does it: point by point, on the timestamps both
    series have (a number applies to every point); an undefined result (x/0) is no point."""
    if isinstance(a, float) and isinstance(b, float):
        single = op(a, b)
        return math.nan if single is None else single
    sides = [set(side) for side in (a, b) if isinstance(side, dict)]
    keys = set.intersection(*sides)
    out: Series = {}
    for t in sorted(keys):
        left = a if isinstance(a, float) else a[t]
        right = b if isinstance(b, float) else b[t]
        value = op(left, right)
        if value is not None and not math.isnan(value):
            out[t] = value
    return out


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
