"""The pipeline keys of structured data (JSON-LD, microdata, OpenGraph): types and checks.

The models (:mod:`stepcrawl.pipeline.crawl_rules`) use these; the extraction itself is
:mod:`stepcrawl.extract.structured`. Paths are JMESPath expressions (jmespath.org) for
JSON-LD and microdata, and a property name for OpenGraph (``og:title``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, get_args

import jmespath
from jmespath.exceptions import JMESPathError
from pydantic import BeforeValidator, Field, WithJsonSchema

from stepcrawl.pipeline.types import config_error

__all__ = [
    "STRUCTURED_SYNTAXES",
    "ItemTypes",
    "StructuredSyntax",
    "check_path",
    "jmespath_expression",
    "structured_shorthand",
]

#: What ``get:`` (of a field) and ``structured:`` (of an extract rule) may read.
StructuredSyntax = Literal["jsonld", "microdata", "opengraph"]
STRUCTURED_SYNTAXES: Final[tuple[str, ...]] = get_args(StructuredSyntax)

#: A key starting with ``@`` written bare (``@type``, ``offers.@id``): never valid JMESPath
#: (a lone ``@`` is the current node), so it is quoted for the user.
_BARE_AT_KEY: Final = re.compile(r"(?<![\w\"'`@])@([A-Za-z_][\w-]*)")
#: An OpenGraph property as written in ``<meta property=...>``: ``og:title``,
#: ``og:image:width``, ``product:price:amount``.
_OG_PROPERTY: Final = re.compile(r"[A-Za-z][\w-]*:[\w:.-]*[\w.-]")


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


ItemTypes = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    BeforeValidator(_one_or_many),
    Field(min_length=1),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ],
            "description": "A type (schema.org name like Product, or a full IRI; for "
            "OpenGraph its og:type) or a list of them: only objects of one of these types.",
        }
    ),
]


def check_path(syntax: str, path: str) -> None:
    """Raise a located config error if ``path`` is not a valid path for ``syntax``."""
    if syntax == "opengraph":
        if not _OG_PROPERTY.fullmatch(path):
            raise config_error(
                "path",
                f"{path!r} is not an OpenGraph property",
                "write the property as the page does: og:title, og:image, product:price:amount",
            )
        return
    try:
        jmespath.compile(jmespath_expression(path))
    except JMESPathError as exc:
        column = getattr(exc, "lex_position", None)
        where = f" at column {column + 1}" if isinstance(column, int) else ""
        raise config_error(
            "path",
            f"{path!r} is not a valid JMESPath expression{where}",
            "e.g. name, offers.price, offers[0].price, image[*].url, @type; quote other keys "
            'that are not plain names: "og:title", "content-url"',
        ) from None


def jmespath_expression(path: str) -> str:
    """``path`` as JMESPath source: bare ``@`` keys quoted (``@type`` -> ``"@type"``)."""
    return _BARE_AT_KEY.sub(r'"@\1"', path)


def structured_shorthand(data: Any) -> Any:
    """In an extract rule with ``structured:``, a field written as a string is a path into
    the object (not a CSS selector), and a field with a ``path`` but no ``get`` reads the
    rule's syntax: ``{name: name, price: {path: offers.price, type: float}}``."""
    if not isinstance(data, dict):
        return data
    syntax = data.get("structured")
    fields = data.get("fields")
    if syntax not in STRUCTURED_SYNTAXES or not isinstance(fields, dict):
        return data
    rewritten: dict[Any, Any] = {}
    for name, rule in fields.items():
        if isinstance(rule, str):
            rewritten[name] = {"get": syntax, "path": rule}
        elif isinstance(rule, dict) and "get" not in rule and "selector" not in rule:
            rewritten[name] = {**rule, "get": syntax}
        else:
            rewritten[name] = rule
    return {**data, "fields": rewritten}
