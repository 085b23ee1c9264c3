"""Structured data of a page: JSON-LD, microdata and OpenGraph objects, and paths into them.

Read from the tree the page was parsed into once (selectolax), lazily, the first time a rule
asks for a syntax:

- **JSON-LD**: every ``<script type="application/ld+json">`` in document order; a script
  holding a list gives its objects, an object with ``@graph`` its members (with the
  object itself if it has a ``@type``). A script that is not JSON (after removing HTML/JS
  comment lines and a CDATA wrapper, as extruct does) is skipped with a problem and a
  warning, never an error.
- **Microdata**: the W3C *microdata to JSON* algorithm: one object per top-level
  ``itemscope`` (not itself a property of an item), ``itemref`` followed, values from
  ``content``/``src``/``href``/``data``/``value``/``datetime`` or the text. An object reads
  like JSON-LD: ``{"@context": "http://schema.org", "@type": "Product", "@id": ...,
  "name": ..., "offers": {"@type": "Offer", ...}}``; a property given twice is a list.
- **OpenGraph**: one object per page from ``<head>``'s ``<meta property content>`` whose
  prefix is OpenGraph's (``og``, ``product``, ``article``, ...) or declared in ``prefix``:
  ``{"@type": <og:type>, "@context": {prefix: IRI}, "og:title": ..., "og:image": [...]}``
  (a repeated property is a list).

These are the shapes of extruct's ``uniform=True`` output (the tests compare with extruct),
except that microdata's ``itemid`` is ``@id`` and text values have their whitespace collapsed
as ``get: text`` does.

A path is a JMESPath expression (``offers.price``; bare ``@type`` is quoted for you) for
JSON-LD and microdata, and the property name for OpenGraph (``og:title``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final
from urllib.parse import urlsplit

import jmespath
from jmespath.parser import ParsedResult
from selectolax.lexbor import LexborHTMLParser, LexborNode

from stepcrawl.extract.coerce import CoercionError
from stepcrawl.extract.urls import absolute_url
from stepcrawl.pipeline.structured import jmespath_expression

__all__ = [
    "OG_NAMESPACES",
    "PageData",
    "StructuredPath",
    "compile_path",
    "type_matches",
]

logger = logging.getLogger("stepcrawl.extract")

Object = dict[str, Any]

#: Prefixes read as OpenGraph without a ``prefix`` declaration (extruct's list).
OG_NAMESPACES: Final = {
    "og": "http://ogp.me/ns#",
    "music": "http://ogp.me/ns/music#",
    "video": "http://ogp.me/ns/video#",
    "article": "http://ogp.me/ns/article#",
    "book": "http://ogp.me/ns/book#",
    "profile": "http://ogp.me/ns/profile#",
    "product": "http://ogp.me/ns/product#",
}
_PREFIX: Final = re.compile(r"\s*(\w+):\s*(\S+)")
#: Lines that make a JSON-LD script invalid JSON but are common: ``// ...``, ``<!-- ... -->``.
_COMMENT_LINE: Final = re.compile(r"^\s*(//.*|<!--.*-->)\s*$", re.MULTILINE)
_CDATA: Final = re.compile(r"^\s*(?://\s*)?<!\[CDATA\[(.*?)(?://\s*)?\]\]>\s*$", re.DOTALL)
_QUOTE_LIMIT = 80

# W3C microdata, "values": the attribute an element's value comes from.
# (attribute, whether it is a URL) by tag; other elements give their text.
_VALUE_ATTR: Final[dict[str, tuple[str, bool]]] = {
    "meta": ("content", False),
    **dict.fromkeys(("audio", "embed", "iframe", "img", "source", "track", "video"), ("src", True)),
    **dict.fromkeys(("a", "area", "link"), ("href", True)),
    "object": ("data", True),
    "data": ("value", False),
    "meter": ("value", False),
    "time": ("datetime", False),
}


@dataclass
class PageData:
    """The structured data of one page, each syntax read on first use."""

    tree: LexborHTMLParser
    base_url: str
    page_url: str
    problems: list[str] = field(default_factory=list)
    #: JSON-LD scripts skipped because they are not JSON (the ``JsonLdSkipped``
    #: metric counts them per recorded page).
    invalid_jsonld: int = 0

    def objects(self, syntax: str) -> list[Object]:
        """The page's top-level objects of ``syntax``, in document order."""
        if syntax == "jsonld":
            return self.jsonld
        if syntax == "microdata":
            return self.microdata
        return self.opengraph

    @cached_property
    def jsonld(self) -> list[Object]:
        found: list[Object] = []
        for n, script in enumerate(self.tree.css("script[type]"), start=1):
            kind = (script.attrs.get("type") or "").split(";")[0].strip().lower()
            if kind != "application/ld+json":
                continue
            data = self._json(script.text(deep=True), n)
            if data is not None:
                found.extend(_top_level(data))
        return found

    def _json(self, text: str, n: int) -> Any:
        if not text.strip():
            return None
        try:
            return json.loads(text, strict=False)
        except ValueError:
            pass
        cleaned = _COMMENT_LINE.sub("", text)
        wrapped = _CDATA.match(cleaned)
        try:
            return json.loads(wrapped[1] if wrapped else cleaned, strict=False)
        except ValueError as exc:
            self.invalid_jsonld += 1
            problem = f"JSON-LD script {n} is not valid JSON ({exc}); skipped"
            self.problems.append(problem)
            logger.warning("%s on %s", problem, self.page_url)
            return None

    @cached_property
    def microdata(self) -> list[Object]:
        return _Microdata(self.tree, self.base_url).items()

    @cached_property
    def opengraph(self) -> list[Object]:
        head = self.tree.head
        if head is None:
            return []
        html = self.tree.css_first("html")
        namespaces = _prefixes(html) if html is not None else {}
        namespaces.update(_prefixes(head))
        flat: Object = {}
        for meta in head.css("head > meta[property][content]"):
            prop = meta.attrs.get("property") or ""
            value = meta.attrs.get("content") or ""
            prefix = prop.partition(":")[0]
            if prefix in OG_NAMESPACES:
                namespaces[prefix] = OG_NAMESPACES[prefix]
            if prefix not in namespaces:
                continue
            _add_og(flat, prop, value)
        if not flat:
            return []
        kind = flat.pop("og:type", None)
        if kind:
            flat["@type"] = kind
        flat["@context"] = namespaces
        return [flat]


