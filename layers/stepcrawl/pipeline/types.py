"""Field types of the pipeline schema that check themselves: durations, CSS, regexes, ids.

Their errors keep *what is wrong* apart from *how to fix it* (see :func:`config_error`), so
that a file's :class:`~stepcrawl.errors.Issue` gets both a message and a hint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError
from selectolax.lexbor import LexborHTMLParser, SelectolaxError

__all__ = [
    "CssSelector",
    "Domain",
    "Duration",
    "HttpUrl",
    "Identifier",
    "PipelineName",
    "Regex",
    "check_regex",
    "config_error",
    "parse_duration",
]


def config_error(kind: str, problem: str, hint: str | None = None) -> PydanticCustomError:
    """A validation error that keeps the problem and the way to fix it apart.

    pydantic's message reads ``problem; hint`` (what a user of the Python DSL sees); the file
    loader turns ``ctx['problem']`` and ``ctx['hint']`` into an issue's message and hint.
    """
    if hint is None:
        return PydanticCustomError(kind, "{problem}", {"problem": problem})
    return PydanticCustomError(kind, "{problem}; {hint}", {"problem": problem, "hint": hint})


_DURATION = re.compile(r"(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PATTERN = r"^\s*(\d+(\.\d+)?\s*(ms|s|m|h|d)\s*)+$"
_DURATION_HINT = "write seconds (30) or a number with units ms/s/m/h/d (500ms, 90s, 1h30m)"


def parse_duration(value: Any) -> Any:
    """``90``, ``"90s"``, ``"1h30m"``, ``"250ms"`` -> seconds (float). Other input passes on."""
    if isinstance(value, bool):
        # YAML reads yes/no/on/off as booleans; `true` seconds is never meant.
        raise config_error("duration", f"{value!r} is not a duration", _DURATION_HINT)
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if text[pos : match.start()].strip():
            break
        total += float(match["value"]) * _UNIT_SECONDS[match["unit"]]
        pos = match.end()
    if pos == 0 or text[pos:].strip():
        raise config_error("duration", f"{value!r} is not a duration", _DURATION_HINT)
    return total


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    Field(ge=0, allow_inf_nan=False),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": _DURATION_PATTERN},
            ],
            "description": "Seconds, or a string with units ms/s/m/h/d such as 90s or 1h30m.",
        }
    ),
]


@lru_cache(maxsize=1)
def _probe_document() -> LexborHTMLParser:
    return LexborHTMLParser("<html><body><p>probe</p></body></html>")


_PSEUDO_ELEMENT = re.compile(r"::([\w-]+)")
#: jQuery/Scrapy extensions that look like CSS but are not: name -> how to do it instead.
_NOT_CSS = {
    "contains": "select the element, then keep matching items with a transform "
    "(op: filter with op: contains or matches)",
    "first": "use :first-child or :first-of-type",
    "last": "use :last-child or :last-of-type",
    "eq": "use :nth-child(N) or :nth-of-type(N) (counting from 1)",
}
_CLOSERS = {"[": "]", "(": ")"}


def _unbalanced(selector: str) -> tuple[str, str] | None:
    """What is left open (or closed too often) in ``selector``, and how to fix it."""
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for char in selector:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in _CLOSERS:
            stack.append(char)
        elif char in _CLOSERS.values() and (not stack or _CLOSERS[stack.pop()] != char):
            return f"an unmatched {char}", f"remove the {char} or add its opening bracket"
    if quote is not None:
        return f"an unclosed {quote} quote", f"add the closing {quote}"
    if stack:
        return f"an unclosed {stack[-1]}", f"add the missing {_CLOSERS[stack[-1]]}"
    return None


def _check_css(value: str) -> str:
    selector = value.strip()
    if not selector:
        raise config_error(
            "css", "empty CSS selector", "write one such as 'div.item a[href]' or leave it out"
        )
    # Look for Scrapy/jQuery syntax outside quoted strings only: a[title='a::b'] is fine.
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", selector)
    pseudo = _PSEUDO_ELEMENT.search(unquoted)
    if pseudo is not None:
        name = pseudo[1]
        problem = f"{selector!r}: ::{name} is not CSS (Scrapy/parsel syntax)"
        if name == "attr":
            attr = re.search(r"::attr\(\s*['\"]?([\w:-]+)", selector)
            hint = f"select the element and set get: attr with attr: {attr[1] if attr else 'NAME'}"
        elif name == "text":
            hint = "select the element itself; get: text (the default) takes its text"
        else:
            problem = f"{selector!r}: the pseudo-element ::{name} selects no element"
            hint = "select an element; set get: text, html or attr for what to take from it"
        raise config_error("css", problem, hint)
    for name, instead in _NOT_CSS.items():
        if re.search(rf":{name}(?![\w-])", unquoted):
            raise config_error("css", f"{selector!r}: :{name} is not CSS", instead)
    broken = _unbalanced(selector)
    if broken is not None:
        problem, hint = broken
        raise config_error("css", f"{selector!r} is not a valid CSS selector: {problem}", hint)
    try:
        _probe_document().css(selector)
    except SelectolaxError:
        raise config_error(
            "css",
            f"{selector!r} is not a valid CSS selector",
            "check brackets, quotes, combinators (> + ~ need an element on both sides) and "
            "pseudo-classes",
        ) from None
    return selector


CssSelector = Annotated[
    str,
    AfterValidator(_check_css),
    WithJsonSchema({"type": "string", "minLength": 1, "description": "A CSS selector."}),
]


def check_regex(value: str) -> str:
    """``value`` if it compiles as a Python regular expression, else a located error."""
    try:
        re.compile(value)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        hint = "write Python re syntax; escape ( ) [ ] { } . * + ? | with a backslash to match it"
        if exc.pos is not None:
            hint = f"the pattern goes wrong here: {value[: exc.pos]!r} >>> {value[exc.pos :]!r}"
        raise config_error(
            "regex", f"{value!r} is not a valid regular expression: {exc.msg}{where}", hint
        ) from None
    return value


Regex = Annotated[
    str,
    AfterValidator(check_regex),
    WithJsonSchema({"type": "string", "description": "A Python regular expression."}),
]

_ID_MAX = 48
_ID_PATTERN = rf"^[a-z][a-z0-9_]{{0,{_ID_MAX - 1}}}$"
_ID_RULE = (
    f"lower-case letters, digits and _, starting with a letter, at most {_ID_MAX} "
    "(e.g. crawl_books)"
)
_NAME_MAX = 40
_NAME_PATTERN = rf"^[a-z][a-z0-9-]{{0,{_NAME_MAX - 1}}}$"
_NAME_RULE = (
    f"lower-case letters, digits and -, starting with a letter, at most {_NAME_MAX} "
    "(it becomes part of AWS resource names)"
)


def _matcher(
    pattern: str, what: str, rule: str, *, longest: int, joiner: str
) -> Callable[[str], str]:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value):  # fullmatch: '$' would let a trailing newline in
            return value
        hint = None
        if len(value) > longest:
            hint = f"shorten it to {longest} characters or fewer (it has {len(value)})"
        else:
            # Suggest the same word in the allowed alphabet: 'Crawl Books' -> 'crawl_books'.
            guess = re.sub(r"[^a-z0-9]+", joiner, value.strip().lower()).strip(joiner)
            if compiled.match(guess):
                hint = f"did you mean {guess!r}?"
        raise config_error("name", f"{value!r} is not a valid {what}: use {rule}", hint)

    return check


Identifier = Annotated[
    str,
    AfterValidator(_matcher(_ID_PATTERN, "id", _ID_RULE, longest=_ID_MAX, joiner="_")),
    WithJsonSchema({"type": "string", "pattern": _ID_PATTERN, "description": _ID_RULE}),
]
PipelineName = Annotated[
    str,
    AfterValidator(
        _matcher(_NAME_PATTERN, "pipeline name", _NAME_RULE, longest=_NAME_MAX, joiner="-")
    ),
    WithJsonSchema({"type": "string", "pattern": _NAME_PATTERN, "description": _NAME_RULE}),
]


def _check_url(value: str) -> str:
    url = value.strip()
    parts = urlsplit(url)
    if parts.scheme in {"http", "https"} and parts.hostname:
        return url
    hint = "write it as https://host/path"
    if not parts.scheme and not url.startswith("/") and "." in url.split("/", 1)[0]:
        hint = f"did you mean 'https://{url}'?"
    raise config_error("url", f"{value!r} is not an absolute http(s) URL", hint)


HttpUrl = Annotated[
    str,
    AfterValidator(_check_url),
    WithJsonSchema({"type": "string", "pattern": "^https?://", "format": "uri"}),
]

_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9-]{1,63}$")


def _check_domain(value: str) -> str:
    domain = value.strip().lower().rstrip(".")
    if "://" not in domain and "/" not in domain and _DOMAIN.match(domain):
        return domain
    host = urlsplit(domain if "://" in domain else f"//{domain}").hostname
    hint = "write only the host, e.g. example.com (its subdomains are included)"
    if host and host != domain and _DOMAIN.match(host):
        hint = f"write only the host: did you mean {host!r}? (its subdomains are included)"
    raise config_error("domain", f"{value!r} is not a domain name", hint)


Domain = Annotated[
    str,
    AfterValidator(_check_domain),
    WithJsonSchema({"type": "string", "description": "A host name; its subdomains match too."}),
]
