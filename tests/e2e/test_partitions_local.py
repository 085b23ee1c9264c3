"""A crawl whose seen set is cut into partitions on the local cloud, IAM enforced (issue 24):
the start, the parse function, the sweeper and the finisher propose and judge with their own
roles (crawl/proposing.py), under crashes and duplicate deliveries, and the run still
records every page once and exports exactly the shop's items; also with partitions that
split as they grow (crawl/partitions.py), their halves read cold by containers that crashes
replace, and with a task's one log split as it grows (its commits proposals since)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.demo import demo_pipeline

from stepcrawl.crawl.log_reads import url_states
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.demo import exported_items
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.reports.report import write_run_outputs
from stepcrawl.table_keys import task_key

pytestmark = pytest.mark.slow

TASK = "crawl_shop"


@pytest.mark.parametrize(
    ("partitions", "split_urls"),
    [(3, None), (2, 12), (1, 12)],
    ids=["three", "two-splitting", "one-log-splitting"],
)
def test_a_partitioned_crawl_records_every_page_once_with_each_functions_role(
    tmp_path: Path, cloud_env: None, partitions: int, split_urls: int | None
) -> None:
    model = ShopModel(categories=4, products_per_category=20)
    limits = {"seen_partitions": partitions}
    settings = {} if split_urls is None else {"partition_split_urls": split_urls}
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url, defaults={"limits": limits})
        with (
            staged_pipelines([(pipeline, None)]) as directory,
            LocalCloud(
                synthesize(directory, settings=settings),
                directory,
                log_path=tmp_path / "functions.log",
                sweep_every=2.0,
                chaos=Chaos(crash_rate=0.2, duplicate_rate=0.3, seed=5, redelivery_after=1.0),
            ) as cloud,
        ):
            deployment = cloud.deployment
            assert deployment is not None
            status = cloud.run(pipeline.name, "parts")
            assert status.status == "SUCCEEDED", status
            report = write_run_outputs(deployment, status, tmp_path)
            table, blobs = deployment.table, deployment.blobs
            record = table.get(task_key("parts", TASK)) or {}
            states = url_states(table, "parts", TASK, blobs)
    assert record.get("partitions", 1) == partitions
    # ~110 URLs in halves of at most 12: a few splits at least, none without a split bound.
    assert (int(record.get("splits", 0)) >= 4) == (split_urls is not None)
    counters = report["tasks"][TASK]["counters"]
    assert counters["claimed"] == counters["finished"] == report["tasks"][TASK]["pages"]
    assert len(states) >= counters["finished"]
    assert "pending" not in states.values(), "every URL seen ended"
    last = pipeline.dag().topological_order()[-1]
    expected = sorted(model.expected_items(), key=lambda i: i["sku"])
    assert exported_items(tmp_path / "items" / f"{last}.jsonl") == [dict(e) for e in expected]
