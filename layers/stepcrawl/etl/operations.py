"""Transform operations compiled into steps: ``item -> item`` (changed) or ``None`` (dropped).

Compiling once per task keeps per-item work to the essentials (regexes and filters are built
once). Steps may change the item they are given; :func:`~stepcrawl.etl.run_transform` hands
each one a private copy. String operations (``strip``, ``lower``, ``upper``) also apply to the
strings inside a list field (a ``multiple: true`` extraction); other values pass unchanged.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import assert_never

from stepcrawl.errors import TransformError
from stepcrawl.etl.conditions import compile_filter
from stepcrawl.etl.convert import ConversionError, converter
from stepcrawl.etl.join_keys import key_digest, value_digest
from stepcrawl.etl.stats import TransformStats
from stepcrawl.etl.types import Item
from stepcrawl.pipeline.transforms import (
    CaseOp,
    ConvertOp,
    DedupeOp,
    DropOp,
    FilterOp,
    KeepOp,
    RegexOp,
    RenameOp,
    SetOp,
    StripOp,
    TransformOp,
)

__all__ = ["Step", "compile_op", "compile_operations", "step_label"]

Step = Callable[[Item], Item | None]


def step_label(index: int, op: TransformOp) -> str:
    """How stats and errors name an operation: ``operations[3].filter``."""
    return f"operations[{index}].{op.op}"


def compile_operations(
    operations: Sequence[TransformOp], stats: TransformStats
) -> list[tuple[str, Step]]:
    """Each operation's label and step, in order."""
    compiled = []
    for index, op in enumerate(operations):
        label = step_label(index, op)
        compiled.append((label, compile_op(op, label, stats)))
    return compiled


def compile_op(op: TransformOp, label: str, stats: TransformStats) -> Step:
    """The step of one operation; ``label`` and ``stats`` are where its errors are counted."""
    step: Step
    match op:
        case RenameOp():
            step = _rename(op)
        case DropOp():
            step = _drop(op)
        case KeepOp():
            step = _keep(op)
        case SetOp():
            step = _set(op)
        case StripOp():
            step = _map_text(op.fields, lambda text: " ".join(text.split()))
        case CaseOp():
            step = _map_text(op.fields, str.lower if op.op == "lower" else str.upper)
        case RegexOp():
            step = _regex(op)
        case ConvertOp():
            step = _convert(op, label, stats)
        case FilterOp():
            keep = compile_filter(op)
            step = lambda item: item if keep(item) else None  # noqa: E731
        case DedupeOp():
            step = _dedupe(op)
        case _:
            assert_never(op)
    return step


def _rename(op: RenameOp) -> Step:
    mapping = dict(op.fields)

    def rename(item: Item) -> Item:
        # All renames happen at once ({a: b, b: a} swaps), each new name takes the old one's
        # place in the field order, and it replaces a field already called so.
        replaced = {mapping[name] for name in item if name in mapping}
        if not replaced:
            return item
        out: Item = {}
        for name, value in item.items():
            if name in mapping:
                out[mapping[name]] = value
            elif name not in replaced:
                out[name] = value
        return out

    return rename


def _drop(op: DropOp) -> Step:
    fields = tuple(op.fields)

    def drop(item: Item) -> Item:
        for name in fields:
            item.pop(name, None)
        return item

    return drop


def _keep(op: KeepOp) -> Step:
    fields = frozenset(op.fields)
    return lambda item: {k: v for k, v in item.items() if k in fields or k.startswith("_")}


def _set(op: SetOp) -> Step:
    name, value = op.field, op.value

    def set_field(item: Item) -> Item:
        # A list or object value must not be one object shared by every item.
        item[name] = copy.deepcopy(value) if isinstance(value, list | dict) else value
        return item

    return set_field


def _map_text(fields: Sequence[str], change: Callable[[str], str]) -> Step:
    names = tuple(fields)

    def map_text(item: Item) -> Item:
        for name in names:
            value = item.get(name)
            if isinstance(value, str):
                item[name] = change(value)
            elif isinstance(value, list):
                item[name] = [change(v) if isinstance(v, str) else v for v in value]
        return item

    return map_text


def _regex(op: RegexOp) -> Step:
    pattern = re.compile(op.pattern)
    source, target, group, on_miss = op.field, op.to or op.field, op.group, op.on_miss

    def regex(item: Item) -> Item | None:
        value = item.get(source)
        match = pattern.search(value) if isinstance(value, str) else None
        # A group that took no part in the match is a miss like no match at all.
        found = match.group(group) if match is not None else None
        if found is not None:
            item[target] = found
        elif on_miss == "null":
            item[target] = None
        elif on_miss == "drop_item":
            return None
        return item  # on_miss keep: the item as it was, target untouched

    return regex


def _convert(op: ConvertOp, label: str, stats: TransformStats) -> Step:
    convert = converter(op.op, op.format)
    fields, on_error = tuple(op.fields), op.on_error

    def conversion(item: Item) -> Item | None:
        for name in fields:
            value = item.get(name)
            if value is None:  # absent or null: nothing to convert, not an error
                continue
            try:
                item[name] = convert(value)
            except ConversionError as exc:
                where = f" (item {item['_url']})" if "_url" in item else ""
                message = f"{label}: field {name!r}: {exc}{where}"
                if on_error == "fail":
                    raise TransformError(message) from None
                stats.error(label, message)
                if on_error == "drop_item":
                    return None
                if on_error == "null":
                    item[name] = None
        return item

    return conversion


def _dedupe(op: DedupeOp) -> Step:
    fields = tuple(op.key)
    # One 16-byte digest per distinct key, never the items: ~90 bytes each with CPython's
    # object and set overhead (measured), so ~90 MB per million distinct keys.
    seen: set[bytes] = set()

    def dedupe(item: Item) -> Item | None:
        if len(fields) == 1:
            digest = value_digest(item.get(fields[0]))
        else:
            digest = key_digest([item.get(name) for name in fields])
        if digest in seen:
            return None
        seen.add(digest)
        return item

    return dedupe
