"""A ``validate`` task as a stream: valid items to one sink, invalid ones to quarantine.

The schema describes the user's data, so it is checked against each item *without* stepcrawl's
own ``_`` fields (a schema with ``additionalProperties: false`` must not reject every item for
its ``_url``); the item is written whole. ``format`` is asserted, not just annotated, for every
format jsonschema can check here (``date``, ``date-time``, ``email``, ``uuid``, ``ipv4``, ...);
formats whose optional checker package is not installed (``uri`` needs ``rfc3987``) pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Final

from stepcrawl.etl.stats import MAX_SAMPLES
from stepcrawl.etl.types import Item, ItemSink
from stepcrawl.pipeline.etl_tasks import ValidateTask

__all__ = ["ERRORS_FIELD", "ValidateOutcome", "run_validate"]

#: The field of a quarantined item that lists why it is invalid.
ERRORS_FIELD: Final = "_errors"

# An item can break a schema in unboundedly many places (every element of a long list);
# the first few reasons are what a person reads.
_MAX_ERRORS_PER_ITEM: Final = 20
_MAX_MESSAGE: Final = 300


@dataclass(frozen=True)
class ValidateOutcome:
    """Counts of a validate run; ``exceeds_ratio`` tells the caller to fail the task."""

    items: int
    valid: int
    invalid: int
    max_invalid_ratio: float
    samples: tuple[str, ...] = ()

    @property
    def invalid_ratio(self) -> float:
        """Share of invalid items (0 when there were none at all)."""
        return self.invalid / self.items if self.items else 0.0

    @property
    def exceeds_ratio(self) -> bool:
        """More than ``max_invalid_ratio`` of the items is invalid."""
        return self.invalid_ratio > self.max_invalid_ratio

    def summary(self) -> str:
        """One line for logs and a task's failure cause."""
        verdict = "exceeds" if self.exceeds_ratio else "within"
        return (
            f"{self.invalid} of {self.items} items invalid ({self.invalid_ratio:.2%}), "
            f"{verdict} max_invalid_ratio {self.max_invalid_ratio:.2%}"
        )


def _message(path: str, message: str) -> str:
    text = f"{path}: {message}"
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def run_validate(
    task: ValidateTask,
    items: Iterable[Item],
    *,
    valid: ItemSink,
    quarantine: ItemSink,
) -> ValidateOutcome:
    """Check every item; write valid ones to ``valid``, the rest to ``quarantine``.

    A quarantined item is a copy with ``_errors``: messages like ``"$.price: 'x' is not of type
    'number'"`` (JSON path, then jsonschema's message), sorted by path, at most 20 per item.
    """
    # Lazy: jsonschema (via rfc3987_syntax) costs ~750 ms at import, which every Lambda
    # handler would pay at cold start; only a validate stage needs it.
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    validator = Draft202012Validator(
        task.json_schema, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    total = good = bad = 0
    samples: list[str] = []
    for item in items:
        total += 1
        data = {name: value for name, value in item.items() if not name.startswith("_")}
        found = islice(validator.iter_errors(data), _MAX_ERRORS_PER_ITEM)
        reasons = sorted((error.json_path, error.message) for error in found)
        errors = [_message(path, message) for path, message in reasons]
        if not errors:
            good += 1
            valid.write(item)
            continue
        bad += 1
        if len(samples) < MAX_SAMPLES:
            where = f" (item {item['_url']})" if "_url" in item else ""
            samples.append(errors[0] + where)
        quarantine.write({**item, ERRORS_FIELD: errors})
    return ValidateOutcome(total, good, bad, task.max_invalid_ratio, tuple(samples))
