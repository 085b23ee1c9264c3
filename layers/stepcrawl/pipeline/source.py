"""Read pipeline files (YAML or JSON) keeping the line of every value, for precise errors.

PyYAML's ``safe_load`` forgets positions and silently keeps the last of two equal keys, so we
compose the node graph ourselves: each value's ``(line, column)`` is recorded under its field
path, and a repeated key is an error that names both lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stepcrawl.errors import InvalidPipelineError, Issue, Loc

__all__ = ["Mark", "SourceDocument", "load_source", "parse_source"]

YAML_SUFFIXES = frozenset({".yaml", ".yml"})


@dataclass(frozen=True)
class Mark:
    """1-based position of a value in its file."""

    line: int
    column: int


@dataclass
class SourceDocument:
    """Plain data (dicts, lists, scalars) plus where each value came from."""

    data: Any
    path: str
    marks: dict[Loc, Mark] = field(default_factory=dict)

    def mark_for(self, loc: Loc) -> Mark | None:
        """Position of ``loc``, or of its nearest enclosing value that has one."""
        for end in range(len(loc), -1, -1):
            mark = self.marks.get(tuple(loc[:end]))
            if mark is not None:
                return mark
        return None

    def locate(self, issue: Issue) -> Issue:
        """The issue with this document's line and column filled in."""
        mark = self.mark_for(issue.loc)
        if mark is None or issue.line is not None:
            return issue
        return Issue(issue.loc, issue.message, issue.hint, mark.line, mark.column, issue.extra)


