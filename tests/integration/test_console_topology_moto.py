"""The console's topology probe on a real run: the demo pipeline through the real handlers in
moto, read through a ``Deployment`` of a stack whose outputs name the same resources.

The stack (``stepcrawl-test``) holds a worker function whose environment has the crawl
settings (where ``Deployment.crawl_config`` finds the shard count, as on AWS); the control
queue's event source mapping has a ``MaximumConcurrency`` and the scaler has a record for
fetch only, so each of the three ways to a function's concurrency shows. The run is probed
while it runs and after; the last probe must agree with report.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.demo import CRAWL_TASK, SMALL_SHOP_DEFAULTS, demo_pipeline, write_pipeline

from stepcrawl import names
from stepcrawl.compiler import compile_pipeline, definition_json, substitute
from stepcrawl.console.executions import list_runs
from stepcrawl.console.topology import TOPOLOGY_METRICS, TopologyProbe
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.deployment import Deployment
from stepcrawl.errors import ConfigError
from stepcrawl.reports.report import write_run_outputs
from stepcrawl.runtime import services_from_env
from stepcrawl.table_keys import scaler_key

from .conftest import Moto
from .test_handlers_moto import Mapping, load_handler

pytestmark = pytest.mark.moto

STAGE = "test"
RUN = "run-1"
TABLE = "stepcrawl"
BUCKET = "stepcrawl-data"
CONFIG = CrawlConfig(shards=2, window=64)
CONTROL_CONCURRENCY = 5
FETCH_CONCURRENCY = 7


@pytest.fixture
def stack(moto: Moto, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The functions' environment (as tests/integration/test_handlers_moto.py) and a stack
    whose outputs name its resources."""
    for key, value in {
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": names.METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(key, value)
    sqs = moto.client("sqs")
    queues = {
        name: sqs.create_queue(QueueName=f"stepcrawl-{name}")["QueueUrl"]
        for name in ("control", "fetch", "parse", "control-dlq", "fetch-dlq", "parse-dlq")
    }
    moto.client("s3").create_bucket(Bucket=BUCKET)
    moto.table(TABLE)
    environment = {
        names.ENV_TABLE: TABLE,
        names.ENV_BUCKET: BUCKET,
        names.ENV_FETCH_QUEUE_URL: queues["fetch"],
        names.ENV_PARSE_QUEUE_URL: queues["parse"],
        **CONFIG.to_env(),
    }
    for key, value in {**environment, names.ENV_PIPELINES_DIR: str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    role = moto.client("iam").create_role(RoleName="stepcrawl", AssumeRolePolicyDocument="{}")
    outputs = {
        names.OUTPUT_TABLE_NAME: TABLE,
        names.OUTPUT_BUCKET_NAME: BUCKET,
        names.OUTPUT_CONTROL_QUEUE_URL: queues["control"],
        names.OUTPUT_FETCH_QUEUE_URL: queues["fetch"],
        names.OUTPUT_PARSE_QUEUE_URL: queues["parse"],
        names.OUTPUT_CONTROL_DLQ_URL: queues["control-dlq"],
        names.OUTPUT_FETCH_DLQ_URL: queues["fetch-dlq"],
        names.OUTPUT_PARSE_DLQ_URL: queues["parse-dlq"],
        f"{names.OUTPUT_STATE_MACHINE_ARN_PREFIX}DemoShop": (
            "arn:aws:states:us-east-1:123456789012:stateMachine:demo-shop"
        ),
    }
    template = {
        "Resources": {
            "Worker": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Runtime": "python3.12",
                    "Handler": "index.handler",
                    "Role": role["Role"]["Arn"],
                    "Code": {"ZipFile": "def handler(event, context):\n    return event\n"},
                    "Environment": {"Variables": environment},
                },
            }
        },
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    cloudformation = moto.client("cloudformation")
    cloudformation.create_stack(StackName=f"stepcrawl-{STAGE}", TemplateBody=json.dumps(template))
    worker = cloudformation.list_stack_resources(StackName=f"stepcrawl-{STAGE}")[
        "StackResourceSummaries"
    ][0]["PhysicalResourceId"]
    control_arn = sqs.get_queue_attributes(QueueUrl=queues["control"], AttributeNames=["QueueArn"])
    moto.client("lambda").create_event_source_mapping(
        EventSourceArn=control_arn["Attributes"]["QueueArn"],
        FunctionName=worker,
        Enabled=False,  # the test plays the mappings itself
        ScalingConfig={"MaximumConcurrency": CONTROL_CONCURRENCY},
    )
    pk, sk = scaler_key("fetch")
    moto.client("dynamodb").put_item(
        TableName=TABLE,
        Item={"pk": {"S": pk}, "sk": {"S": sk}, "concurrency": {"N": str(FETCH_CONCURRENCY)}},
    )
    services_from_env.cache_clear()
    yield {"sqs": sqs, "queues": queues, "dir": tmp_path, "moto": moto}
    services_from_env.cache_clear()


def _run_and_probe(stack: dict[str, Any], probe: TopologyProbe, site: DemoSite) -> list[Any]:
    """Start the demo run and play the mappings until it ends, probing every ~0.3 s; the
    probes taken while it ran."""
    moto: Moto = stack["moto"]
    sfn = moto.client("stepfunctions")
    pipeline = demo_pipeline(site.url, defaults=SMALL_SHOP_DEFAULTS)
    write_pipeline(pipeline, stack["dir"] / f"{pipeline.name}.yaml")  # where handlers look
    definition = substitute(
        compile_pipeline(pipeline),
        {
            names.PLACEHOLDER_CONTROL_QUEUE_URL: stack["queues"]["control"],
            names.PLACEHOLDER_TABLE_NAME: TABLE,
        },
    )
    machine = sfn.create_state_machine(
        name=pipeline.name,
        definition=definition_json(definition),
        roleArn="arn:aws:iam::123456789012:role/stepcrawl",
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=machine, name=RUN)["executionArn"]
    mappings = [
        Mapping(stack["sqs"], stack["queues"]["control"], load_handler("dispatch"), 1),
        Mapping(stack["sqs"], stack["queues"]["fetch"], load_handler("fetch"), 10),
        Mapping(stack["sqs"], stack["queues"]["parse"], load_handler("parse"), 5),
    ]
    live: list[Any] = []
    deadline, next_probe = time.monotonic() + 60, 0.0
    while sfn.describe_execution(executionArn=execution)["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the run did not end within 60 s"
        if time.monotonic() >= next_probe:
            live.append(probe.probe(RUN, metrics=TOPOLOGY_METRICS))
            next_probe = time.monotonic() + 0.3
        if not sum(m.poll() for m in mappings):
            time.sleep(0.05)
    return live


def test_a_demo_run_probed_live_and_after(stack: dict[str, Any], tmp_path: Path) -> None:
    deployment = Deployment(STAGE)
    probe = TopologyProbe(deployment)
    with DemoSite(ShopModel(categories=1, products_per_category=6)) as site:
        live = _run_and_probe(stack, probe, site)
    status = deployment.status(RUN)
    assert status.status == "SUCCEEDED", status
    report = write_run_outputs(deployment, status, tmp_path / "out")
    crawled = report["tasks"][CRAWL_TASK]

    final = json.loads(json.dumps(probe.probe(RUN, metrics=TOPOLOGY_METRICS)))  # JSON-safe
    assert final["status"] == "SUCCEEDED"
    assert final["started"] is not None
    assert final["stopped"] is not None
    tasks = {t["id"]: t for t in final["tasks"]}
    assert list(tasks) == [  # upstream first
        "crawl_shop",
        "clean_products",
        "check_products",
        "export_products",
    ]
    assert {t["state"] for t in tasks.values()} == {"succeeded"}
    # The demo's chain, from the definition the run executed.
    assert final["edges"] == [
        {"source": "crawl_shop", "target": "clean_products"},
        {"source": "clean_products", "target": "check_products"},
        {"source": "check_products", "target": "export_products"},
    ]
    crawl = tasks[CRAWL_TASK]
    assert crawl["in_flight"] is None  # nothing lost to sight (tests/e2e/test_in_flight_local.py)
    metrics = crawl["metrics"]
    assert list(metrics) == list(TOPOLOGY_METRICS)
    assert metrics["pages"] == crawled["pages"] > 0
    assert metrics["errors"] == crawled["counters"]["failed"] > 0
    assert metrics["backlog"] == 0
    assert metrics["retries"] == crawled["retries"] > 0  # the flaky page's 500s
    assert metrics["skipped"] == crawled["skipped"]
    assert metrics["items"] == crawled["counters"]["items"]
    assert metrics["p99_fetch_ms"] == crawled["fetch_ms"]["p99"] > 0
    # ETL tasks: the items each stage output (the load: what it wrote).
    for task_id in ("clean_products", "check_products", "export_products"):
        assert tasks[task_id]["metrics"] == {"items": report["tasks"][task_id]["items"]}
        assert "hosts" not in tasks[task_id]
    # Hosts: the demo's broken links are the failures of 127.0.0.1, whose breaker is closed.
    hosts = {h["host"]: h for h in crawl["hosts"]}
    assert hosts["127.0.0.1"]["breaker"] == "closed"
    assert hosts["127.0.0.1"]["errors"] == metrics["errors"]
    assert hosts["127.0.0.1"]["paused"] is False
    assert crawl["hosts_total"] == len(hosts)
    functions = {f["name"]: f for f in final["functions"]}
    assert list(functions) == ["fetch", "parse", "control"]
    assert functions["fetch"]["concurrency"] == FETCH_CONCURRENCY  # the scaler's record
    assert functions["control"]["concurrency"] == CONTROL_CONCURRENCY  # the mapping
    assert functions["parse"]["concurrency"] is None  # neither
    assert all(f["dead_letters"] == 0 for f in functions.values())

    # While it ran: the crawl was seen running, with the figures only growing.
    assert live, "the run ended before a probe"
    seen = [next(t for t in p["tasks"] if t["id"] == CRAWL_TASK)["metrics"]["pages"] for p in live]
    assert "running" in {
        next(t for t in p["tasks"] if t["id"] == CRAWL_TASK)["state"] for p in live
    }
    numbers = [n for n in seen if n is not None]
    assert numbers == sorted(numbers)

    # The runs list finds it; a run that does not exist is a ConfigError.
    runs = list_runs(deployment)
    assert [r["run"] for r in runs] == [RUN]
    assert runs[0]["pipeline"] == "demo-shop"
    assert runs[0]["status"] == "SUCCEEDED"
    assert list_runs(deployment, "demo-shop", limit=1) == runs
    with pytest.raises(ConfigError, match="no run nope"):
        probe.probe("nope")
