"""Crawl rules: which links a crawl task follows and how it turns pages into items.

:class:`FollowRule` picks links, :class:`ExtractRule` makes items (per container, per page or
per structured-data object) and :class:`FieldRule` reads one field of an item.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from stepcrawl.pipeline.render_options import RenderMode
from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.structured import (
    STRUCTURED_SYNTAXES,
    ItemTypes,
    StructuredSyntax,
    check_path,
    structured_shorthand,
)
from stepcrawl.pipeline.types import CssSelector, Identifier, Regex, config_error

__all__ = ["ExtractRule", "FieldRule", "FollowRule"]


class FollowRule(Strict):
    """Which links of a page to follow."""

    selector: CssSelector = Field("a[href]", description="Elements that carry links.")
    attr: str = Field("href", min_length=1, description="Attribute holding the URL.")
    allow: list[Regex] = Field(default_factory=list, description="Follow only URLs matching one.")
    deny: list[Regex] = Field(default_factory=list, description="Never follow URLs matching one.")
    render: RenderMode | None = Field(
        None,
        description="browser: load the pages whose URL matches allow (and no deny) in headless "
        "Chromium (pipeline/render_options.py); default: plain fetch.",
    )


class FieldRule(Strict):
    """How to get one field of an item out of the page (or out of the item's container)."""

    selector: CssSelector | None = Field(None, description="Relative to the container; none = it.")
    get: Literal["text", "attr", "html", "jsonld", "microdata", "opengraph"] = "text"
    attr: str | None = Field(None, description="Attribute name, required when get is attr.")
    path: str | None = Field(
        None,
        min_length=1,
        description="get: jsonld or microdata: a JMESPath into the object (offers.price); "
        "get: opengraph: the property (og:title).",
    )
    itemtype: ItemTypes | None = Field(
        None, description="Structured gets: read only objects of this type (e.g. Product)."
    )
    multiple: bool = Field(False, description="Collect every match into a list.")
    required: bool = Field(False, description="Drop the item (and count it) if this is missing.")
    type: Literal["string", "int", "float", "bool", "date", "datetime"] = "string"
    regex: Regex | None = Field(
        None, description="Keep the named group 'value', else group 1, else the whole match."
    )
    default: JsonValue = Field(None, description="Value when nothing matched.")

    @model_validator(mode="before")
    @classmethod
    def _selector_shorthand(cls, data: Any) -> Any:
        # `title: "h1"` is the common case; spelling it out every time is noise.
        return {"selector": data} if isinstance(data, str) else data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Editors must accept the shorthand too: a bare string is a selector taken as text.
        shorthand = {
            "type": "string",
            "minLength": 1,
            "description": "CSS selector, get: text (in a structured rule: a path)",
        }
        return {"anyOf": [shorthand, handler(core_schema)]}

    @model_validator(mode="after")
    def _attr_when_needed(self) -> Self:
        if self.get == "attr" and not self.attr:
            raise config_error(
                "attr", "get: attr needs the attribute's name", "add attr: NAME (e.g. attr: href)"
            )
        if self.get != "attr" and self.attr:
            raise config_error(
                "attr",
                f"attr is only used with get: attr (this field has get: {self.get})",
                "add get: attr or remove attr",
            )
        if self.required and self.default is not None:
            raise config_error(
                "default",
                "a required field cannot have a default",
                "keep one of the two: required drops items without it, default fills it in",
            )
        self._structured_keys()
        return self

    def _structured_keys(self) -> None:
        """``path`` and ``itemtype`` go with (and only with) get: jsonld/microdata/opengraph."""
        if self.get not in STRUCTURED_SYNTAXES:
            if self.path is not None or self.itemtype is not None:
                raise config_error(
                    "path",
                    f"path and itemtype are only used with structured data (get: {self.get})",
                    "add get: jsonld, microdata or opengraph, or remove them",
                )
            return
        if self.path is None:
            raise config_error(
                "path",
                f"get: {self.get} needs the path of the value",
                "add path: e.g. offers.price (JSON-LD, microdata) or og:title (OpenGraph)",
            )
        if self.selector is not None:
            raise config_error(
                "selector",
                f"get: {self.get} reads the page's structured data, not elements",
                "remove selector (the path says where the value is)",
            )
        check_path(self.get, self.path)


class ExtractRule(Strict):
    """Turns matching pages into items: one per container match, or one per page (or, with
    ``structured``, one per JSON-LD / microdata / OpenGraph object)."""

    name: Identifier = Field("item", description="Item kind, stored as _kind.")
    match: Regex | None = Field(None, description="Apply only to page URLs matching this.")
    container: CssSelector | None = Field(None, description="One item per match; none = page.")
    structured: StructuredSyntax | None = Field(
        None,
        description="One item per object of this syntax (with itemtype: of those types); "
        "fields are paths into it, or without fields the item is the object as it is.",
    )
    itemtype: ItemTypes | None = Field(None, description="structured: only these types.")
    fields: dict[str, FieldRule] = Field(
        default_factory=dict, description="Required unless the rule is structured."
    )

    _structured_shorthand = model_validator(mode="before")(structured_shorthand)

    @model_validator(mode="after")
    def _structured_rule(self) -> Self:
        if self.structured is None:
            if self.itemtype is not None:
                raise config_error(
                    "itemtype",
                    "itemtype picks the objects of a structured rule",
                    "add structured: jsonld (or microdata, opengraph), or remove itemtype",
                )
            if not self.fields:
                raise config_error(
                    "fields",
                    f"extract rule {self.name!r} has no fields",
                    "add fields: {NAME: CSS selector, ...}, or structured: jsonld (or "
                    "microdata, opengraph) for one item per object",
                )
        elif self.container is not None:
            raise config_error(
                "container",
                "a structured rule makes one item per object, not per container",
                "remove container (itemtype picks the objects)",
            )
        return self

    @field_validator("fields")
    @classmethod
    def _field_names(cls, value: dict[str, FieldRule]) -> dict[str, FieldRule]:
        for name in value:
            if not name or name.startswith("_"):
                raise config_error(
                    "field_name",
                    f"field name {name!r} is reserved or empty",
                    "rename it: names starting with _ are stepcrawl's own "
                    "(_url, _task, _fetched_at)",
                )
        return value
