"""The whole system locally: the CDK template deployed into moto, the real handlers polled by
the local Lambda runtime, the compiled state machine executing, the demo shop on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.runtime import services_from_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def cloud_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    services_from_env.cache_clear()
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield
    services_from_env.cache_clear()


def test_a_pipeline_runs_on_the_emulated_stack(tmp_path: Path, cloud_env: None) -> None:
    with DemoSite(slow_delay=0.05) as site:
        data = yaml.safe_load((ROOT / "pipelines" / "demo-shop.yaml").read_text("utf-8"))
        data["tasks"][0]["seeds"] = [site.url]
        (tmp_path / "demo-shop.yaml").write_text(yaml.safe_dump(data), "utf-8")
        template = synthesize(tmp_path)
        with LocalCloud(template, tmp_path) as cloud:
            described = cloud.run("stepcrawl-local-demo-shop", "run-1", timeout=180)
            assert described["status"] == "SUCCEEDED", described
            s3 = cloud.emulator.client("s3")
            assert cloud.emulator.stack is not None
            bucket = cloud.emulator.stack.outputs["BucketName"]
            items = []
            listing = s3.list_objects_v2(Bucket=bucket, Prefix="exports/demo-shop/run-1/")
            for entry in listing.get("Contents", []):
                body = s3.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
                items += [json.loads(line) for line in body.decode().splitlines()]
    public = sorted(
        ({k: v for k, v in i.items() if not k.startswith("_")} for i in items),
        key=lambda i: str(i["sku"]),
    )
    assert public == sorted(ShopModel().expected_items(), key=lambda i: i["sku"])
