"""Checkpoints of the task log's view on the local cloud, IAM enforced: the commits write,
read and delete them with their own roles, and the containers that crashes replace start from
them; the crawl still records every page once and exports exactly the shop's items.

The stack is deployed with a checkpoint every 2 log entries (``log_checkpoint_entries``;
4,000 deployed, crawl/checkpoints.py), so that a shop of ~110 pages writes many.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.demo import demo_pipeline

from stepcrawl.crawl.checkpoints import load_checkpoint
from stepcrawl.crawl.log_reads import url_states
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.lambda_runtime import Chaos
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.demo import exported_items
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.reports.report import write_run_outputs

pytestmark = pytest.mark.slow

TASK = "crawl_shop"
EVERY = 2


def test_cold_containers_start_from_checkpoints_their_roles_may_write(
    tmp_path: Path, cloud_env: None
) -> None:
    model = ShopModel(categories=4, products_per_category=20)
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url)
        with staged_pipelines([(pipeline, None)]) as directory:
            template = synthesize(directory, settings={"log_checkpoint_entries": EVERY})
            with LocalCloud(
                template,
                directory,
                log_path=tmp_path / "functions.log",
                sweep_every=2.0,
                # crashed containers come back cold: they read a checkpoint, not the log
                chaos=Chaos(crash_rate=0.3, duplicate_rate=0.3, seed=11, redelivery_after=1.0),
            ) as cloud:
                deployment = cloud.deployment
                assert deployment is not None
                status = cloud.run(pipeline.name, "ckpt")
                assert status.status == "SUCCEEDED", status
                report = write_run_outputs(deployment, status, tmp_path)
                table, blobs = deployment.table, deployment.blobs
                checkpoint = load_checkpoint(table, blobs, "ckpt", TASK)
                states = url_states(table, "ckpt", TASK, blobs)
                kept = {k.split("/")[3] for k in blobs.list(f"views/ckpt/{TASK}/")}
    counters = report["tasks"][TASK]["counters"]
    assert counters["claimed"] == counters["finished"] == report["tasks"][TASK]["pages"]
    assert "pending" not in states.values(), "every URL seen ended"
    # The last checkpoint is a whole view of the log up to its entry, read back by its
    # digests; only it and the one before it are kept (the others deleted by the commits).
    assert checkpoint is not None
    assert checkpoint.seq % EVERY == 0
    # How many entries a crawl makes depends on how its parse batches fill (on a loaded
    # machine, fuller): ~110 pages make 8 or more; three checkpoints: one has been deleted.
    assert checkpoint.seq >= 3 * EVERY, "a shop of ~110 pages makes more entries than that"
    assert len(checkpoint.urls) <= len(states)
    assert kept == {f"{checkpoint.seq - EVERY:010d}", f"{checkpoint.seq:010d}"}
    last = pipeline.dag().topological_order()[-1]
    expected = sorted(model.expected_items(), key=lambda i: i["sku"])
    assert exported_items(tmp_path / "items" / f"{last}.jsonl") == [dict(e) for e in expected]
