"""The pipeline schema: pydantic models that are both the file format and the Python DSL.

A YAML file and a tree of these models are two spellings of the same pipeline; every check
(field types, CSS, regexes, cron, the task graph) runs in both.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Annotated, Any, Final, Literal, Self, TypeVar
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, available_timezones

from jsonschema import Draft202012Validator, SchemaError
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from stepcrawl.errors import Issue, ScheduleExpressionError
from stepcrawl.pipeline.graph import Dag, InvalidGraphError, TaskNode, check_graph
from stepcrawl.pipeline.render_keys import (
    DEFAULT_RENDER_TIMEOUT,
    MAX_RENDER_TIMEOUT,
    MIN_RENDER_TIMEOUT,
    RenderMode,
    WaitFor,
    check_render_keys,
)
from stepcrawl.pipeline.request_keys import (
    Cookies,
    ProxySettings,
    RequestHeaders,
    check_request_keys,
    scrub_request_secrets,
)
from stepcrawl.pipeline.schedule_expr import parse_schedule
from stepcrawl.pipeline.structured import (
    STRUCTURED_SYNTAXES,
    ItemTypes,
    StructuredSyntax,
    check_path,
    structured_shorthand,
)
from stepcrawl.pipeline.transforms import TransformOp
from stepcrawl.pipeline.types import (
    CssSelector,
    Domain,
    Duration,
    HttpUrl,
    Identifier,
    PipelineName,
    Regex,
    config_error,
)

__all__ = [
    "CrawlTask",
    "Defaults",
    "DynamoDBTarget",
    "ExtractRule",
    "FieldRule",
    "FollowRule",
    "Limits",
    "LoadTask",
    "MergeSpec",
    "Pipeline",
    "Politeness",
    "RetryPolicy",
    "S3Target",
    "Schedule",
    "Task",
    "TaskSettings",
    "TransformTask",
    "ValidateTask",
]

_M = TypeVar("_M", bound=BaseModel)

DEFAULT_USER_AGENT = "stepcrawl/0.1 (+https://github.com/stepcrawl/stepcrawl)"


class Strict(BaseModel):
    """Base of every schema model: unknown keys are errors (they are almost always typos)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# ---------------------------------------------------------------- settings inherited from defaults


class RetryPolicy(Strict):
    """How often and how patiently failed work is retried (by the workers, never by ASL)."""

    max_attempts: int = Field(3, ge=1, le=20, description="Tries per URL or stage, first included.")
    base_delay: Duration = Field(1.0, description="First backoff delay; doubles per attempt.")
    max_delay: Duration = Field(300.0, le=43200, description="Cap of one backoff delay.")
    max_retry_after: Duration = Field(
        3600.0, le=86400, description="Cap of a server's Retry-After (it pauses the whole host)."
    )
    reclassify: dict[int, Literal["transient", "throttle", "fatal"]] = Field(
        default_factory=dict,
        description="HTTP status -> failure class, overriding the built-in table "
        "(e.g. 403: transient for a flaky WAF).",
    )

    @field_validator("reclassify")
    @classmethod
    def _statuses(
        cls, value: dict[int, Literal["transient", "throttle", "fatal"]]
    ) -> dict[int, Literal["transient", "throttle", "fatal"]]:
        for status in value:
            if not 400 <= status <= 599:
                raise config_error(
                    "reclassify",
                    f"{status} is not an HTTP error status",
                    "reclassify statuses 400-599 (successes and redirects are not failures)",
                )
        return value

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        # A task's retry sets only the keys it overrides: the other one may come from the
        # defaults, so the pipeline checks the effective pair (Pipeline._settings_issues).
        if {"base_delay", "max_delay"} <= self.model_fields_set:
            _check_delays(self)
        return self


def _check_delays(policy: RetryPolicy) -> None:
    if policy.base_delay > policy.max_delay:
        raise config_error(
            "delays",
            f"base_delay ({policy.base_delay:g}s) must not exceed max_delay "
            f"({policy.max_delay:g}s)",
            "lower base_delay or raise max_delay",
        )


