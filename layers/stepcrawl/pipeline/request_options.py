"""A crawl task's request keys: ``headers``, ``cookies`` and ``proxy`` (docs/pipelines.md,
"Headers, cookies and proxies").

Headers and cookies are sent with every request the task makes to its own hosts; the proxy
list routes each host through one proxy of the list, always the same one. A proxy's
credentials never live in the pipeline file: ``proxy.secret`` names a Secrets Manager secret
that the fetch function reads (:mod:`stepcrawl.fetch.proxy`). A URL that carries
``user:password@`` is refused, and the refusal shows it with the user information replaced by
``***`` (:func:`scrub_request_secrets` runs before any check, so not even pydantic's own error
text, which quotes the input, can show it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from stepcrawl.pipeline.types import config_error

__all__ = [
    "FORBIDDEN_HEADERS",
    "MAX_COOKIES",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_PROXIES",
    "MAX_REQUEST_BYTES",
    "REDACTED",
    "Cookies",
    "ProxySettings",
    "RequestHeaders",
    "check_request_keys",
    "cookie_header",
    "proxy_origin",
    "redact_userinfo",
    "scrub_request_secrets",
]

#: At most this many headers, and this many cookies, per task.
MAX_HEADERS: Final = 50
MAX_COOKIES: Final = 50
#: One header line (name, ": " and value) at most; servers refuse longer lines (Apache: 8190).
MAX_HEADER_BYTES: Final = 4096
#: The task's headers and its Cookie line together: common servers cap the whole request head
#: at 8 KiB (nginx's default buffers), and the fetcher adds its own few headers.
MAX_REQUEST_BYTES: Final = 8192
MAX_PROXIES: Final = 100
#: What replaces a URL's user information, or a credential header's value, wherever shown.
REDACTED: Final = "***"

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # noqa: S105 - RFC 9110 token: header, cookie names
_TOKEN_RE = re.compile(_TOKEN)
# RFC 9110 field-value, ASCII only (httpx encodes header values as ASCII): visible characters,
# spaces and tabs inside; no CR, LF or NUL (they would split or end the request head)
_FIELD_VALUE_RE = re.compile(r"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?|")
# RFC 6265 cookie-value: cookie-octets, optionally in double quotes
_COOKIE_OCTETS = r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
_COOKIE_VALUE_RE = re.compile(rf'{_COOKIE_OCTETS}|"{_COOKIE_OCTETS}"')
_SECRET_NAME_RE = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
_SECRET_ARN_RE = re.compile(
    r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}"
)
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s?#]*@")

_HOP_BY_HOP = "a hop-by-hop header: the HTTP client sets what the connection needs"
#: Header names (lower case) a task may not set, and why.
FORBIDDEN_HEADERS: Final[Mapping[str, str]] = {
    "connection": _HOP_BY_HOP,
    "keep-alive": _HOP_BY_HOP,
    "proxy-connection": _HOP_BY_HOP,
    "te": _HOP_BY_HOP,
    "trailer": _HOP_BY_HOP,
    "transfer-encoding": _HOP_BY_HOP,
    "upgrade": _HOP_BY_HOP,
    "proxy-authenticate": _HOP_BY_HOP,
    "proxy-authorization": "proxy credentials come from the Secrets Manager secret that "
    "proxy.secret names, never from the pipeline file",
    "host": "the Host header follows each request's URL",
    "content-length": "the fetcher sends GET requests without a body",
    "user-agent": "set politeness.user_agent instead: robots.txt rules are matched against it",
    "accept-encoding": "the fetcher asks for the encodings it can decode and caps",
    "range": "the fetcher reads whole pages",
    "if-range": "the fetcher reads whole pages",
    "if-none-match": "conditional requests are the fetcher's own (incremental recrawls)",
    "if-modified-since": "conditional requests are the fetcher's own (incremental recrawls)",
    "if-match": "conditional requests are the fetcher's own (incremental recrawls)",
    "if-unmodified-since": "conditional requests are the fetcher's own (incremental recrawls)",
}
#: Headers whose values are credentials: never shown in an error.
_SECRET_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})


def redact_userinfo(text: str) -> str:
    """``http://user:pw@proxy:8080`` -> ``http://***@proxy:8080``, in any text (several URLs
    too); text without user information comes back unchanged."""
    if "@" not in text:
        return text
    return _USERINFO_RE.sub(rf"\1{REDACTED}@", text)


def scrub_request_secrets(data: Any) -> Any:
    """A crawl task's raw keys with credentials replaced by ``***`` (the proxy URLs' user
    information, credential headers' values, cookie values) wherever a key is invalid anyway.

    Runs before validation (``model_validator(mode="before")``): pydantic quotes a rejected
    input in its error text, and a refused proxy URL is refused *because* it holds a
    password. Valid keys pass unchanged.
    """
    if not isinstance(data, dict):
        return data
    proxy = data.get("proxy")
    headers = data.get("headers")
    if proxy is None and not isinstance(headers, dict):
        return data
    data = dict(data)
    if proxy is not None:
        data["proxy"] = _scrub_proxy(proxy)
    if isinstance(headers, dict) and _headers_problem(headers) is not None:
        data["headers"] = {
            k: _scrub_value(v) if str(k).lower() in _SECRET_HEADERS else v
            for k, v in headers.items()
        }
    return data


def _scrub_value(value: Any) -> str:
    # *** in place of a credential, still valid or invalid as the value was: the same
    # problem is found (and the task never loads with *** as its Authorization)
    text = _as_text(value)
    valid = isinstance(text, str) and _FIELD_VALUE_RE.fullmatch(text) is not None
    return REDACTED if valid else f"{REDACTED}\n"


def _scrub_proxy(value: Any) -> Any:
    if isinstance(value, str):
        return redact_userinfo(value)
    if isinstance(value, list):
        return [_scrub_proxy(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_proxy(v) if k == "urls" else v for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------- headers


def _as_text(value: Any) -> Any:
    # YAML reads `X-Count: 5` as a number; a header value is text either way (not a bool:
    # yes/no/on/off would silently become "True")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _headers_problem(headers: Mapping[Any, Any]) -> tuple[str, str] | None:  # noqa: PLR0911
    """(problem, hint) of the first invalid header, or None."""
    if len(headers) > MAX_HEADERS:
        return f"{len(headers)} headers, more than {MAX_HEADERS}", "send fewer headers"
    seen: dict[str, str] = {}
    for raw_name, raw_value in headers.items():
        name, value = str(raw_name), _as_text(raw_value)
        lower = name.lower()
        if not _TOKEN_RE.fullmatch(name):
            return (
                f"{name!r} is not a header name",
                "use letters, digits and - (e.g. Accept-Language)",
            )
        if lower in FORBIDDEN_HEADERS:
            return f"a task may not set the {name} header", FORBIDDEN_HEADERS[lower]
        if lower in seen:
            return (
                f"headers {seen[lower]!r} and {name!r} are the same header (names ignore case)",
                "keep one of them",
            )
        seen[lower] = name
        shown = REDACTED if lower in _SECRET_HEADERS else repr(value)
        if not isinstance(value, str):
            return f"header {name}: {shown} is not text", "quote the value"
        if not _FIELD_VALUE_RE.fullmatch(value):
            return (
                f"header {name}: its value {shown} is not a valid header value",
                "use printable ASCII on one line (no line breaks or control characters; "
                "encode other characters as the site expects, e.g. percent-encoding)",
            )
        if len(name) + 2 + len(value) > MAX_HEADER_BYTES:
            return (
                f"header {name} is {len(name) + 2 + len(value)} bytes long, over "
                f"{MAX_HEADER_BYTES}",
                "shorten it",
            )
    return None


def _check_headers(value: dict[str, Any]) -> dict[str, str]:
    problem = _headers_problem(value)
    if problem is not None:
        raise config_error("headers", *problem)
    return {name: _as_text(v) for name, v in value.items()}


RequestHeaders = Annotated[
    dict[str, Any],
    AfterValidator(_check_headers),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_HEADERS,
            "propertyNames": {"pattern": f"^{_TOKEN}$"},
            "additionalProperties": {"type": ["string", "number"]},
            "description": "Request headers sent to the task's hosts (not hop-by-hop ones, "
            "Host, User-Agent, Accept-Encoding, Range or conditional ones).",
        }
    ),
]


# ------------------------------------------------------------------------------- cookies


def _check_cookies(value: dict[str, Any]) -> dict[str, str]:
    if len(value) > MAX_COOKIES:
        raise config_error(
            "cookies", f"{len(value)} cookies, more than {MAX_COOKIES}", "send fewer cookies"
        )
    cookies: dict[str, str] = {}
    for name, raw in value.items():
        text = _as_text(raw)
        if not _TOKEN_RE.fullmatch(name):
            raise config_error(
                "cookies",
                f"{name!r} is not a cookie name",
                "use letters, digits and !#$%&'*+-.^_`|~ (no spaces, =, ; or quotes)",
            )
        if not isinstance(text, str) or not _COOKIE_VALUE_RE.fullmatch(text):
            raise config_error(
                "cookies",
                f"cookie {name}: its value is not a valid cookie value",
                "use printable ASCII without spaces, double quotes, commas, semicolons or "
                "backslashes (percent-encode or base64 anything else, as the site does)",
            )
        cookies[name] = text
    return cookies


Cookies = Annotated[
    dict[str, Any],
    AfterValidator(_check_cookies),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_COOKIES,
            "propertyNames": {"pattern": f"^{_TOKEN}$"},
            "additionalProperties": {"type": ["string", "number"]},
            "description": "Cookies (name: value) sent as one Cookie header to the task's hosts.",
        }
    ),
]


def cookie_header(cookies: Mapping[str, str]) -> str:
    """The Cookie header of ``cookies`` (RFC 6265: ``a=1; b=2``)."""
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


def check_request_keys(headers: Mapping[str, str], cookies: Mapping[str, str]) -> None:
    """The checks that need both keys: one way to send cookies, and the request head's size.

    (A proxy with browser rendering is refused by pipeline/render_options.py.)"""
    if cookies and any(name.lower() == "cookie" for name in headers):
        raise config_error(
            "cookies",
            "the task sets both cookies and a Cookie header",
            "keep one: cookies: {name: value} builds the Cookie header",
        )
    size = sum(len(n) + 4 + len(v) for n, v in headers.items())
    if cookies:
        size += len("Cookie: ") + len(cookie_header(cookies)) + 2
    if size > MAX_REQUEST_BYTES:
        raise config_error(
            "headers",
            f"the task's headers and cookies take {size} bytes, over {MAX_REQUEST_BYTES}",
            "send fewer or shorter headers and cookies (servers refuse request heads "
            "much over 8 KiB)",
        )


# ------------------------------------------------------------------------------- proxies


def proxy_origin(url: str) -> str:
    """``HTTP://Proxy1:8080/`` -> ``http://proxy1:8080``: how proxy URLs are compared (the
    pipeline's list and a secret's per-proxy credentials); the port is always written."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}:{parts.port or 80}"