def _top_level(data: Any) -> Iterator[Object]:
    """The nodes a JSON-LD script describes: list members, ``@graph`` members."""
    if isinstance(data, list):
        for member in data:
            yield from _top_level(member)
    elif isinstance(data, dict):
        graph = data.get("@graph")
        if graph is None:
            yield data
            return
        if "@type" in data:
            yield data
        yield from _top_level(graph)


def _prefixes(node: LexborNode) -> dict[str, str]:
    return dict(_PREFIX.findall(node.attrs.get("prefix") or ""))


def _add_og(flat: Object, prop: str, value: str) -> None:
    """A property into the flattened object; a repeated one becomes a list (extruct's
    ``with_og_array``: empty values never displace a value)."""
    if prop not in flat:
        flat[prop] = value
        return
    if not value.strip():
        return
    old = flat[prop]
    if isinstance(old, list):
        old.append(value)
    elif old.strip():
        flat[prop] = [old, value]
    else:
        flat[prop] = value


class _Microdata:
    """The W3C microdata-to-JSON algorithm over a selectolax tree."""

    def __init__(self, tree: LexborHTMLParser, base_url: str) -> None:
        self.tree = tree
        self.base_url = base_url
        self._ids: dict[str, LexborNode] | None = None
        #: Items already read (as an object or as another's property, itemref included).
        self._read: set[int] = set()

    def items(self) -> list[Object]:
        """The page's top-level items, in document order: every ``itemscope`` that is no
        property of an item read before it (as extruct reads them)."""
        found = []
        for node in self.tree.css("[itemscope]"):
            if node.mem_id not in self._read and not (
                "itemprop" in node.attrs and _inside_item(node)
            ):
                found.append(self.item(node, top=True))
        return found

    def item(
        self, node: LexborNode, *, top: bool = False, seen: frozenset[int] = frozenset()
    ) -> Object:
        seen = seen | {node.mem_id}
        self._read.add(node.mem_id)
        out: Object = {}
        types = (node.attrs.get("itemtype") or "").split()
        if len(types) == 1:
            context, short = _split_type(types[0])
            if top and context:
                out["@context"] = context
            out["@type"] = short
        elif types:
            if top:
                out["@context"] = "http://schema.org"
            out["@type"] = types
        itemid = (node.attrs.get("itemid") or "").strip()
        if itemid:
            out["@id"] = itemid
        properties: dict[str, list[Any]] = {}
        for prop in self._properties(node):
            value = self._value(prop, seen)
            for name in (prop.attrs.get("itemprop") or "").split():
                properties.setdefault(name, []).append(value)
        for name, values in properties.items():
            out[name] = values[0] if len(values) == 1 else values
        return out

    def _properties(self, node: LexborNode) -> Iterator[LexborNode]:
        yield from _props_below(node)
        for ref in (node.attrs.get("itemref") or "").split():
            target = self._by_id(ref)
            if target is None:
                continue
            if "itemprop" in target.attrs:
                yield target
                if "itemscope" in target.attrs:
                    continue
            yield from _props_below(target)

    def _by_id(self, ident: str) -> LexborNode | None:
        if self._ids is None:
            self._ids = {}
            for node in self.tree.css("[id]"):
                self._ids.setdefault(node.attrs.get("id") or "", node)
        return self._ids.get(ident)

    def _value(self, node: LexborNode, seen: frozenset[int]) -> Any:
        attrs = node.attrs
        if "itemscope" in attrs:
            # An item that (through itemref) contains itself would never end.
            return None if node.mem_id in seen else self.item(node, seen=seen)
        source = _VALUE_ATTR.get(node.tag or "")
        if source is not None:
            name, is_url = source
            return self._url(attrs.get(name)) if is_url else attrs.get(name) or ""
        content = attrs.get("content")
        if content:  # not in the W3C algorithm, but in schema.org's examples
            return content
        return " ".join(node.text(deep=True).split())

    def _url(self, value: str | None) -> str:
        value = (value or "").strip()
        return absolute_url(value, self.base_url) if value else ""


