"""A crawl task's browser rendering keys: ``render``, ``wait_for``, ``render_timeout`` (and a
follow rule's ``render``); docs/pipelines.md, "Browser rendering".

A page renders when its task says ``render: browser``, or when one of the task's follow rules
says ``render: browser`` and the page's URL matches that rule's ``allow`` (and none of its
``deny``). The decision is made from the URL alone, when the frontier feeds the page
(:mod:`stepcrawl.crawl.render`), so nothing about it travels with the URL.

Without ``wait_for`` a rendered page waits for what the task extracts from it: each extract
rule's :func:`ready_selector`, carried to the browser in the task's
:class:`~stepcrawl.fetch.render_options.RenderOptions` (which decides per URL).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Final, Literal, Protocol

from pydantic import AfterValidator, WithJsonSchema

from stepcrawl.pipeline.types import _check_css, config_error

if TYPE_CHECKING:
    from stepcrawl.pipeline.crawl_rules import ExtractRule

__all__ = [
    "DEFAULT_RENDER_TIMEOUT",
    "LOAD_EVENT",
    "MAX_RENDER_TIMEOUT",
    "MIN_RENDER_TIMEOUT",
    "NETWORK_IDLE",
    "STRUCTURED_MARKERS",
    "RenderMode",
    "WaitFor",
    "check_render_keys",
    "ready_selector",
    "renders",
    "url_pattern",
]

RenderMode = Literal["browser"]
#: ``wait_for: networkidle``: the page is ready when it made no request for 500 ms.
NETWORK_IDLE: Final = "networkidle"
#: ``wait_for: load``: the page is ready at its load event, before what scripts add after it
#: (the default until the wait for the task's item selectors).
LOAD_EVENT: Final = "load"
#: What a structured rule or field needs in the DOM: the elements its syntax is read from
#: (extract/structured.py), as Chromium's CSS reads them.
STRUCTURED_MARKERS: Final[Mapping[str, str]] = {
    "jsonld": 'script[type="application/ld+json" i]',
    "microdata": "[itemscope]",
    "opengraph": "head > meta[property][content]",
}
#: A rendered page's whole budget (load, wait_for, reading the DOM), in seconds: the default
#: and the bounds (the render function's timeout leaves room for a batch of them).
DEFAULT_RENDER_TIMEOUT: Final = 15.0
MIN_RENDER_TIMEOUT: Final = 1.0
MAX_RENDER_TIMEOUT: Final = 120.0


def _check_wait_for(value: str) -> str:
    if value in (NETWORK_IDLE, LOAD_EVENT):
        return value
    return _check_css(value)  # the selector checks every CssSelector gets


WaitFor = Annotated[
    str,
    AfterValidator(_check_wait_for),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "description": "A CSS selector the rendered page must contain, networkidle, or load.",
        }
    ),
]


class _Rule(Protocol):
    @property
    def render(self) -> RenderMode | None: ...
    @property
    def allow(self) -> list[str]: ...
    @property
    def deny(self) -> list[str]: ...


class _Task(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def render(self) -> RenderMode | None: ...
    @property
    def follow(self) -> Sequence[_Rule]: ...
    @property
    def proxy(self) -> object | None: ...
    @property
    def model_fields_set(self) -> set[str]: ...


def check_render_keys(task: _Task) -> None:
    """The render keys of a crawl task make sense together; else a located error."""
    for rule in task.follow:
        if rule.render is not None and not rule.allow:
            raise config_error(
                "follow",
                f"crawl task {task.id!r} has a follow rule with render but no allow",
                "a follow rule renders the pages whose URL matches its allow: add allow: "
                "[REGEX, ...], or set render: browser on the task to render every page",
            )
    renders_some = task.render is not None or any(r.render is not None for r in task.follow)
    if renders_some and task.proxy is not None:
        raise config_error(
            "proxy",
            f"crawl task {task.id!r} renders pages but has a proxy",
            "the browser does not go through the task's proxy (its pages would go direct): "
            "remove proxy, or render in another task without one",
        )
    for key in ("wait_for", "render_timeout"):
        if key in task.model_fields_set and not renders_some:
            raise config_error(
                key,
                f"crawl task {task.id!r} sets {key} but renders no page",
                f"add render: browser (to the task, or to a follow rule), or remove {key}",
            )


@lru_cache(maxsize=256)
def url_pattern(regex: str) -> re.Pattern[str]:
    """``regex`` compiled once (a follow rule's ``allow``, an extract rule's ``match``)."""
    return re.compile(regex)


def ready_selector(rule: ExtractRule) -> str | None:
    """What a rendered page must hold before ``rule`` finds its items there: its container,
    else its first required field's selector, else (no required field has one) its first
    field's; a structured rule or field needs its syntax's elements
    (:data:`STRUCTURED_MARKERS`). None: the rule reads the page as it is (nothing to wait
    for)."""
    if rule.container is not None:
        return rule.container
    if rule.structured is not None:
        return STRUCTURED_MARKERS[rule.structured]
    fields = list(rule.fields.values())
    for field in [f for f in fields if f.required] or fields:
        selector = field.selector or STRUCTURED_MARKERS.get(field.get)
        if selector:
            return selector
    return None


def renders(task: _Task, url: str) -> bool:
    """Whether the page ``url`` of ``task`` is loaded in the browser."""
    if task.render is not None:
        return True
    for rule in task.follow:
        if rule.render is None:
            continue
        if any(url_pattern(p).search(url) for p in rule.allow) and not any(
            url_pattern(p).search(url) for p in rule.deny
        ):
            return True
    return False
