"""Data quality end to end on the local cloud (issue 29): a generated shop whose markup changes
between two runs (a third of its product pages lose the price's class, so the selector stops
matching there) makes the second run warn on exactly that field and rule, with the baseline,
in the report, ``stepcrawl profile``, the console's topology and an alert the real notifier
posts to a Slack-format receiver on 127.0.0.1; the run after the site is fixed resolves it.
And a ``fail`` check fails the crawl, so the run's load stage never runs.

Everything is the stack's: the finishing function publishes to the template's alert topic
with its own role's credentials (IAM enforced), the local cloud delivers the SNS message to
the subscribed notify function, which reads its channel from the emulator's Secrets Manager.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.demo import CRAWL_TASK, PRICE_OPTIONAL_RULE, demo_pipeline
from tests.helpers.receiver import Receiver, fields_of, wait_for
from typer.testing import CliRunner

from stepcrawl.alerts import reset_providers
from stepcrawl.cli import app
from stepcrawl.console.topology import TopologyProbe
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels
from stepcrawl.local.cloud import LOCAL_STAGE, LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines
from stepcrawl.pipeline import Pipeline
from stepcrawl.reports.report import write_run_outputs

pytestmark = pytest.mark.slow

SHOP = ShopModel(categories=2, products_per_category=15)


def _pipeline(site: DemoSite, monitors: dict[str, Any], *, crawl_only: bool) -> Pipeline:
    crawl = {"extract": [PRICE_OPTIONAL_RULE], "monitors": monitors}
    return demo_pipeline(
        site.url,
        crawl_only=crawl_only,
        tasks={CRAWL_TASK: crawl},
        defaults={"retry": {"max_attempts": 4, "base_delay": "100ms", "max_delay": "200ms"}},
    )


def _cloud(tmp_path: Path, directory: Path, receiver: Receiver) -> LocalCloud:
    secret = alert_secret_name(LOCAL_STAGE)
    template = synthesize(directory, alert_secrets=[secret])
    cloud = LocalCloud(template, directory, log_path=tmp_path / "functions.log")
    cloud.__enter__()
    channel = {"type": "slack", "url": f"http://127.0.0.1:{receiver.port}/slack"}
    store_alert_channels(cloud.emulator.client("secretsmanager"), secret, json.dumps(channel))
    return cloud


def test_a_markup_change_warns_on_the_field_everywhere_and_the_fix_resolves_it(
    tmp_path: Path, cloud_env: None, receiver: Receiver
) -> None:
    reset_providers()  # the notifier's cached secrets provider points at an earlier emulator
    with DemoSite(SHOP, slow_delay=0.0, flaky=False) as site:
        pipeline = _pipeline(site, {"field_coverage": {"price": ">= 0.98"}}, crawl_only=True)
        with staged_pipelines([(pipeline, None)]) as directory:
            cloud = _cloud(tmp_path, directory, receiver)
            try:
                first = cloud.run(pipeline.name, "before", timeout=RUN_TIMEOUT)
                assert first.status == "SUCCEEDED", first
                site.change_markup('class="price"', 'class="cost"', every=3)
                second = cloud.run(pipeline.name, "changed", timeout=RUN_TIMEOUT)
                assert second.status == "SUCCEEDED", "a warning does not fail the run"
                assert cloud.deployment is not None
                report = write_run_outputs(cloud.deployment, second, tmp_path / "out")
                shown = TopologyProbe(cloud.deployment).probe("changed")
                firing = wait_for(
                    "the FIRING post",
                    lambda: receiver.find(r"\[FIRING\].*data quality of crawl_shop"),
                    FOLLOWS_TIMEOUT,
                )
                site.restore_markup()
                third = cloud.run(pipeline.name, "fixed", timeout=RUN_TIMEOUT)
                assert third.status == "SUCCEEDED", third
                resolved = wait_for(
                    "the RESOLVED post",
                    lambda: receiver.find(r"\[RESOLVED\].*data quality of crawl_shop"),
                    FOLLOWS_TIMEOUT,
                )
            finally:
                cloud.__exit__(None, None, None)

    # The report: the profile, the breached check with its baseline, and a warning.
    checks = {c["id"]: c for c in report["profiles"][CRAWL_TASK]["monitors"]}
    assert {i for i, c in checks.items() if c["breached"]} == {"field_coverage:price"}
    assert checks["field_coverage:price"]["value"] == pytest.approx(2 / 3, abs=0.02)
    assert checks["field_coverage:price"]["baseline"] == 1.0
    (warning,) = [w for w in report["warnings"] if "data quality" in w]
    assert "field_coverage:price" in warning
    assert "baseline 1" in warning
    assert "field_coverage:price" in (tmp_path / "out" / "report.html").read_text()

    # stepcrawl profile, from the report
    result = CliRunner().invoke(
        app, ["profile", "changed", "--report", str(tmp_path / "out" / "report.json")]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"price\s.*66\.\d%", result.output), result.output
    assert re.search(r"field_coverage:price.*breached", result.output), result.output

    # The console's topology: the task's breached check
    (crawl,) = [t for t in shown["tasks"] if t["id"] == CRAWL_TASK]
    assert [c["id"] for c in crawl["quality"]["breached"]] == ["field_coverage:price"]

    # The alerts: what broke, its value and baseline, then resolved by the fixed run
    fields = fields_of(firing[1])
    assert fields["Run"] == "changed"
    assert fields["Metric"] == "field_coverage price (task crawl_shop)"
    assert fields["Threshold"] == ">= 0.98"
    assert float(fields["Current value"]) == pytest.approx(2 / 3, abs=0.02)
    assert "baseline 1" in json.dumps(firing[1])
    assert "stepcrawl profile changed --task crawl_shop" in json.dumps(firing[1])
    assert fields_of(resolved[1])["Run"] == "fixed"
    posts = [t for t in receiver.texts() if "data quality" in t]
    assert len(posts) == 2, posts


def test_a_fail_check_fails_the_crawl_and_the_load_never_runs(
    tmp_path: Path, cloud_env: None, receiver: Receiver
) -> None:
    reset_providers()
    products = len(SHOP.products)
    monitors = {"min_items": {"check": products + 1, "severity": "fail"}}
    with DemoSite(SHOP, slow_delay=0.0, flaky=False) as site:
        pipeline = _pipeline(site, monitors, crawl_only=False)
        with staged_pipelines([(pipeline, None)]) as directory:
            cloud = _cloud(tmp_path, directory, receiver)
            try:
                ended = cloud.run(pipeline.name, "too-few", timeout=RUN_TIMEOUT)
                assert cloud.deployment is not None
                exported = list(cloud.deployment.items("too-few", "export_products"))
            finally:
                cloud.__exit__(None, None, None)
    assert ended.status == "FAILED", ended
    assert "Stepcrawl.DataQuality" in str(ended.cause), ended.cause
    assert f"min_items: {products}" in str(ended.cause)
    assert ended.tasks[CRAWL_TASK].state == "failed"
    assert ended.tasks["export_products"].state not in ("succeeded", "running")
    assert exported == [], "nothing was loaded"
