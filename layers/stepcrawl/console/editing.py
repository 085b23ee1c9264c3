"""Edit pipeline YAML the way a person would: comments, key order, quoting and indentation kept.

The console's graph and form send small operations (add a task, connect two tasks, set a
field); this module applies them to the text with ruamel.yaml's round-trip mode, which keeps
what PyYAML drops (comments, key order, quotes, flow style), then checks the result with the
very validator of ``stepcrawl validate`` (:func:`~stepcrawl.pipeline.pipeline_from_data`), so
an issue points at the same field and line in the console as on the command line.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

from stepcrawl.errors import ConfigError, InvalidPipelineError, Issue, format_loc
from stepcrawl.pipeline import Pipeline
from stepcrawl.pipeline.loading import pipeline_from_data
from stepcrawl.pipeline.source import parse_source
from stepcrawl.pipeline.task_base import TaskBase

__all__ = ["Checked", "EditError", "apply_ops", "check_text", "graph_of", "issue_json"]

#: Long lines stay as they are: a rewrapped regex or selector is a different value to a reader.
_WIDTH = 4096
_DEPENDENCY_KEYS = ("depends_on", "inputs")
#: What a task without ``priority`` gets (the model's default, shown on the graph).
_DEFAULT_PRIORITY = TaskBase.model_fields["priority"].default


class EditError(ConfigError):
    """An operation cannot apply to this text (unparsable YAML, unknown task, bad path)."""


@dataclass
class Checked:
    """What the validator says about a text, and the graph it describes."""

    valid: bool
    issues: list[Issue]
    graph: dict[str, Any]
    pipeline: Pipeline | None = None
    data: Any = field(default=None, repr=False)


def check_text(text: str, path: str) -> Checked:
    """Validate ``text`` as the pipeline file ``path`` (its suffix picks YAML or JSON)."""
    try:
        doc = parse_source(text, path, as_json=path.lower().endswith(".json"))
    except InvalidPipelineError as exc:
        return Checked(False, exc.issues, graph_of(None))
    try:
        pipeline = pipeline_from_data(doc)
    except InvalidPipelineError as exc:
        return Checked(False, exc.issues, graph_of(doc.data), data=doc.data)
    return Checked(True, [], graph_of(doc.data), pipeline, doc.data)


def issue_json(issue: Issue) -> dict[str, Any]:
    return {
        "path": list(issue.loc),
        "field": format_loc(issue.loc),
        "message": issue.message,
        "hint": issue.hint,
        "line": issue.line,
        "column": issue.column,
    }


def graph_of(data: Any) -> dict[str, Any]:
    """Tasks as nodes and dependencies as edges, read from the raw document.

    From the raw data, not the validated model, so that a file with a bad field elsewhere
    still shows its graph; tasks without a usable ``id`` are left out.
    """
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    nodes: list[dict[str, Any]] = []
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, Mapping) or not isinstance(task.get("id"), str):
            continue
        depends = task.get("depends_on")
        priority = task.get("priority")
        nodes.append(
            {
                "id": task["id"],
                "type": str(task.get("type", "crawl")),
                "priority": priority if isinstance(priority, int) else _DEFAULT_PRIORITY,
                "depends_on": [d for d in depends if isinstance(d, str)]
                if isinstance(depends, list)
                else [],
                "description": task.get("description")
                if isinstance(task.get("description"), str)
                else None,
            }
        )
    ids = {n["id"] for n in nodes}
    edges = [
        {"source": upstream, "target": node["id"]}
        for node in nodes
        for upstream in node["depends_on"]
        if upstream in ids
    ]
    schedule = data.get("schedule") if isinstance(data, Mapping) else None
    return {"nodes": nodes, "edges": edges, "schedule": schedule if schedule else None}


# ---- operations ------------------------------------------------------------------------------


def apply_ops(text: str, ops: Sequence[Mapping[str, Any]]) -> str:
    """``text`` with ``ops`` applied (see docs/console-api.md); unchanged when ``ops`` is empty."""
    if not ops:
        return text
    yaml, data = _load(text)
    if not isinstance(data, CommentedMap):
        raise EditError("the file is not a mapping of pipeline keys: fix the YAML first")
    for number, op in enumerate(ops, 1):
        kind = op.get("op")
        handler = _OPS.get(str(kind))
        if handler is None:
            raise EditError(f"operation {number}: unknown op {kind!r} (one of: {', '.join(_OPS)})")
        try:
            handler(data, op)
        except (KeyError, TypeError, ValueError) as exc:
            raise EditError(f"operation {number} ({kind}): {exc}") from None
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()


def _load(text: str) -> tuple[YAML, Any]:
    try:
        _, sequence, offset = load_yaml_guess_indent(text)
        yaml = YAML(typ="rt")
        yaml.preserve_quotes = True
        yaml.width = _WIDTH
        # The file's own indentation: ruamel's default would move every "- id:" line.
        yaml.indent(mapping=_mapping_indent(text), sequence=sequence or 2, offset=offset or 0)
        return yaml, yaml.load(text)
    except YAMLError as exc:
        raise EditError(f"the YAML cannot be parsed, fix it first: {exc}") from None


_KEY_ONLY = re.compile(r"^( *)[^\s#-][^#:]*:\s*(#.*)?$")
_CONTENT = re.compile(r"^( *)(\S)")


def _mapping_indent(text: str) -> int:
    """How far the file indents a mapping inside a mapping (ruamel guesses only lists')."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        parent = _KEY_ONLY.match(line)
        if parent is None:
            continue
        for following in lines[number + 1 :]:
            child = _CONTENT.match(following)
            if child is None or child.group(2) == "#":
                continue
            depth = len(child.group(1)) - len(parent.group(1))
            if child.group(2) != "-" and depth > 0:
                return depth
            break
    return 2


def _tasks(data: CommentedMap) -> CommentedSeq:
    tasks = data.get("tasks")
    if tasks is None:
        tasks = data["tasks"] = CommentedSeq()
    if not isinstance(tasks, CommentedSeq):
        raise TypeError("`tasks` is not a list")
    return tasks


def _task(data: CommentedMap, task_id: object) -> CommentedMap:
    for task in _tasks(data):
        if isinstance(task, CommentedMap) and task.get("id") == task_id:
            return task
    raise KeyError(f"no task {task_id!r}")


def _ids(data: CommentedMap) -> list[object]:
    return [t.get("id") for t in _tasks(data) if isinstance(t, CommentedMap)]


def _add_task(data: CommentedMap, op: Mapping[str, Any]) -> None:
    task = op.get("task")
    if not isinstance(task, Mapping) or not isinstance(task.get("id"), str):
        raise ValueError("`task` must be an object with a string `id`")
    if task["id"] in _ids(data):
        raise ValueError(f"a task {task['id']!r} exists already")
    _tasks(data).append(_commented(task))


def _remove_task(data: CommentedMap, op: Mapping[str, Any]) -> None:
    tasks = _tasks(data)
    tasks.remove(_task(data, op.get("id")))
    for task in tasks:
        if isinstance(task, CommentedMap):
            for key in _DEPENDENCY_KEYS:
                _drop(task, key, op.get("id"))


def _connect(data: CommentedMap, op: Mapping[str, Any]) -> None:
    source, target = op.get("source"), op.get("target")
    _task(data, source)  # must exist
    task = _task(data, target)
    if source == target:
        raise ValueError("a task cannot depend on itself")
    current = task.get("depends_on")
    if current is None:
        listed = CommentedSeq([source])
        listed.fa.set_flow_style()  # depends_on: [a, b], as people write it
        _insert_after(task, "depends_on", listed, ("type", "id"))
    elif isinstance(current, list):
        if source not in current:
            current.append(source)
    else:
        raise TypeError(f"task {target!r}: depends_on is not a list")


def _disconnect(data: CommentedMap, op: Mapping[str, Any]) -> None:
    _drop(_task(data, op.get("target")), "depends_on", op.get("source"))


def _set(data: CommentedMap, op: Mapping[str, Any]) -> None:
    path = op.get("path")
    if not isinstance(path, list) or not path:
        raise ValueError("`path` must be a non-empty list")
    node: Any = data
    steps = list(path)
    if steps[0] == "tasks" and len(steps) >= 3:  # ["tasks", <id>, field, ...]
        node, steps = _task(data, steps[1]), steps[2:]
    for step in steps[:-1]:
        node = _child(node, step)
    last, value = steps[-1], op.get("value")
    if isinstance(node, list):
        if not isinstance(last, int) or not -len(node) <= last < len(node):
            raise KeyError(f"no item {last!r} in the list at {path}")
        if value is None:
            del node[last]
        else:
            node[last] = _commented(value)
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = _commented(value)


def _child(node: Any, step: object) -> Any:
    if isinstance(node, CommentedMap):
        if step not in node or node[step] is None:
            node[step] = CommentedMap()
        return node[step]
    if isinstance(node, list) and isinstance(step, int) and -len(node) <= step < len(node):
        return node[step]
    raise KeyError(f"cannot step into {step!r}")


def _drop(task: CommentedMap, key: str, value: object) -> None:
    listed = task.get(key)
    if isinstance(listed, list) and value in listed:
        listed.remove(value)
        if not listed:
            del task[key]


def _insert_after(task: CommentedMap, key: str, value: Any, anchors: Iterable[str]) -> None:
    keys = list(task)
    for anchor in anchors:
        if anchor in keys:
            task.insert(keys.index(anchor) + 1, key, value)
            return
    task[key] = value


def _commented(value: Any) -> Any:
    """Plain JSON data as ruamel nodes: small lists of scalars in flow style, like the files."""
    if isinstance(value, Mapping):
        mapped = CommentedMap()
        for key, item in value.items():
            mapped[key] = _commented(item)
        return mapped
    if isinstance(value, list):
        listed = CommentedSeq(_commented(v) for v in value)
        if all(not isinstance(v, (Mapping, list)) for v in value):
            listed.fa.set_flow_style()
        return listed
    return value


_OPS = {
    "add_task": _add_task,
    "remove_task": _remove_task,
    "connect": _connect,
    "disconnect": _disconnect,
    "set": _set,
}
