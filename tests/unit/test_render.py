"""Browser rendering's keys and routing (no browser here; tests/integration/test_browser_fetch.py
drives Chromium, tests/e2e/test_browser_local.py runs it end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepcrawl.crawl.context import CrawlServices, StaticRegistry
from stepcrawl.crawl.messages import FetchMessage, UrlRef
from stepcrawl.crawl.render import render_services, send_fetches
from stepcrawl.crawl.tokens import MemoryTokens
from stepcrawl.errors import ConfigError, InvalidPipelineError, Issue
from stepcrawl.pipeline import CrawlTask, Pipeline, load_pipeline
from stepcrawl.pipeline.render_options import DEFAULT_RENDER_TIMEOUT, renders
from stepcrawl.storage import MemoryBlobStore, MemoryQueue, MemoryTable, OutMessage

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
name: r
tasks:
  - id: shop
    type: crawl
    seeds: ['https://shop.example.com/']
"""


def issues(tmp_path: Path, body: str) -> list[Issue]:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + body, encoding="utf-8")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    return caught.value.issues


def crawl(body: str, tmp_path: Path) -> CrawlTask:
    path = tmp_path / "ok.yaml"
    path.write_text(HEAD + body, encoding="utf-8")
    task = load_pipeline(path).tasks[0]
    assert isinstance(task, CrawlTask)
    return task


# ------------------------------------------------------------------------------- validation


def test_defaults_are_plain_fetch(tmp_path: Path) -> None:
    task = crawl("", tmp_path)
    assert task.render is None
    assert task.wait_for is None
    assert task.render_timeout == DEFAULT_RENDER_TIMEOUT
    assert not renders(task, "https://shop.example.com/")


def test_render_keys_load(tmp_path: Path) -> None:
    task = crawl(
        "    render: browser\n    wait_for: 'ul.products > li'\n    render_timeout: 30s\n",
        tmp_path,
    )
    assert (task.render, task.wait_for, task.render_timeout) == ("browser", "ul.products > li", 30)
    assert crawl("    render: browser\n    wait_for: networkidle\n", tmp_path).wait_for == (
        "networkidle"
    )
    # the load event, as before the default waited for the task's item selectors
    assert crawl("    render: browser\n    wait_for: load\n", tmp_path).wait_for == "load"


@pytest.mark.parametrize(
    ("body", "line", "text"),
    [
        ("    render: chrome\n", 6, "'browser'"),
        ("    render: browser\n    wait_for: 'div['\n", 7, "not a valid CSS selector"),
        ("    render: browser\n    render_timeout: 500s\n", 7, "less than or equal to 120"),
        ("    render: browser\n    render_timeout: 0.5\n", 7, "greater than or equal to 1"),
        ("    wait_for: networkidle\n", 3, "sets wait_for but renders no page"),
        ("    wait_for: load\n", 3, "sets wait_for but renders no page"),
        ("    render_timeout: 10s\n", 3, "sets render_timeout but renders no page"),
        ("    follow:\n      - render: browser\n", 3, "follow rule with render but no allow"),
        ("    follow:\n      - {allow: [x], render: yes}\n", 7, "'browser'"),
    ],
)
def test_mistakes_are_located(tmp_path: Path, body: str, line: int, text: str) -> None:
    found = issues(tmp_path, body)
    assert len(found) == 1, [i.render() for i in found]
    assert found[0].line == line, found[0].render()
    assert text in found[0].render()
    assert found[0].hint or "Input should" in found[0].message


def test_example_pipeline_renders_what_it_says() -> None:
    pipeline = load_pipeline(ROOT / "pipelines" / "browser-rendering.yaml")
    catalogue, blog = pipeline.tasks
    assert isinstance(catalogue, CrawlTask)
    assert isinstance(blog, CrawlTask)
    assert renders(catalogue, "https://shop.example.com/catalogue/?page=2")
    assert renders(blog, "https://blog.example.com/live/election")
    assert not renders(blog, "https://blog.example.com/posts/hello")