def _check_proxy_url(value: str) -> str:
    url = value.strip()
    # scrub_request_secrets has replaced user:password by *** before this runs
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise config_error(
            "proxy",
            f"{value!r} is not a proxy URL",
            "write http://HOST:PORT (e.g. http://proxy.example.com:3128)",
        ) from None
    if "@" in parts.netloc:
        raise config_error(
            "proxy",
            f"proxy URL {redact_userinfo(url)} carries credentials (user:password@): a "
            "pipeline file must not hold secrets",
            "remove them from the URL, store them in a Secrets Manager secret as "
            '{"username": ..., "password": ...} and name it with proxy: {urls: [...], '
            "secret: NAME} (docs/pipelines.md, Headers, cookies and proxies)",
        )
    if parts.scheme.lower() != "http" or not parts.hostname:
        raise config_error(
            "proxy",
            f"{value!r} is not an http:// proxy URL",
            "write http://HOST:PORT: the fetcher speaks plain HTTP to the proxy (HTTPS pages "
            "still travel end to end encrypted, through CONNECT); https:// and socks proxies "
            "are not supported",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or port == 0:
        raise config_error(
            "proxy",
            f"{value!r}: a proxy URL is only a scheme, a host and a port",
            f"write {proxy_origin(url)}",
        )
    return proxy_origin(url)


ProxyUrl = Annotated[
    str,
    AfterValidator(_check_proxy_url),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": "^http://[^@/]+/?$",
            "description": "http://HOST:PORT, without credentials (those come from secret).",
        }
    ),
]


