"""One field of an item: select, take text/attr/html, apply the regex, coerce the type."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from stepcrawl.extract.coerce import CoercionError, converter
from stepcrawl.extract.structured import PageData, StructuredPath, compile_path
from stepcrawl.extract.urls import absolute_url
from stepcrawl.pipeline.crawl_rules import FieldRule

__all__ = ["MISSING", "URL_ATTRIBUTES", "CompiledField", "Scope", "compile_field"]

#: Where an item's fields are looked for: the whole page, or one container element.
Scope = LexborHTMLParser | LexborNode

#: Attributes that hold a URL: their values are made absolute against the page's base URL.
URL_ATTRIBUTES: Final = frozenset({"href", "src", "data-src", "poster", "action"})

#: Problems quote at most this much of a value that failed.
_QUOTE_LIMIT = 80


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: The value of a field that found nothing (None can be a real default).
MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class CompiledField:
    """A :class:`FieldRule` made ready to run on many scopes."""

    name: str
    label: str  # kind.field, for problems
    rule: FieldRule
    attr: str | None
    absolute: bool
    regex: re.Pattern[str] | None
    group: str | int
    convert: Callable[[str], Any] | None
    default_set: bool
    #: get: jsonld / microdata / opengraph (:mod:`stepcrawl.extract.structured`).
    path: StructuredPath | None = None

    def extract(
        self,
        scope: Scope,
        base_url: str,
        problems: list[str],
        data: PageData | None = None,
        current: tuple[str, dict[str, Any]] | None = None,
    ) -> Any:
        """The field's value in ``scope``, or :data:`MISSING`; failures go to ``problems``.

        A ``multiple`` field is a list (possibly empty) of every value found; a single field
        is the first value found in document order. A structured field reads ``data`` (the
        page's) or ``current`` (the object of a structured rule), not ``scope``.
        """
        if self.path is not None:
            assert data is not None  # extract_items passes it when a rule needs it
            found = self.path.values(data, current, problems, first=not self.rule.multiple)
            return found if self.rule.multiple else (found[0] if found else MISSING)
        if self.rule.multiple:
            values = [self._value(n, base_url, problems) for n in self._nodes(scope, first=False)]
            return [v for v in values if v is not MISSING]
        for first in (True, False):
            # Usually the first match has the value; only look at all of them if it has not.
            for node in self._nodes(scope, first=first):
                raw = self._raw(node, base_url)
                if raw is not None:
                    return self._converted(raw, problems)
        return MISSING

    def is_missing(self, found: Any) -> bool:
        """True if ``found`` (what :meth:`extract` returned) means nothing was found."""
        return found is MISSING or (self.rule.multiple and not found)

    def missing_value(self) -> Any:
        """The value of the field when nothing was found: its default, else None (or [])."""
        if self.rule.multiple and not self.default_set:
            return []
        default = self.rule.default
        # Items must not share (and so mutate) one default list or dict.
        return copy.deepcopy(default) if isinstance(default, list | dict) else default

    def _nodes(self, scope: Scope, *, first: bool) -> list[LexborNode]:
        selector = self.rule.selector
        if selector is None:
            node = scope.root if isinstance(scope, LexborHTMLParser) else scope
            return [node] if node is not None else []
        if first:
            hit = scope.css_first(selector)
            if hit is None or (isinstance(scope, LexborNode) and hit == scope):
                return []
            return [hit]
        found = scope.css(selector)
        if found and isinstance(scope, LexborNode) and found[0] == scope:
            # lexbor matches the scope element itself; a selector "relative to the container"
            # means its descendants, as querySelectorAll does (selector: none is the container).
            return found[1:]
        return found

    def _raw(self, node: LexborNode, base_url: str) -> str | None:
        """What ``get`` takes from ``node``, after the regex; None if there is nothing."""
        get = self.rule.get
        if get == "text":
            raw = " ".join(node.text(deep=True).split())
        elif get == "html":
            raw = node.html or ""
        else:
            assert self.attr is not None  # FieldRule requires attr with get: attr
            attrs = node.attrs
            if self.attr not in attrs:
                return None
            # A valueless attribute (<input disabled>) is present with the empty string.
            raw = attrs.get(self.attr) or ""
            if self.absolute and raw.strip():
                raw = absolute_url(raw, base_url)
        if self.regex is None:
            return raw
        match = self.regex.search(raw)
        return None if match is None else match.group(self.group)

    def _value(self, node: LexborNode, base_url: str, problems: list[str]) -> Any:
        raw = self._raw(node, base_url)
        return MISSING if raw is None else self._converted(raw, problems)

    def _converted(self, raw: str, problems: list[str]) -> Any:
        if self.convert is None:
            return raw
        try:
            return self.convert(raw)
        except CoercionError as exc:
            quoted = raw if len(raw) <= _QUOTE_LIMIT else raw[:_QUOTE_LIMIT] + "..."
            problems.append(f"{self.label}: {quoted!r} is not a valid {self.rule.type}: {exc}")
            return MISSING


def compile_field(kind: str, name: str, rule: FieldRule) -> CompiledField:
    """``rule`` (the field ``name`` of items of ``kind``) with its regex and converter ready."""
    regex = re.compile(rule.regex) if rule.regex is not None else None
    group: str | int = 0
    if regex is not None:
        group = "value" if "value" in regex.groupindex else min(regex.groups, 1)
    attr = rule.attr.lower() if rule.attr else None
    path = None
    if rule.path is not None:
        path = dataclasses.replace(
            compile_path(rule.get, rule.path, rule.itemtype),
            regex=regex,
            group=group,
            convert=converter(rule.type),
            label=f"{kind}.{name}",
            type_name=rule.type,
            typed=regex is not None or "type" in rule.model_fields_set,
        )
    return CompiledField(
        name=name,
        label=f"{kind}.{name}",
        rule=rule,
        # The HTML parser lower-cases attribute names: data-SKU in a rule means data-sku.
        attr=attr,
        absolute=attr in URL_ATTRIBUTES,
        regex=regex,
        group=group,
        convert=converter(rule.type),
        default_set="default" in rule.model_fields_set,
        path=path,
    )
