"""Turn pipeline files into :class:`Pipeline` models, or into every problem they have.

pydantic says *what* is wrong; this module adds *where* (file, line, a readable field path)
and *how to fix it* (did-you-mean for typos, the allowed values), and also checks the task
graph of a file whose fields have errors, so that one run lists all problems.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from stepcrawl.errors import InvalidPipelineError, Issue, Loc, ScheduleExpressionError
from stepcrawl.pipeline.crawl_task import CrawlTask
from stepcrawl.pipeline.etl_tasks import LoadTask, TransformTask, ValidateTask
from stepcrawl.pipeline.graph import InvalidGraphError, check_graph
from stepcrawl.pipeline.models import Pipeline
from stepcrawl.pipeline.source import SourceDocument, load_source

__all__ = ["discover", "load_pipeline", "pipeline_from_data"]

PIPELINE_SUFFIXES = (".yaml", ".yml", ".json")
_TASK_CLASSES: dict[str, type[BaseModel]] = {
    "crawl": CrawlTask,
    "transform": TransformTask,
    "validate": ValidateTask,
    "load": LoadTask,
}


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Pipeline files named by ``paths``; directories are searched (not recursively)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix.lower() in PIPELINE_SUFFIXES)
        else:
            found.append(path)
    return found


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate one pipeline file; raise :class:`InvalidPipelineError` with every issue."""
    return pipeline_from_data(load_source(path))


def pipeline_from_data(doc: SourceDocument) -> Pipeline:
    """Validate already-parsed data; positions come from ``doc.marks`` when it has them."""
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else f"a {_kind_of(doc.data)}"
        mark = doc.mark_for(())
        raise InvalidPipelineError(
            [
                Issue(
                    (),
                    f"a pipeline must be a mapping, but this is {got}",
                    "start the file with name: NAME and tasks: [...] (key: value lines)",
                    mark.line if mark else 1,
                    mark.column if mark else 1,
                )
            ],
            doc.path,
        )
    try:
        return Pipeline.model_validate(doc.data)
    except ValidationError as exc:
        errors = exc.errors()
    issues = list(_issues_from(errors, doc.data))
    if not any(isinstance(_ctx_error(e), InvalidGraphError) for e in errors):
        # Field errors stop pydantic before the graph check: run it on the raw data too.
        issues += _raw_graph_issues(doc.data)
    unique = {(i.loc, i.message): doc.locate(i) for i in issues}
    raise InvalidPipelineError(list(unique.values()), doc.path)


def _ctx_error(error: ErrorDetails) -> object:
    return (error.get("ctx") or {}).get("error")


def _issues_from(errors: list[ErrorDetails], data: dict[str, Any]) -> Iterator[Issue]:
    for error in errors:
        graph = _ctx_error(error)
        if isinstance(graph, InvalidGraphError):
            yield from graph.issues
            continue
        loc = _clean_loc(error["loc"], data, keep_missing=error["type"] == "missing")
        yield _describe(error, loc, data)


def _clean_loc(loc: tuple[int | str, ...], data: Any, *, keep_missing: bool = True) -> Loc:
    """Drop pydantic's union labels (``crawl``, ``function-after[...]``) from a location.

    A part that is not in the data is a label, except the last part of a ``missing`` error:
    the name of the key that is not there.
    """
    out: list[int | str] = []
    current = data
    for i, part in enumerate(loc):
        found, child = _child(current, part)
        if found:
            current = child
        elif not (i == len(loc) - 1 and keep_missing and isinstance(current, dict)):
            continue
        out.append(part)
    return tuple(out)


def _child(value: Any, part: str | int) -> tuple[bool, Any]:
    """``(True, value[part])`` if the data has that key or index, else ``(False, None)``."""
    if isinstance(value, dict) and part in value:
        return True, value[part]
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return True, value[part]
    return False, None


def _kind_of(value: Any) -> str:
    """What a YAML/JSON value is, in the file's terms."""
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string" if isinstance(value, str) else type(value).__name__


def _value_at(data: Any, loc: Loc) -> Any:
    """The value at ``loc``, or ``None`` where the data has no such key or index."""
    for part in loc:
        _, data = _child(data, part)
    return data


def _describe(error: ErrorDetails, loc: Loc, data: dict[str, Any]) -> Issue:
    ctx = error.get("ctx") or {}
    if "problem" in ctx:  # raised by stepcrawl's own checks (types.config_error)
        hint = ctx.get("hint")
        return Issue(loc, str(ctx["problem"]), str(hint) if hint is not None else None)
    cause = ctx.get("error")
    if isinstance(cause, ScheduleExpressionError):
        return Issue(loc, str(cause), cause.hint)
    describe = _DESCRIBERS.get(error["type"])
    if describe is not None:
        return describe(error, loc, data)
    message = error["msg"]
    if error["type"] == "too_short":
        return Issue(loc, message, "add the missing entries; it cannot be empty")
    if error["type"].startswith(
        ("string_", "int_", "float_", "bool_", "list_", "dict_", "greater", "less", "literal_")
    ):
        message += f" (got {error['input']!r})"
    return Issue(loc, message.removeprefix("Value error, "))


def _missing(_error: ErrorDetails, loc: Loc, data: dict[str, Any]) -> Issue:
    key = loc[-1] if loc else ""
    return Issue(loc, f"required key {key!r} is missing", _missing_hint(loc, data))


def _unknown_key(_error: ErrorDetails, loc: Loc, data: dict[str, Any]) -> Issue:
    key = loc[-1] if loc else ""
    allowed = _allowed_keys(loc[:-1], data)
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "allowed keys: " + ", ".join(allowed)
    return Issue(loc, f"unknown key {key!r}", hint)


