"""A crawl whose seen set is cut into three partitions on the local cloud, IAM enforced
(issue 24): the start, the parse function, the sweeper and the finisher propose and judge
with their own roles (crawl/proposing.py), under crashes and duplicate deliveries, and the
run still records every page once and exports exactly the shop's items."""

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


def test_a_partitioned_crawl_records_every_page_once_with_each_functions_role(
    tmp_path: Path, cloud_env: None
) -> None:
    model = ShopModel(categories=4, products_per_category=20)
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url, defaults={"limits": {"seen_partitions": 3}})
        with (
            staged_pipelines([(pipeline, None)]) as directory,
            LocalCloud(
                synthesize(directory),
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
    assert record["partitions"] == 3
    counters = report["tasks"][TASK]["counters"]
    assert counters["claimed"] == counters["finished"] == report["tasks"][TASK]["pages"]
    assert len(states) >= counters["finished"]
    assert "pending" not in states.values(), "every URL seen ended"
    last = pipeline.dag().topological_order()[-1]
    expected = sorted(model.expected_items(), key=lambda i: i["sku"])
    assert exported_items(tmp_path / "items" / f"{last}.jsonl") == [dict(e) for e in expected]