def test_a_follow_rule_renders_what_its_allow_matches_and_its_deny_does_not(
    tmp_path: Path,
) -> None:
    task = crawl(
        "    follow:\n      - {allow: ['/app/'], deny: ['/app/static/'], render: browser}\n"
        "      - {allow: ['/docs/']}\n",
        tmp_path,
    )
    assert renders(task, "https://shop.example.com/app/cart")
    assert not renders(task, "https://shop.example.com/app/static/help")
    assert not renders(task, "https://shop.example.com/docs/intro")  # a plain rule's page
    assert renders(task, "https://shop.example.com/x/app/y")  # a regex search, like allow's


# ------------------------------------------------------------------------------- routing


def services(pipeline: Pipeline, *, render_queue: bool = True) -> CrawlServices:
    return CrawlServices(
        table=MemoryTable(),
        fetch_queue=MemoryQueue(),
        parse_queue=MemoryQueue(),
        blobs=MemoryBlobStore(),
        tokens=MemoryTokens(),
        registry=StaticRegistry([pipeline]),
        render_queue=MemoryQueue() if render_queue else None,
    )


def out(pipeline: Pipeline, url: str, kind: str = "page") -> OutMessage:
    message = FetchMessage(
        pipeline=pipeline.name,
        version=pipeline.version_hash(),
        run="r1",
        task="shop",
        ref=UrlRef(url=url, depth=0, kind=kind),  # type: ignore[arg-type]
        shard=0,
    )
    return OutMessage(message.model_dump_json())


def urls(queue: object) -> list[str]:
    assert isinstance(queue, MemoryQueue)
    return [FetchMessage.model_validate_json(m.body).ref.url for m in queue.drain()]


def test_the_feeder_sends_rendered_pages_to_the_render_queue(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        HEAD + "    follow:\n      - {allow: ['/live/'], render: browser}\n", encoding="utf-8"
    )
    pipeline = load_pipeline(path)
    s = services(pipeline)
    messages = [
        out(pipeline, "https://shop.example.com/"),
        out(pipeline, "https://shop.example.com/live/1"),
        out(pipeline, "https://shop.example.com/live/sitemap.xml", kind="sitemap"),
    ]
    send_fetches(s, pipeline.name, pipeline.version_hash(), "shop", messages)
    assert urls(s.render_queue) == ["https://shop.example.com/live/1"]
    # sitemap documents are never rendered
    assert urls(s.fetch_queue) == [
        "https://shop.example.com/",
        "https://shop.example.com/live/sitemap.xml",
    ]
    # the render function's services: its queue plays the fetch queue (retries go back to it)
    assert render_services(s).fetch_queue is s.render_queue


def test_a_deployment_without_a_render_function_says_so(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + "    render: browser\n", encoding="utf-8")
    pipeline = load_pipeline(path)
    s = services(pipeline, render_queue=False)
    with pytest.raises(ConfigError, match="no render function"):
        send_fetches(
            s,
            pipeline.name,
            pipeline.version_hash(),
            "shop",
            [out(pipeline, "https://shop.example.com/")],
        )
    with pytest.raises(ConfigError, match="render function needs its queue"):
        render_services(s)


def test_a_task_that_renders_nothing_goes_straight_to_the_fetch_queue(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD, encoding="utf-8")
    pipeline = load_pipeline(path)
    s = services(pipeline, render_queue=False)
    send_fetches(
        s,
        pipeline.name,
        pipeline.version_hash(),
        "shop",
        [out(pipeline, "https://shop.example.com/")],
    )
    assert urls(s.fetch_queue) == ["https://shop.example.com/"]


def test_a_rendering_task_cannot_have_a_proxy(tmp_path: Path) -> None:
    found = issues(tmp_path, "    render: browser\n    proxy: http://proxy.example.com:3128\n")
    assert len(found) == 1
    assert "renders pages but has a proxy" in found[0].render()
