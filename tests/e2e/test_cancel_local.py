"""A cancelled run stops crawling, on the local cloud: what was queued (some of it delayed by the
politeness spacing) is dropped unfetched, and the site hears nothing from it afterwards
(issue 24, defect 8: it used to crawl on to the end)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import CRAWL_TASK, demo_pipeline

from stepcrawl.crawl.states import TaskState
from stepcrawl.crawl.stopping import CANCELLED
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.table_keys import task_key

pytestmark = pytest.mark.slow

#: After the cancel, the fetches already running may end; none may start later than this.
#: The time is the point here (a stop that took as long as the crawl left, a minute, fails),
#: so it is a bound, but one a loaded 2-core box meets: a fetch batch that read the task
#: running just before the cancel can send its requests seconds later when its thread gets
#: the CPU (15 s was too close).
SETTLE = 30.0
#: And how long after that the site must stay quiet: a window, as no request is a thing no
#: condition can be polled for. Together a minute (the brief: "no fetch a minute later").
QUIET = 30.0


def test_a_cancelled_run_fetches_nothing_more(tmp_path: Path, cloud_env: None) -> None:
    # ~270 pages on one host spaced 0.25 s apart: about a minute of crawling left at the cancel.
    model = ShopModel(categories=3, products_per_category=80)
    with DemoSite(model, slow_delay=0.0) as site:
        pipeline = demo_pipeline(
            site.url, crawl_only=True, defaults={"politeness": {"delay": 0.25}}
        )
        with staged_pipelines([(pipeline, None)]) as directory:
            template = synthesize(directory)
            with LocalCloud(
                template, directory, log_path=tmp_path / "functions.log", scale_every=None
            ) as cloud:
                deployment = cloud.deployment
                assert deployment is not None
                deployment.start(pipeline.name, "cancelled")
                deadline = time.monotonic() + RUN_TIMEOUT
                while len(site.log.entries()) < 20 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert len(site.log.entries()) >= 20, "the crawl never got going"
                assert deployment.cancel("cancelled") == "RUNNING"
                cancelled_at = time.monotonic()
                time.sleep(SETTLE + QUIET)
                ended = deployment.wait(
                    "cancelled", pipeline=pipeline.name, timeout=FOLLOWS_TIMEOUT
                )
                assert ended.tasks[CRAWL_TASK].state == "cancelled", ended.tasks
                record = deployment.table.get(task_key("cancelled", CRAWL_TASK))
    assert ended.status == "ABORTED", ended
    late = [e for e in site.log.entries() if e.time > cancelled_at + SETTLE]
    assert late == [], f"{len(late)} request(s) more than {SETTLE} s after the cancel"
    assert record is not None
    assert record["status"] == TaskState.CANCELLED
    assert record["stopped"] == CANCELLED
    fetched = int(record["ok"]) + int(record["failed"])
    assert fetched < len(model.expected_items()), "it stopped before the end"