class Politeness(Strict):
    """How gently a crawl treats each site."""

    delay: Duration = Field(1.0, le=3600, description="Minimum gap between requests to one host.")
    obey_robots: bool = Field(True, description="Fetch and honour robots.txt and its Crawl-delay.")
    user_agent: str = Field(DEFAULT_USER_AGENT, min_length=1, max_length=512)
    per_host_concurrency: int = Field(2, ge=1, le=64, description="Requests in flight per host.")
    give_up_after: Duration | None = Field(
        300.0,
        ge=1,
        le=7 * 86400,
        description="A host whose circuit breaker has stayed open this long is given up: its "
        "waiting and future URLs end failed, class host_down (null: wait for it as long as the "
        "task runs).",
    )


class Limits(Strict):
    """Hard bounds of a crawl; enforced exactly even with many concurrent workers."""

    max_depth: int = Field(3, ge=0, le=100, description="Link hops from a seed (seeds are 0).")
    max_pages: int = Field(1000, ge=1, le=100_000_000, description="Pages fetched per run.")
    max_bytes_per_page: ByteSize = Field(
        ByteSize(5_000_000), ge=1024, le=200_000_000, description="Body cap, e.g. 5MB."
    )
    max_error_ratio: float = Field(
        0.1, ge=0, le=1, description="The task fails if more than this share of pages failed."
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Estimated AWS spend (USD) at which the task stops fetching; it then "
        "ends succeeded, stopped: budget_exhausted.",
    )


class Defaults(Strict):
    """Settings every task inherits; a task overrides only the keys it sets."""

    retry: RetryPolicy = RetryPolicy()
    politeness: Politeness = Politeness()
    limits: Limits = Limits()
    timeout: Duration = Field(6 * 3600, ge=1, le=365 * 86400, description="Per task.")
    heartbeat: Duration = Field(
        600, ge=1, description="A task with no sign of life for this long fails (States.Timeout)."
    )


class TaskSettings(BaseModel):
    """A task's effective settings: its own keys layered over the pipeline defaults."""

    model_config = ConfigDict(frozen=True)

    retry: RetryPolicy
    politeness: Politeness
    limits: Limits
    timeout: float
    heartbeat: float


# ------------------------------------------------------------------------------- crawl rules


