"""CloudWatch metric math, the subset the stack's alarms use: parsed once, evaluated over series.

Exactly what ``infra/alarms.py`` synthesizes: metric ids, numbers, ``+``, ``/``,
``FILL(x, n)``, ``IF(a > b, x, y)`` and parentheses. Any other expression is refused when the
alarm is read (:class:`UnsupportedAlarmError`, naming the alarm), rather than evaluated wrongly.
Operations work as metric math's do: point by point on the timestamps both series have, a
number applying to every point, an undefined result (``x / 0``) leaving no point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NoReturn

__all__ = ["MathExpression", "Series", "UnsupportedAlarmError", "Value"]


class UnsupportedAlarmError(ValueError):
    """An alarm local mode cannot evaluate faithfully; the message names the alarm."""


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