def _inside_item(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None and parent.is_element_node:  # the document has no attributes
        if "itemscope" in parent.attrs:
            return True
        parent = parent.parent
    return False


def _props_below(node: LexborNode) -> Iterator[LexborNode]:
    """Descendants of ``node`` with ``itemprop`` that belong to it: the walk does not go
    into nested items (their own element is a property; its content is theirs)."""
    for child in node.iter():
        if "itemprop" in child.attrs:
            yield child
        if "itemscope" not in child.attrs:
            yield from _props_below(child)


def _split_type(kind: str) -> tuple[str | None, str]:
    """``http://schema.org/Product`` -> (``http://schema.org``, ``Product``), as extruct
    does; a type that is no IRI is kept whole."""
    parts = urlsplit(kind)
    if not parts.netloc:
        return None, kind
    base = f"{parts.scheme}://{parts.netloc}"
    if parts.path and parts.fragment:
        return base + parts.path, parts.fragment.strip("/")
    if parts.path:
        return base, parts.path.strip("/")
    return None, kind


# ------------------------------------------------------------------------------------ types


def _short(kind: str) -> str:
    return re.split(r"[/#:]", kind.rstrip("/"))[-1].casefold()


def _full(kind: str) -> str:
    return re.sub(r"^https?://", "", kind.rstrip("/")).casefold()


def type_matches(wanted: Sequence[str], obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` has one of the ``wanted`` types (``@type``: for OpenGraph its
    og:type). A short name (``Product``) matches any IRI ending in it (``schema:Product``,
    ``https://schema.org/Product``); an IRI matches the same IRI over http or https. Case is
    ignored."""
    found = obj.get("@type")
    kinds = [k for k in (found if isinstance(found, list) else [found]) if isinstance(k, str)]
    for want in wanted:
        if "/" in want:
            if any(_full(k) == _full(want) for k in kinds):
                return True
        elif any(_short(k) == _short(want) for k in kinds):
            return True
    return False


# ------------------------------------------------------------------------------------ paths


@dataclass(frozen=True, slots=True)
class StructuredPath:
    """A field's ``get: jsonld|microdata|opengraph`` with its path, ready to evaluate."""

    syntax: str
    itemtype: tuple[str, ...]
    search: Callable[[Object], Any]
    #: How the field's values are typed: :class:`~stepcrawl.extract.fields.CompiledField`
    #: fills these (regex, group, converter, label) so both paths convert alike.
    regex: re.Pattern[str] | None = None
    group: str | int = 0
    convert: Callable[[str], Any] | None = None
    label: str = ""
    type_name: str = "string"
    #: Whether the rule asked for a type or regex (else JSON numbers, objects stay as-is).
    typed: bool = False

    def values(
        self,
        data: PageData,
        current: tuple[str, Object] | None,
        problems: list[str],
        *,
        first: bool,
    ) -> list[Any]:
        """The field's values: the path's non-null results over the candidate objects, in
        document order (a list result gives its members); only the first if ``first``.

        The candidates are ``current`` (the object of a structured rule, when the field reads
        that rule's syntax) or the page's objects of the field's syntax (and ``itemtype``).
        """
        if current is not None and current[0] == self.syntax:
            candidates = [current[1]]
        else:
            candidates = data.objects(self.syntax)
        if self.itemtype:
            candidates = [c for c in candidates if type_matches(self.itemtype, c)]
        found: list[Any] = []
        for obj in candidates:
            result = self.search(obj)
            for value in result if isinstance(result, list) else [result]:
                if value is None:
                    continue
                ok, converted = self._converted(value, problems)
                if not ok:
                    continue
                found.append(converted)
                if first:
                    return found
        return found

    def _converted(self, value: Any, problems: list[str]) -> tuple[bool, Any]:
        """(whether the value is kept, the value as the field's type)."""
        if isinstance(value, dict | list):
            if self.typed:
                problems.append(f"{self.label}: an object or list is not a valid {self.type_name}")
                return False, None
            return True, value
        if not isinstance(value, str):
            if not self.typed:
                return True, value  # JSON numbers and booleans keep their type
            native = _native(value, self.type_name) if self.regex is None else None
            if native is not None:
                return True, native
            value = json.dumps(value)
        return self._typed_text(value, problems)

    def _typed_text(self, value: str, problems: list[str]) -> tuple[bool, Any]:
        if self.regex is not None:
            match = self.regex.search(value)
            if match is None:
                return False, None
            value = match.group(self.group)
        if self.convert is None:
            return True, value
        try:
            return True, self.convert(value)
        except CoercionError as exc:
            quoted = value if len(value) <= _QUOTE_LIMIT else value[:_QUOTE_LIMIT] + "..."
            problems.append(f"{self.label}: {quoted!r} is not a valid {self.type_name}: {exc}")
            return False, None


def _native(value: Any, type_name: str) -> Any:
    """A JSON number or boolean as ``type_name`` without going through text, if exact."""
    if isinstance(value, bool):
        return value if type_name == "bool" else None
    if type_name == "float":
        return float(value)
    if type_name == "int" and (isinstance(value, int) or float(value).is_integer()):
        return int(value)
    if type_name == "string":
        return json.dumps(value)
    return None


def _property(name: str) -> Callable[[Object], Any]:
    key = "@type" if name == "og:type" else name  # og:type is the object's @type

    def search(obj: Object) -> Any:
        return obj.get(key)

    return search


def compile_path(syntax: str, path: str, itemtype: Sequence[str] | None) -> StructuredPath:
    """``path`` (already validated by the model) compiled for ``syntax``."""
    if syntax == "opengraph":
        search = _property(path)
    else:
        parsed: ParsedResult = jmespath.compile(jmespath_expression(path))
        search = parsed.search
    return StructuredPath(syntax, tuple(itemtype or ()), search)


def rule_objects(data: PageData, syntax: str, itemtype: Sequence[str] | None) -> list[Object]:
    """The objects a structured extract rule makes items of."""
    objects = data.objects(syntax)
    return [o for o in objects if type_matches(itemtype, o)] if itemtype else list(objects)


def object_item(kind: str, obj: Object, problems: list[str]) -> dict[str, Any]:
    """The item of a structured rule without fields: the object as it is. Its keys that
    start with ``_`` are left out (those names are stepcrawl's: ``_url``, ``_kind`` ...)."""
    item: dict[str, Any] = {"_kind": kind}
    for key, value in obj.items():
        if key.startswith("_"):
            problems.append(f"{kind}: key {key!r} left out (names starting with _ are stepcrawl's)")
            continue
        item[key] = value
    return item