def _unknown_tag(error: ErrorDetails, loc: Loc, _data: dict[str, Any]) -> Issue:
    ctx = error.get("ctx") or {}
    tag_key = str(ctx.get("discriminator", "type")).strip("'")
    return Issue(
        (*loc, tag_key),
        f"unknown {tag_key} {ctx.get('tag')!r}",
        f"use one of {ctx.get('expected_tags')}",
    )


def _missing_tag(error: ErrorDetails, loc: Loc, data: dict[str, Any]) -> Issue:
    field = str((error.get("ctx") or {}).get("discriminator", "type")).strip("'")
    return Issue(
        (*loc, field),
        f"required key {field!r} is missing",
        f"add {field}: to say which kind, one of {_tags(loc, data, field)}",
    )


def _not_mapping(error: ErrorDetails, loc: Loc, _data: dict[str, Any]) -> Issue:
    return Issue(
        loc,
        f"expected a mapping here, got a {_kind_of(error['input'])}",
        "write key: value pairs, on their own lines or as {key: value, ...}",
    )


def _not_list(error: ErrorDetails, loc: Loc, _data: dict[str, Any]) -> Issue:
    return Issue(
        loc,
        f"expected a list here, got a {_kind_of(error['input'])} ({error['input']!r})",
        "write [A, B] or one '- item' per line",
    )


_DESCRIBERS: dict[str, Callable[[ErrorDetails, Loc, dict[str, Any]], Issue]] = {
    "missing": _missing,
    "extra_forbidden": _unknown_key,
    "union_tag_invalid": _unknown_tag,
    "union_tag_not_found": _missing_tag,
    "model_type": _not_mapping,
    "model_attributes_type": _not_mapping,
    "dict_type": _not_mapping,
    "list_type": _not_list,
}


def _missing_hint(loc: Loc, data: dict[str, Any]) -> str:
    """Add the key; or, if a key next to it looks like a typo of it, say so."""
    key = str(loc[-1]) if loc else ""
    hint = f"add {key}: to this mapping"
    siblings = _value_at(data, loc[:-1])
    if isinstance(siblings, dict):
        typos = difflib.get_close_matches(key, [str(k) for k in siblings], n=1)
        if typos:
            hint += f" (is {typos[0]!r} a misspelling of it?)"
    return hint


def _tags(loc: Loc, data: dict[str, Any], field: str) -> str:
    """The values the discriminator ``field`` of the union at ``loc`` allows."""
    values = [
        repr(value)
        for member in _members(_annotation_at(loc, data))
        if isinstance(member, type) and issubclass(member, BaseModel)
        for value in typing.get_args(member.model_fields[field].annotation)
    ]
    return ", ".join(values) if values else "the documented kinds"


def _allowed_keys(loc: Loc, data: dict[str, Any]) -> list[str]:
    """Keys the model found at ``loc`` accepts (following discriminators in ``data``)."""
    model = _resolve(_annotation_at(loc, data), _value_at(data, loc))
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(f.alias or name for name, f in model.model_fields.items())
    return []


def _annotation_at(loc: Loc, data: Any) -> Any:
    """The type annotation that describes the value at ``loc`` (``None`` if unknown)."""
    annotation: Any = Pipeline
    value: Any = data
    for part in loc:
        annotation = _resolve(annotation, value)
        origin = typing.get_origin(annotation)
        if origin is list and isinstance(part, int):
            annotation = typing.get_args(annotation)[0]
        elif origin is dict:
            annotation = typing.get_args(annotation)[-1]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = next(
                (f for n, f in annotation.model_fields.items() if part in (n, f.alias)), None
            )
            if field is None:
                return None
            annotation = field.annotation
        else:
            return None
        value = _value_at(value, (part,))
    return annotation


def _resolve(annotation: Any, value: Any) -> Any:
    """Strip ``Annotated`` and ``None``; pick the union member ``value`` is meant to be."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = _members(annotation)
            annotation = _pick_member(members, value) if members else None
        else:
            return annotation


def _members(annotation: Any) -> list[Any]:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation] if annotation is not None else []


def _pick_member(members: list[Any], value: Any) -> Any:
    """The member whose tag (``type``, ``op`` or ``kind``) ``value`` has, else the first model."""
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if isinstance(value, dict):
        for member in models:
            for tag in ("type", "op", "kind"):
                field = member.model_fields.get(tag)
                if field is not None and value.get(tag) in typing.get_args(field.annotation):
                    return member
    if isinstance(value, dict) and models:
        return models[0]
    return members[0]


def _raw_graph_issues(data: dict[str, Any]) -> list[Issue]:
    """Graph issues of raw task dicts, as far as their ids and dependencies are readable."""
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list):
        return []
    nodes = []
    for raw in raw_tasks:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            return []  # positions would no longer match tasks[i]; pydantic reports these
        fields = {
            k: raw[k] for k in ("id", "depends_on", "inputs", "seed_field", "priority") if k in raw
        }
        for k in ("depends_on", "inputs"):
            if k in fields and not (
                isinstance(fields[k], list) and all(isinstance(x, str) for x in fields[k])
            ):
                fields.pop(k)
        if not isinstance(fields.get("priority", 0), int):
            fields.pop("priority")
        kind = raw["type"] if isinstance(raw.get("type"), str) else ""
        task: Any = _TASK_CLASSES.get(kind, TransformTask).model_construct(**fields)
        nodes.append(replace(task.graph_node(), kind=kind))
    return check_graph(nodes)
