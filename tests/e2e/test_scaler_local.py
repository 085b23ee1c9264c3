"""The scaler on the local cloud: a growing backlog raises fetch's concurrency (the runtime
follows the mapping), and it falls back once the backlog has drained."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import demo_pipeline

from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.scaling import ScalerSettings

pytestmark = pytest.mark.slow

TICK = 1.0


def _fetch(tick: dict[str, object]) -> dict[str, object]:
    decisions = tick["decisions"]
    assert isinstance(decisions, list)
    found: dict[str, object] = decisions[0]
    assert found["function"] == "fetch"
    return found


def test_a_backlog_raises_fetch_and_a_drained_one_lowers_it(
    tmp_path: Path, cloud_env: None
) -> None:
    model = ShopModel(categories=6, products_per_category=60)
    with DemoSite(model) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True)
        with staged_pipelines([(pipeline, None)]) as directory:
            template = synthesize(directory)
            with LocalCloud(
                template,
                directory,
                log_path=tmp_path / "functions.log",
                sweep_every=2.0,
                scale_every=TICK,
            ) as cloud:
                status = cloud.run(pipeline.name, "scale-up", timeout=RUN_TIMEOUT)
                assert status.status == "SUCCEEDED"
                during = list(cloud.scaling)
                # The crawl is over: the next ticks see no work and step fetch down, and the
                # runtime follows the mapping (it re-reads it every few seconds).
                assert cloud.runtime is not None
                # Generous: a busy machine stretches the scaled cooldowns' wall time; the
                # loop ends as soon as fetch is down.
                deadline = time.monotonic() + FOLLOWS_TIMEOUT
                lowest = ScalerSettings().min_concurrency
                while time.monotonic() < deadline:
                    limits = {s.function: s for s in cloud.runtime.stats().values()}
                    if limits["fetch"].concurrency_limit == lowest:
                        break
                    time.sleep(TICK)
                after = list(cloud.scaling)
    raised = [_fetch(t) for t in during if _fetch(t)["direction"] == 1]
    assert raised, [_fetch(t) for t in during]
    assert max(int(str(d["concurrency"])) for d in raised) > int(str(raised[0]["previous"]))
    assert raised[0]["reason"] in {"level_high", "qps_high", "bounds"}
    assert int(str(_fetch(after[-1])["concurrency"])) == lowest, [_fetch(t) for t in after[-5:]]
    assert limits["fetch"].concurrency_limit == lowest
