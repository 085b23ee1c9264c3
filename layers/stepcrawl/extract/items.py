"""Items of a page: each extract rule that applies, per container (or per page), its fields."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from stepcrawl.extract.fields import CompiledField, Scope, compile_field
from stepcrawl.extract.rulecache import IdentityCache
from stepcrawl.extract.structured import PageData, object_item, rule_objects
from stepcrawl.extract.urls import document_base_url
from stepcrawl.pipeline.crawl_rules import ExtractRule

__all__ = ["MAX_PROBLEMS", "ExtractResult", "RuleMatch", "extract_items"]

#: Problems listed per page; the rest are counted in one last line (a listing page of 10,000
#: items with one bad field each would otherwise carry 10,000 near-identical lines).
MAX_PROBLEMS = 50


@dataclass(slots=True)
class ExtractResult:
    """What the extract rules made of one page."""

    items: list[dict[str, Any]] = field(default_factory=list)
    #: Items left out because a required field was missing.
    dropped: int = 0
    #: Values that were found but could not be used (e.g. ``'£abc' is not a valid float``).
    problems: list[str] = field(default_factory=list)
    #: JSON-LD scripts skipped because they are not JSON (:mod:`stepcrawl.extract.structured`).
    invalid_jsonld: int = 0
    #: Per rule that applied to the page (by name): what it matched (the data profile's
    #: per-rule and per-field match shares, :mod:`stepcrawl.quality`).
    matched: dict[str, RuleMatch] = field(default_factory=dict)


@dataclass(slots=True)
class RuleMatch:
    """What one extract rule matched on one page: its items, and the fields found (not
    missing) on at least one item, or on a dropped one."""

    items: int = 0
    found: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Extract:
    kind: str
    match: re.Pattern[str] | None
    container: str | None
    fields: tuple[CompiledField, ...]
    #: structured: and itemtype: (one item per object; :mod:`stepcrawl.extract.structured`).
    structured: str | None = None
    itemtype: Sequence[str] | None = None

    def item(
        self,
        scope: Scope,
        base_url: str,
        problems: list[str],
        data: PageData | None = None,
        current: tuple[str, dict[str, Any]] | None = None,
        match: RuleMatch | None = None,
    ) -> dict[str, Any] | None:
        """The item found in ``scope``, or None if a required field is missing; ``match``
        collects the fields found."""
        if current is not None and not self.fields:
            return object_item(self.kind, current[1], problems)
        item: dict[str, Any] = {"_kind": self.kind}
        for compiled in self.fields:
            found = compiled.extract(scope, base_url, problems, data, current)
            if compiled.is_missing(found):
                if compiled.rule.required:
                    return None
                found = compiled.missing_value()
            elif match is not None:
                match.found.add(compiled.name)
            item[compiled.name] = found
        return item


def _compile(rule: ExtractRule) -> _Extract:
    fields = tuple(compile_field(rule.name, name, f) for name, f in rule.fields.items())
    return _Extract(
        kind=rule.name,
        match=re.compile(rule.match) if rule.match is not None else None,
        container=rule.container,
        fields=fields,
        structured=rule.structured,
        itemtype=rule.itemtype,
    )


_compiled = IdentityCache(_compile)


def _targets(
    extract: _Extract, tree: LexborHTMLParser, data: PageData
) -> list[tuple[Scope, tuple[str, dict[str, Any]] | None]]:
    """Where a rule's items come from: per container element, the page, or (structured) per
    object of its syntax."""
    if extract.structured is not None:
        objects = rule_objects(data, extract.structured, extract.itemtype)
        return [(tree, (extract.structured, obj)) for obj in objects]
    if extract.container is None:
        return [(tree, None)]
    return [(node, None) for node in tree.css(extract.container)]


def extract_items(
    tree: LexborHTMLParser, page_url: str, rules: Sequence[ExtractRule]
) -> ExtractResult:
    """The items that ``rules`` find in the page at ``page_url``.

    A rule with ``match`` applies only if ``re.search(match, page_url)``. It makes one item per
    element matching ``container`` (in document order), or one item for the page without one.
    Each item is ``{"_kind": rule.name, <fields in declared order>}``; the caller adds
    ``_url``, ``_task`` and ``_fetched_at``.

    Field values (see :class:`~stepcrawl.pipeline.models.FieldRule`):

    - ``selector`` matches descendants of the container (or anywhere in the page); without
      one the field reads the container itself (the ``<html>`` element for a page).
    - ``get: text`` is the element's text content (as DOM ``textContent``, so ``a<br>b`` reads
      ``ab``) with whitespace collapsed and stripped;
      ``html`` its outer HTML; ``attr`` the attribute's value as written, except that
      ``href``, ``src``, ``data-src``, ``poster`` and ``action`` values are made absolute
      against the page's ``<base href>`` (else ``page_url``). A valueless attribute is ``""``.
    - ``regex`` is searched in each value and keeps the group named ``value``, else group 1,
      else the whole match; a value it does not match is missing.
    - ``type`` converts each value (see :mod:`stepcrawl.extract.coerce`); a value that does not
      convert is missing, and described in ``problems``.
    - A single field is the first value found in document order; a ``multiple`` one the list
      of all of them.
    - Missing (for ``multiple``: an empty list): a ``required`` field drops the item (counted
      in ``dropped``); otherwise the field is its ``default`` (None, or ``[]`` for
      ``multiple`` unless a default was given).
    - ``get: jsonld|microdata|opengraph`` fields take their ``path`` in the page's objects of
      that syntax; a rule with ``structured`` makes one item per object (of its
      ``itemtype``), its fields reading the object, or the object as it is without fields
      (see :mod:`stepcrawl.extract.structured`).
    """
    result = ExtractResult()
    applicable = [
        compiled
        for compiled in (_compiled(rule) for rule in rules)
        if compiled.match is None or compiled.match.search(page_url)
    ]
    if not applicable:
        return result
    base_url = document_base_url(tree, page_url)
    data = PageData(tree, base_url, page_url, result.problems)  # read on first use
    for extract in applicable:
        match = result.matched.setdefault(extract.kind, RuleMatch())
        for scope, current in _targets(extract, tree, data):
            item = extract.item(scope, base_url, result.problems, data, current, match)
            if item is None:
                result.dropped += 1
            else:
                result.items.append(item)
                match.items += 1
    result.invalid_jsonld = data.invalid_jsonld
    if len(result.problems) > MAX_PROBLEMS:
        more = len(result.problems) - MAX_PROBLEMS
        del result.problems[MAX_PROBLEMS:]
        result.problems.append(f"... and {more} more problems on this page")
    return result