def _check_secret_name(value: str) -> str:
    name = value.strip()
    if _SECRET_NAME_RE.fullmatch(name) or _SECRET_ARN_RE.fullmatch(name):
        return name
    raise config_error(
        "secret",
        f"{value!r} is not a Secrets Manager secret name or ARN",
        "use the secret's name (letters, digits and /_+=.@-, e.g. stepcrawl/proxy) or its full ARN",
    )


SecretName = Annotated[
    str,
    BeforeValidator(lambda v: v.strip() if isinstance(v, str) else v),
    AfterValidator(_check_secret_name),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^([A-Za-z0-9/_+=.@-]{1,512}|arn:aws[a-z-]*:secretsmanager:.+)$",
            "description": "A Secrets Manager secret (name or ARN) holding the proxies' "
            'credentials: {"username": ..., "password": ...}, or per proxy URL.',
        }
    ),
]


class ProxySettings(BaseModel):
    """Proxies a crawl task's requests go through: each host always through the same one of
    ``urls`` (a consistent hash of the host), with credentials from ``secret``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    urls: list[ProxyUrl] = Field(
        ..., min_length=1, max_length=MAX_PROXIES, description="http://HOST:PORT, one or more."
    )
    secret: SecretName | None = Field(
        None,
        description="Secrets Manager secret (name or ARN) with the proxies' credentials; "
        "none: the proxies need no authentication.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `proxy: URL` and `proxy: [URL, ...]` are the common cases
        if isinstance(data, str):
            return {"urls": [data]}
        if isinstance(data, list):
            return {"urls": data}
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        url = {"type": "string", "pattern": "^http://[^@/]+/?$", "description": "one proxy"}
        many = {"type": "array", "items": url, "minItems": 1, "maxItems": MAX_PROXIES}
        return {"anyOf": [url, many, handler(core_schema)]}

    @field_validator("urls")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        repeated = sorted({u for u in value if value.count(u) > 1})
        if repeated:
            raise config_error(
                "proxy", f"proxy {repeated[0]} is listed twice", "list each proxy once"
            )
        return value