class FollowRule(Strict):
    """Which links of a page to follow."""

    selector: CssSelector = Field("a[href]", description="Elements that carry links.")
    attr: str = Field("href", min_length=1, description="Attribute holding the URL.")
    allow: list[Regex] = Field(default_factory=list, description="Follow only URLs matching one.")
    deny: list[Regex] = Field(default_factory=list, description="Never follow URLs matching one.")
    render: RenderMode | None = Field(
        None,
        description="browser: load the pages whose URL matches allow (and no deny) in headless "
        "Chromium (pipeline/render_keys.py); default: plain fetch.",
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


# ------------------------------------------------------------------------------------ tasks


class TaskBase(Strict):
    """Keys every task has."""

    id: Identifier
    description: str = ""
    depends_on: list[Identifier] = Field(
        default_factory=list, description="Tasks that must succeed before this one starts."
    )
    priority: int = Field(
        100, ge=0, le=10_000, description="Lower runs first among tasks ready together."
    )
    inputs: list[Identifier] | None = Field(
        None, description="Upstream tasks whose items this consumes; default: depends_on."
    )
    timeout: Duration | None = Field(None, ge=1, le=365 * 86400)
    heartbeat: Duration | None = Field(None, ge=1)
    retry: RetryPolicy | None = None

    @property
    def consumes(self) -> list[str]:
        """Upstream task ids whose items this task reads."""
        return list(self.depends_on if self.inputs is None else self.inputs)

    def graph_node(self) -> TaskNode:
        kind = str(getattr(self, "type", ""))
        return TaskNode(self.id, self.priority, tuple(self.depends_on), tuple(self.consumes), kind)


#: ``sitemaps: [robots]``: the sitemaps the seeds' sites list in their robots.txt.
SITEMAPS_FROM_ROBOTS: Final = "robots"


def _check_sitemap_source(value: str) -> str:
    text = value.strip()
    if text.lower() == SITEMAPS_FROM_ROBOTS:
        return SITEMAPS_FROM_ROBOTS
    parts = urlsplit(text)
    if parts.scheme in {"http", "https"} and parts.hostname:
        return text
    raise config_error(
        "sitemap",
        f"{value!r} is neither a sitemap URL nor robots",
        "write an absolute URL (https://example.com/sitemap.xml), or robots to take the "
        "sitemaps the site lists in its robots.txt",
    )


SitemapSource = Annotated[
    str,
    AfterValidator(_check_sitemap_source),
    WithJsonSchema(
        {
            "anyOf": [
                {"const": SITEMAPS_FROM_ROBOTS},
                {"type": "string", "pattern": "^https?://", "format": "uri"},
            ],
            "description": "A sitemap URL, or robots (the Sitemap: lines of robots.txt).",
        }
    ),
]


def _parse_since(value: Any) -> Any:
    """A date or a date and time (ISO 8601) -> an aware datetime (UTC unless it says)."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not ISO 8601: refused below, with a hint
            value = datetime.fromisoformat(value.strip())
    if not isinstance(value, date):  # a number is no date (pydantic would read epoch seconds)
        raise config_error(
            "sitemap_since",
            f"{value!r} is not a date or a date and time",
            "write 2026-05-01 or 2026-05-01T12:00:00Z (ISO 8601; UTC unless an offset is given)",
        )
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


SitemapSince = Annotated[
    datetime,
    BeforeValidator(_parse_since),
    WithJsonSchema(
        {
            "type": "string",
            "anyOf": [{"format": "date"}, {"format": "date-time"}],
            "description": "A date (2026-05-01) or a date and time (2026-05-01T12:00:00Z).",
        }
    ),
]


class CrawlTask(TaskBase):
    """Fetch pages from seeds, follow links, extract items."""

    type: Literal["crawl"] = "crawl"
    seeds: list[HttpUrl] = Field(default_factory=list, description="Start URLs.")
    seed_field: str | None = Field(
        None, description="Also seed from this field of the items of `inputs` (URLs)."
    )
    allowed_domains: list[Domain] = Field(
        default_factory=list, description="Hosts to stay on; default: the seeds' hosts."
    )
    follow: list[FollowRule] = Field(default_factory=list)
    extract: list[ExtractRule] = Field(default_factory=list)
    limits: Limits | None = None
    politeness: Politeness | None = None
    # Incremental recrawls (crawl/incremental.py, docs/pipelines.md "Incremental recrawls").
    incremental: bool = Field(
        False,
        description="Keep each page's validators (ETag, Last-Modified), items fingerprint and "
        "links across runs: later runs send conditional requests, and a known page that now "
        "answers 404 or 410 yields a tombstone item.",
    )
    incremental_ttl: Duration = Field(
        30 * 86400,
        ge=3600,
        le=366 * 86400,
        description="How long a page's kept state lives without a refresh (1h to 366d); a page "
        "not seen for this long is new again.",
    )
    emit: Literal["changed", "all"] | None = Field(
        None,
        description="Incremental tasks only: changed (the default) writes the items of new and "
        "changed pages only; all writes every page's items (no conditional requests then).",
    )
    allow_private_network: bool = Field(
        False,
        description="Allow private, loopback and link-local addresses (local sites, tests). "
        "Off by default: a crawler must not be steered into the network it runs in.",
    )
    sitemaps: list[SitemapSource] = Field(
        default_factory=list,
        description="Sitemaps to take page URLs from (indexes followed, gzip read), or the "
        "word robots: the Sitemap: lines of the robots.txt of the seeds' sites.",
    )
    sitemap_since: SitemapSince | None = Field(
        None,
        description="Skip sitemap entries whose lastmod is before this date or time (UTC "
        "unless it has an offset); entries without lastmod are kept.",
    )
    archive: Literal["warc"] | None = Field(
        None,
        description="warc: keep every response fetched (and its request) as WARC records, "
        "one archive/<pipeline>/<run>/<task>/<bundle>.warc.gz per parse bundle "
        "(stepcrawl replay re-runs extraction over them).",
    )
    headers: RequestHeaders = Field(
        default_factory=dict,
        description="Request headers sent with every request to the task's own hosts "
        "(robots.txt and sitemaps included); docs/pipelines.md, Headers, cookies and proxies.",
    )
    cookies: Cookies = Field(
        default_factory=dict,
        description="Cookies (name: value) sent as one Cookie header to the task's own hosts.",
    )
    proxy: ProxySettings | None = Field(
        None,
        description="Proxies for the task's requests (a URL, a list, or {urls, secret}): each "
        "host always goes through the same one; credentials from a Secrets Manager secret.",
    )

    # Browser rendering (pipeline/render_keys.py, docs/pipelines.md "Browser rendering").
    render: RenderMode | None = Field(
        None,
        description="browser: load every page in headless Chromium and extract from the "
        "rendered DOM (a follow rule can render only some pages); default: plain fetch.",
    )
    wait_for: WaitFor | None = Field(
        None,
        description="When a rendered page is ready: a CSS selector it must contain, "
        "networkidle, or load (its load event); default: when the item selector of an extract "
        "rule that applies to it matches (a page no rule applies to: network idle for 500 ms).",
    )
    render_timeout: Duration = Field(
        DEFAULT_RENDER_TIMEOUT,
        ge=MIN_RENDER_TIMEOUT,
        le=MAX_RENDER_TIMEOUT,
        description="A rendered page's whole budget (load, wait_for, DOM), 1s to 120s: a page "
        "not ready by then ends failed (render_timeout), as does, without wait_for, a page a "
        "rule's match selected whose item selectors never matched.",
    )

    @model_validator(mode="after")
    def _render_keys(self) -> Self:
        check_render_keys(self)
        return self

    @model_validator(mode="before")
    @classmethod
    def _scrub_request_secrets(cls, data: Any) -> Any:
        # before any check: no error text may quote a proxy URL's password
        return scrub_request_secrets(data)

    @model_validator(mode="after")
    def _request_keys(self) -> Self:
        check_request_keys(self.headers, self.cookies)
        return self

    @property
    def sitemap_urls(self) -> list[str]:
        """The sitemap URLs the task names itself (``robots`` aside)."""
        return [source for source in self.sitemaps if source != SITEMAPS_FROM_ROBOTS]

    @property
    def emits_all(self) -> bool:
        """Whether every page's items are written (not incremental, or ``emit: all``)."""
        return not self.incremental or self.emit == "all"

    @model_validator(mode="after")
    def _incremental_keys(self) -> Self:
        for key in ("emit", "incremental_ttl"):
            if key in self.model_fields_set and not self.incremental:
                raise config_error(
                    key,
                    f"crawl task {self.id!r} sets {key} but is not incremental",
                    f"add incremental: true, or remove {key} (it applies to incremental "
                    "recrawls only)",
                )
        return self

    @property
    def consumes(self) -> list[str]:
        # A crawl only reads upstream items when it is seeded from them.
        if self.seed_field is None:
            return list(self.inputs or [])
        return super().consumes

    @model_validator(mode="after")
    def _has_seeds(self) -> Self:
        if not self.seeds and self.seed_field is None and not self.sitemaps:
            raise config_error(
                "seeds",
                f"crawl task {self.id!r} has nothing to start from",
                "add seeds: [URL, ...], seed_field: FIELD to seed from the items of inputs, "
                "or sitemaps: [URL, ...]",
            )
        if self.inputs and self.seed_field is None:
            raise config_error(
                "inputs",
                f"crawl task {self.id!r} has inputs but no seed_field",
                "a crawl reads its inputs only for seed URLs: set seed_field: FIELD",
            )
        if self.seed_field is not None and not self.consumes:
            raise config_error(
                "seed_field",
                f"crawl task {self.id!r} has seed_field but nothing to read it from",
                "set depends_on (or inputs) to the tasks whose items carry the URLs",
            )
        if self.seed_field is not None and not self.seeds and not self.allowed_domains:
            raise config_error(
                "allowed_domains",
                f"crawl task {self.id!r} is seeded from items, so its hosts are unknown",
                "list the hosts it may visit in allowed_domains (otherwise it could go anywhere)",
            )
        return self

    @model_validator(mode="after")
    def _sitemap_keys(self) -> Self:
        if self.sitemap_since is not None and not self.sitemaps:
            raise config_error(
                "sitemap_since",
                f"crawl task {self.id!r} has sitemap_since but reads no sitemaps",
                "add sitemaps: [URL, ...] (or [robots]), or remove sitemap_since",
            )
        robots = SITEMAPS_FROM_ROBOTS in self.sitemaps
        if robots and not self.seeds and self.seed_field is None and not self.allowed_domains:
            raise config_error(
                "sitemaps",
                f"crawl task {self.id!r} reads sitemaps from robots.txt but names no site",
                "robots reads the robots.txt of the seeds' sites: add seeds, or "
                "allowed_domains (then https://DOMAIN/robots.txt is read)",
            )
        for url in self.sitemap_urls:
            host = (urlsplit(url).hostname or "").rstrip(".")
            if self.allowed_domains and not any(
                host == d or host.endswith("." + d) for d in self.allowed_domains
            ):
                raise config_error(
                    "sitemaps",
                    f"sitemap {url} is not on the task's allowed_domains",
                    f"add {host} to allowed_domains, or remove that sitemap",
                )
        return self


class MergeSpec(Strict):
    """How items of several inputs become one stream."""

    mode: Literal["union", "join"] = Field(
        "union", description="union: all items in turn; join: items sharing `key` merged."
    )
    key: list[str] = Field(default_factory=list, description="Join key fields (mode join).")

    @model_validator(mode="after")
    def _key_for_join(self) -> Self:
        if self.mode == "join" and not self.key:
            raise config_error(
                "key", "merge mode join needs the fields to join on", "add key: [FIELD, ...]"
            )
        return self


class TransformTask(TaskBase):
    """Rewrite items with a list of declared operations, applied in order."""

    type: Literal["transform"] = "transform"
    merge: MergeSpec = MergeSpec()
    operations: list[TransformOp] = Field(..., min_length=1)


class ValidateTask(TaskBase):
    """Check items against a JSON Schema; invalid items are quarantined with the reasons."""

    type: Literal["validate"] = "validate"
    json_schema: dict[str, JsonValue] = Field(..., alias="schema")
    max_invalid_ratio: float = Field(
        0.0, ge=0, le=1, description="The task fails if more than this share is invalid."
    )

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("json_schema")
    @classmethod
    def _schema_valid(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise config_error(
                "json_schema",
                f"not a valid JSON Schema (draft 2020-12) at {path}: {exc.message}",
                "see https://json-schema.org/understanding-json-schema/ for the keywords",
            ) from None
        return value


class S3Target(Strict):
    """Write items as objects under the stack's bucket (or another one)."""

    kind: Literal["s3"] = "s3"
    format: Literal["jsonl", "csv", "parquet"] = "jsonl"
    bucket: str | None = Field(None, description="Default: the stepcrawl bucket.")
    prefix: str = Field("exports/{pipeline}/{run}/{task}/", description="Object key prefix.")


class DynamoDBTarget(Strict):
    """Upsert items into a DynamoDB table; the key fields make re-runs idempotent."""

    kind: Literal["dynamodb"] = "dynamodb"
    table: str = Field(..., pattern=r"^[a-zA-Z0-9_.-]{3,255}$")
    key: list[str] = Field(..., min_length=1, max_length=2)


class LoadTask(TaskBase):
    """Deliver items to their destination."""

    type: Literal["load"] = "load"
    target: Annotated[S3Target | DynamoDBTarget, Field(discriminator="kind")]


Task = Annotated[CrawlTask | TransformTask | ValidateTask | LoadTask, Field(discriminator="type")]


# -------------------------------------------------------------------------------- pipeline


class Schedule(Strict):
    """When EventBridge starts a run, and what happens if the previous one is still going."""

    cron: str = Field(..., description="EventBridge cron(...) or rate(...) expression.")
    timezone: str = Field("UTC", description="IANA time zone the cron is read in.")
    overlap: Literal["forbid", "replace", "allow"] = Field(
        "forbid",
        description="A new run while one is live: forbid skips it, replace stops the old one, "
        "allow runs both.",
    )
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            return parse_schedule(value).expression()
        except ScheduleExpressionError as exc:
            raise config_error("cron", str(exc), exc.hint) from None

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        zones = _time_zones()
        if value in zones:
            ZoneInfo(value)
            return value
        same = [zone for zone in zones if zone.lower() == value.strip().lower()]
        close = same or difflib.get_close_matches(value, zones, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else "use e.g. Europe/Berlin or UTC"
        raise config_error("timezone", f"unknown time zone {value!r} (not an IANA name)", hint)


@lru_cache(maxsize=1)
def _time_zones() -> list[str]:
    return sorted(available_timezones() | {"UTC"})


class Pipeline(Strict):
    """A DAG of crawl and ETL tasks, with an optional schedule."""

    name: PipelineName
    description: str = ""
    schedule: Schedule | None = None
    parallelism: int = Field(
        8, ge=1, le=256, description="Most tasks of one run executing at the same time."
    )
    defaults: Defaults = Defaults()
    tasks: list[Task] = Field(..., min_length=1)

    model_config = ConfigDict(json_schema_extra={"title": "stepcrawl pipeline"})

    @model_validator(mode="after")
    def _graph(self) -> Self:
        issues = check_graph([task.graph_node() for task in self.tasks])
        issues += self._settings_issues()
        if issues:
            # Carries located issues (tasks[i]...) out of validation; see loading.py.
            raise InvalidGraphError(issues)
        return self

    def _settings_issues(self) -> list[Issue]:
        """Problems that only show once a task's settings are layered over the defaults."""
        delays = {"base_delay", "max_delay"}
        checks: list[tuple[tuple[str | int, ...], RetryPolicy, str]] = [
            (("defaults", "retry"), self.defaults.retry, "")
        ]
        for i, task in enumerate(self.tasks):
            own = task.retry
            if (
                own is not None
                and own.model_fields_set & delays
                and not delays <= own.model_fields_set
            ):
                inherited = (delays - own.model_fields_set).pop()
                checks.append(
                    (
                        ("tasks", i, "retry"),
                        _layered(self.defaults.retry, own),
                        f" ({inherited} comes from defaults.retry)",
                    )
                )
        issues: list[Issue] = []
        for loc, policy, origin in checks:
            try:
                _check_delays(policy)
            except PydanticCustomError as exc:
                ctx = exc.context or {}
                issues.append(Issue(loc, f"{ctx['problem']}{origin}", str(ctx["hint"])))
        return issues

    def dag(self) -> Dag:
        """The task graph (valid: the model checked it)."""
        return Dag(task.graph_node() for task in self.tasks)

    def task(self, task_id: str) -> CrawlTask | TransformTask | ValidateTask | LoadTask:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def settings_for(self, task_id: str) -> TaskSettings:
        """Effective settings of a task: the keys it set, over the pipeline defaults."""
        task = self.task(task_id)
        d = self.defaults
        crawl = task if isinstance(task, CrawlTask) else None
        return TaskSettings(
            retry=_layered(d.retry, task.retry),
            politeness=_layered(d.politeness, crawl.politeness if crawl else None),
            limits=_layered(d.limits, crawl.limits if crawl else None),
            timeout=task.timeout if task.timeout is not None else d.timeout,
            heartbeat=task.heartbeat if task.heartbeat is not None else d.heartbeat,
        )

    def version_hash(self) -> str:
        """Stable 12-hex-digit fingerprint of the pipeline's content (not of its file layout)."""
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _layered(base: _M, own: _M | None) -> _M:
    """``base`` with the keys ``own`` set explicitly (a task's override of the defaults)."""
    if own is None:
        return base
    return base.model_copy(update=own.model_dump(exclude_unset=True))