def load_source(path: str | Path) -> SourceDocument:
    """Read a ``.yaml``/``.yml``/``.json`` file; :class:`InvalidPipelineError` if unreadable."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # -sig: a BOM is not content
    except FileNotFoundError:
        raise InvalidPipelineError(
            [Issue((), "file not found", "check the path; pass a .yaml, .yml or .json file")],
            p,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidPipelineError([Issue((), f"cannot read file: {exc}")], p) from None
    return parse_source(text, str(p), as_json=p.suffix.lower() == ".json")


_YAML11_SCALARS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's plain scalars.

    YAML 1.1 reads ``timeout: 1:30`` as 90 (base 60) and ``obey_robots: no`` or ``on`` as
    booleans; YAML 1.2, and every modern editor, reads them as strings. A pipeline should
    mean what its author sees, so booleans are only true/false and numbers have no base 60.
    """

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's own class attribute
        first: [
            (tag, regexp)
            for tag, regexp in resolvers
            if tag
            not in {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
        ]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def parse_source(text: str, path: str, *, as_json: bool = False) -> SourceDocument:
    """Parse YAML (a superset of JSON) or strict JSON text into a :class:`SourceDocument`."""
    if as_json:
        return _parse_json(text, path)
    try:
        node = yaml.compose(text, Loader=_Yaml12Loader)
    except yaml.MarkedYAMLError as exc:
        raise InvalidPipelineError([_yaml_issue(exc)], path) from None
    except yaml.YAMLError as exc:  # e.g. a control character the reader refuses
        raise InvalidPipelineError([Issue((), f"invalid YAML: {exc}")], path) from None
    doc = SourceDocument(None, path)
    builder = _Builder(doc.marks)
    if node is not None:
        doc.data = builder.build(node, ())
    if builder.problems:
        raise InvalidPipelineError(builder.problems, path)
    return doc


def _yaml_issue(exc: yaml.MarkedYAMLError) -> Issue:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or str(exc)
    if exc.context and exc.problem:
        what = f"{exc.context}, {exc.problem}"  # e.g. "while scanning a quoted scalar, ..."
    return Issue(
        (),
        f"invalid YAML: {what}",
        "check indentation and quoting near this line",
        mark.line + 1 if mark else None,
        mark.column + 1 if mark else None,
    )


def _parse_json(text: str, path: str) -> SourceDocument:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out

    try:
        doc = SourceDocument(json.loads(text, object_pairs_hook=pairs), path)
    except json.JSONDecodeError as exc:
        issue = Issue(
            (),
            f"invalid JSON: {exc.msg}",
            "check commas, quotes and brackets near this position",
            exc.lineno,
            exc.colno,
        )
        raise InvalidPipelineError([issue], path) from None
    # JSON keeps no positions; YAML, a superset of JSON, reads the same text with them.
    try:
        node = yaml.compose(text, Loader=_Yaml12Loader)
    except yaml.YAMLError:
        node = None  # valid JSON that PyYAML does not take (tabs): no line numbers then
    builder = _Builder(doc.marks)
    if node is not None:
        builder.build(node, ())
    problems = builder.problems or [
        Issue((), f"duplicate key {key!r}", "remove one of them; JSON readers keep only the last")
        for key in duplicates
    ]
    if problems:
        raise InvalidPipelineError(problems, path)
    return doc


class _Builder:
    """Turns a composed YAML node graph into plain data, recording marks and duplicate keys."""

    def __init__(self, marks: dict[Loc, Mark]) -> None:
        self.marks = marks
        self.problems: list[Issue] = []
        # One constructor turns scalar nodes into Python values with YAML's safe tag rules.
        self._constructor = _Yaml12Loader("")
        self._open: set[int] = set()  # collections being built: an alias back into one loops

    def build(self, node: yaml.Node, loc: Loc, mark: Mark | None = None) -> Any:
        self.marks[loc] = mark or _mark(node)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if id(node) in self._open:
            self._problem(
                loc,
                node,
                "an alias refers to the value that contains it (it would never end)",
                "write the value out instead of the *alias",
            )
            return None
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, loc)
            return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _problem(self, loc: Loc, node: yaml.Node, message: str, hint: str) -> None:
        line, column = _position(node)
        self.problems.append(Issue(loc, message, hint or None, line, column))

    def _scalar(self, node: yaml.ScalarNode, loc: Loc) -> Any:
        if node.tag == _TIMESTAMP:
            # Pipelines hold JSON data: a date stays the text it was written as.
            return node.value
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            self._problem(
                loc,
                node,
                f"cannot read this value: {problem}",
                "remove the !tag or quote the value; pipelines hold plain strings, numbers, "
                "booleans, lists and mappings",
            )
            return None

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for key_node, value_node, merged in self._entries(node, loc):
            if not isinstance(key_node, yaml.ScalarNode):
                self._problem(
                    loc,
                    key_node,
                    "a key must be a plain value, not a list or mapping",
                    "write keys as simple words such as name:",
                )
                continue
            key = self._scalar(key_node, loc)
            if key is None and key_node.tag != _NULL:
                continue  # unreadable key, reported
            line = key_node.start_mark.line + 1
            if key in first_line:
                if not merged:  # a merged key is overridden by design, not by mistake
                    self._problem(
                        (*loc, str(key)),
                        key_node,
                        f"duplicate key {key!r} (first defined on line {first_line[key]})",
                        "remove one of them; most readers would silently keep only the last",
                    )
                continue
            first_line[key] = line
            child = key if isinstance(key, str | int) else str(key)
            # A value that starts on a later line (a block mapping or list) is located at its
            # key: that is the line to look at when the whole value is wrong or unknown.
            same_line = value_node.start_mark.line == key_node.start_mark.line
            out[key] = self.build(value_node, (*loc, child), None if same_line else _mark(key_node))
        return out

    def _entries(
        self, node: yaml.MappingNode, loc: Loc, *, merged: bool = False
    ) -> Iterator[tuple[yaml.Node, yaml.Node, bool]]:
        """Key and value nodes: the mapping's own first, then those of ``<<: *anchor`` merges.

        ``merged`` tells them apart: an own key wins over a merged one, and among merged
        keys the first source wins, as YAML's merge-key type defines.
        """
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.append(value_node)
            else:
                yield key_node, value_node, merged
        for value_node in merges:
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in sources:
                if id(source) in self._open:
                    self._problem(
                        loc,
                        source,
                        "<< merges a mapping into itself",
                        "merge an anchor defined outside this mapping",
                    )
                elif isinstance(source, yaml.MappingNode):
                    yield from self._entries(source, loc, merged=True)
                else:
                    self._problem(
                        loc,
                        source,
                        "<< can only merge mappings",
                        "write <<: *anchor where &anchor names a mapping (or a list of them)",
                    )


_MERGE = "tag:yaml.org,2002:merge"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _mark(node: yaml.Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


def _position(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1
