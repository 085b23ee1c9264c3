"""Browser rendering in the engine (``render: browser``; docs/pipelines.md).

A page is rendered or fetched according to its task and URL alone
(:func:`stepcrawl.pipeline.render_options.renders`), decided when the frontier feeds it: the
feeder sends it to the render queue instead of the fetch queue (:func:`send_fetches`). The
render function is the fetch stage with another fetcher (:class:`stepcrawl.fetch.browser.
BrowserFetcher`) and the render queue in the fetch queue's place (:func:`render_services`), so
its retries and deferrals go back to the render queue, and its pages go to parse like any
others: same bundles, same extraction, same exactly-once commit.

Sitemap documents are never rendered. Nothing here imports Playwright.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from stepcrawl.crawl.context import CrawlServices
from stepcrawl.crawl.messages import FetchMessage
from stepcrawl.errors import ConfigError
from stepcrawl.pipeline import CrawlTask
from stepcrawl.pipeline.render_options import renders
from stepcrawl.storage import OutMessage

__all__ = ["render_services", "renders_any", "send_fetches"]


def renders_any(task: object) -> bool:
    """Whether any page of ``task`` may be rendered (a crawl task with a render key)."""
    return isinstance(task, CrawlTask) and (
        task.render is not None or any(rule.render is not None for rule in task.follow)
    )


def send_fetches(
    services: CrawlServices, pipeline: str, version: str, task_id: str, out: Sequence[OutMessage]
) -> None:
    """Send a feed's fetch messages of one task: the pages to render to the render queue, the
    rest to the fetch queue."""
    task = services.registry.get(pipeline, version).task(task_id)
    if not renders_any(task):
        services.fetch_queue.send_batch(list(out))
        return
    assert isinstance(task, CrawlTask)
    plain: list[OutMessage] = []
    rendered: list[OutMessage] = []
    for message in out:
        ref = FetchMessage.model_validate_json(message.body).ref
        (rendered if ref.kind == "page" and renders(task, ref.url) else plain).append(message)
    if rendered and services.render_queue is None:
        raise ConfigError(
            f"task {task_id} of {pipeline} renders pages (render: browser) but this deployment "
            "has no render function: deploy the stack's render function (infra/render.py), or "
            "run it on the local cloud (stepcrawl run)"
        )
    if plain:
        services.fetch_queue.send_batch(plain)
    if rendered and services.render_queue is not None:
        services.render_queue.send_batch(rendered)


def render_services(services: CrawlServices) -> CrawlServices:
    """``services`` as the render function uses them: the render queue plays the fetch
    queue (retries and deferred pages go back to it)."""
    if services.render_queue is None:
        raise ConfigError("the render function needs its queue (the stack sets its URL)")
    return dataclasses.replace(services, fetch_queue=services.render_queue)
