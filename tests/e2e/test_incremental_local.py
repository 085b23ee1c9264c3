"""Incremental recrawls end to end on the local cloud: two ``stepcrawl run``s of one pipeline
(each on a fresh cloud, the page states carried by ``--state FILE``) against a site on
127.0.0.1 that changes two pages and removes one between them.

The second run asks every page that sent a validator conditionally (If-None-Match or
If-Modified-Since), gets 304s for the unchanged ones, writes exactly the two changed items
and one tombstone, and counts the unchanged and deleted pages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.revisit_site import PRODUCTS, RevisitSite, revisit_site

from stepcrawl.local.runner import LocalRun, run_local
from stepcrawl.pipeline import Pipeline

pytestmark = pytest.mark.slow


def pipeline(site: RevisitSite) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "revisit-local",
            "defaults": {"politeness": {"delay": 0}},
            "tasks": [
                {
                    "id": "crawl",
                    "type": "crawl",
                    "seeds": [site.url("/")],
                    "allow_private_network": True,
                    "incremental": True,
                    "follow": [{}],
                    "extract": [{"match": "/(p/|about)", "fields": {"title": "h1"}}],
                }
            ],
        }
    )


def run(site: RevisitSite, out: Path, run_id: str, state: Path | None) -> LocalRun:
    console = Console(file=(out.parent / f"{run_id}.txt").open("w"), width=200)
    # The run must end by itself (TimeoutError otherwise); how fast it does is the machine's,
    # not the recrawl's: the bound is one a loaded 2-core box meets.
    done = run_local(
        pipeline(site),
        out,
        run_id,
        console=console,
        sweep_every=1.0,
        state=state,
        timeout=RUN_TIMEOUT,
    )
    assert done.status.status == "SUCCEEDED", done.report
    return done


def items(out: Path) -> list[dict[str, Any]]:
    lines = (out / "items" / "crawl.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_a_second_local_run_recrawls_conditionally_and_writes_only_what_changed(
    tmp_path: Path, cloud_env: None
) -> None:
    state = tmp_path / "state" / "revisit.jsonl"
    with revisit_site() as site:
        first = run(site, tmp_path / "run-1", "run-1", state)
        assert sorted(i["title"] for i in items(first.out)) == [
            "About us",
            *(f"Product {n}" for n in range(1, 7)),
        ]
        assert not any(r.conditional for r in site.seen())
        assert len(state.read_text("utf-8").splitlines()) == 8  # home, about, 6 products

        site.change("/p/2", "Product 2, cheaper")
        site.change("/p/5", "Product 5, renamed")
        site.delete("/p/6")
        site.forget()
        second = run(site, tmp_path / "run-2", "run-2", state)

        assert sorted(
            (i["_url"], i.get("title"), i.get("_deleted"), i.get("_status"))
            for i in items(second.out)
        ) == [
            (site.url("/p/2"), "Product 2, cheaper", None, None),
            (site.url("/p/5"), "Product 5, renamed", None, None),
            (site.url("/p/6"), None, True, 410),
        ]
        seen = {r.path: r for r in site.seen()}
        assert set(seen) == {"/", "/about", *PRODUCTS}, "every page reached again"
        assert {p for p, r in seen.items() if r.conditional} == {"/", *PRODUCTS}
        assert seen["/p/1"].if_none_match
        assert seen["/p/3"].if_modified_since
        assert {p for p, r in seen.items() if r.status == 304} == {"/", "/p/1", "/p/3", "/p/4"}
        counters = second.report["tasks"]["crawl"]["counters"]
        assert {k: counters[k] for k in ("finished", "ok", "failed", "items")} == {
            "finished": 8,
            "ok": 8,
            "failed": 0,
            "items": 3,
        }
        # unchanged: the 304s and /about (no validators, a body that changes on every
        # request, the same items); deleted: p/6, whose state is gone from the file.
        assert (counters["unchanged"], counters["deleted"]) == (5, 1)
        assert len(state.read_text("utf-8").splitlines()) == 7
        assert not (tmp_path / "run-2" / "failures.jsonl").read_text("utf-8").strip()
