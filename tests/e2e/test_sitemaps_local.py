"""Sitemaps end to end on the local cloud: a site on 127.0.0.1 reachable only through its
sitemap index (a gzip child, lastmod dates, a malformed child, an off-domain child).

One run, two crawl tasks: ``by_index`` names the index, ``by_robots`` finds it through
robots.txt. Both get exactly the pages modified since ``sitemap_since``; the malformed sitemap
ends failed (class ``sitemap``) without stopping either crawl; nothing off the task's domains
and no sitemap whose index entry is older than the date is ever requested.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.sitemap_site import NEWER, SINCE, sitemap_site

from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import Pipeline

pytestmark = pytest.mark.slow


def crawl(task_id: str, **keys: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "type": "crawl",
        "sitemap_since": SINCE,
        "allow_private_network": True,
        "extract": [{"match": "/pages/", "fields": {"title": {"selector": "h1"}}}],
        **keys,
    }


def test_pages_reachable_only_through_sitemaps_are_crawled_since_the_date(
    tmp_path: Path, cloud_env: None
) -> None:
    with sitemap_site() as site:
        pipeline = Pipeline.model_validate(
            {
                "name": "sitemaps-local",
                "defaults": {
                    "politeness": {"delay": 0},
                    # one malformed sitemap among 4 documents and 5 pages must not fail a task
                    "limits": {"max_error_ratio": 0.5},
                },
                "tasks": [
                    crawl("by_index", sitemaps=[site.index]),
                    crawl("by_robots", seeds=[f"{site.base}/"], sitemaps=["robots"]),
                ],
            }
        )
        run = run_local(
            pipeline,
            tmp_path,
            "sitemaps",
            console=Console(file=(tmp_path / "console.txt").open("w"), width=200),
            sweep_every=1.0,
            # The run must end by itself (TimeoutError otherwise); how fast it does is the
            # machine's, not the crawl's: the bound is one a loaded 2-core box meets.
            timeout=RUN_TIMEOUT,
        )
    assert run.status.status == "SUCCEEDED", run.report
    for task in ("by_index", "by_robots"):
        lines = (tmp_path / "items" / f"{task}.jsonl").read_text("utf-8").splitlines()
        titles = sorted(json.loads(line)["title"] for line in lines)
        assert titles == sorted(NEWER), task
        counters = run.report["tasks"][task]["counters"]
        assert counters["claimed"] == counters["finished"]
        assert counters["failed"] == 1
    failures = [json.loads(line) for line in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert {(f["task"], f["url"], f["cls"]) for f in failures} == {
        (task, f"{site.base}/sitemaps/broken.xml", "sitemap") for task in ("by_index", "by_robots")
    }
    assert all(f["reason"].startswith("sitemap: malformed XML") for f in failures)
    assert site.fetched("/sitemaps/zipped.xml.gz")
    for never in ("/sitemaps/offsite.xml", "/pages/p99", "/sitemaps/old.xml", "/pages/p4"):
        assert not site.fetched(never), never
