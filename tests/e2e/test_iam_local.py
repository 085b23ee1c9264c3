"""IAM on the local cloud: a grant the stack lacks fails here as on AWS, naming the action.

Each test synthesizes the real stack, takes one grant out of one function's policy (the
template's ``AWS::IAM::Policy``, exactly what CDK's ``grant_*`` wrote), deploys it, and runs
what needs the grant: the function's request is refused with ``AccessDenied`` naming the
action, where the whole stack passes (every other end-to-end test runs with IAM enforced).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT
from tests.helpers.demo import demo_pipeline

from stepcrawl.alerts import reset_providers
from stepcrawl.demo import DemoSite, ShopModel
from stepcrawl.emulator.alarm_events import execution_event, sns_event
from stepcrawl.emulator.alarms import alert_secret_name, store_alert_channels
from stepcrawl.emulator.moto_iam import AccessDeniedError
from stepcrawl.emulator.scheduler import schedules_from_template
from stepcrawl.emulator.server import ACCOUNT, REGION
from stepcrawl.local.cloud import LOCAL_STAGE, LocalCloud, synthesize
from stepcrawl.local.runner import staged_pipelines

pytestmark = pytest.mark.slow


def without_grant(template: dict[str, Any], role: str, action: str) -> dict[str, Any]:
    """The template with ``action`` taken out of every statement of the policies attached
    to the role whose logical id starts with ``role`` (a copy); fails if there was none."""
    changed = copy.deepcopy(template)
    removed = 0
    for resource in changed["Resources"].values():
        props = resource.get("Properties", {})
        roles = [r.get("Ref", "") for r in props.get("Roles", [])]
        if resource["Type"] != "AWS::IAM::Policy" or not any(r.startswith(role) for r in roles):
            continue
        statements = props["PolicyDocument"]["Statement"]
        for statement in statements:
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            removed += action in actions
            statement["Action"] = [a for a in actions if a != action]
        props["PolicyDocument"]["Statement"] = [s for s in statements if s["Action"]]
    assert removed, f"{role} has no grant of {action} to remove"
    # A policy left without statements is not a policy (IAM refuses it): it goes, and so do
    # the DependsOn naming it.
    empty = {
        name
        for name, resource in changed["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy"
        and not resource["Properties"]["PolicyDocument"]["Statement"]
    }
    for name in empty:
        del changed["Resources"][name]
    for resource in changed["Resources"].values():
        depends = resource.get("DependsOn")
        if isinstance(depends, list):
            resource["DependsOn"] = [d for d in depends if d not in empty]
        elif depends in empty:
            del resource["DependsOn"]
    return changed


def _wait_for(what: str, found: Callable[[], bool]) -> None:
    deadline = time.monotonic() + FOLLOWS_TIMEOUT
    while time.monotonic() < deadline:
        if found():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _denial(action: str) -> str:
    return f"is not authorized to perform: {action} on resource: "


def test_parse_without_its_items_grant_is_refused_the_write(
    tmp_path: Path, cloud_env: None
) -> None:
    log = tmp_path / "functions.log"
    with DemoSite(ShopModel(categories=1, products_per_category=4)) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True)
        with staged_pipelines([(pipeline, None)]) as directory:
            template = without_grant(synthesize(directory), "WorkersParseRole", "s3:PutObject")
            with LocalCloud(template, directory, log_path=log, sweep_every=1.0) as cloud:
                assert cloud.deployment is not None
                cloud.deployment.start(pipeline.name, "no-items")
                _wait_for(
                    "parse's refused write",
                    lambda: _denial("s3:PutObject") in log.read_text(encoding="utf-8"),
                )
                status = cloud.deployment.status("no-items", pipeline=pipeline.name)
    assert status.status != "SUCCEEDED", "a crawl whose items cannot be written does not succeed"
    refused = [line for line in log.read_text(encoding="utf-8").splitlines() if "PutObject" in line]
    assert any("assumed-role/" in line and "/items/" in line for line in refused), refused[:3]


def test_the_scaler_without_update_event_source_mapping_is_refused(
    tmp_path: Path, cloud_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="stepcrawl.local.cloud")
    action = "lambda:UpdateEventSourceMapping"
    with DemoSite(ShopModel(categories=6, products_per_category=60)) as site:
        pipeline = demo_pipeline(site.url, crawl_only=True)
        with staged_pipelines([(pipeline, None)]) as directory:
            template = without_grant(synthesize(directory), "WorkersScalerRole", action)
            with LocalCloud(
                template, directory, log_path=tmp_path / "functions.log", scale_every=1.0
            ) as cloud:
                assert cloud.deployment is not None
                cloud.deployment.start(pipeline.name, "no-scaling")  # a backlog to scale for
                _wait_for("the scaler's refused update", lambda: _denial(action) in caplog.text)
                scaled = list(cloud.scaling)
    assert all(tick.get("error") is None for tick in scaled)
    assert "scaler tick failed" in caplog.text


def test_the_notifier_without_its_secret_grant_is_refused_the_channel(
    tmp_path: Path, cloud_env: None
) -> None:
    reset_providers()  # the notifier's cached secrets provider points at an earlier emulator
    action = "secretsmanager:GetSecretValue"
    secret = alert_secret_name(LOCAL_STAGE)
    pipeline = demo_pipeline("http://127.0.0.1:9/", crawl_only=True)
    with staged_pipelines([(pipeline, None)]) as directory:
        template = synthesize(directory, alert_secrets=[secret])
        template = without_grant(template, "WorkersNotifyRole", action)
        with LocalCloud(template, directory, log_path=tmp_path / "functions.log") as cloud:
            channel = {"type": "slack", "url": "http://127.0.0.1:9/slack"}
            store_alert_channels(
                cloud.emulator.client("secretsmanager"), secret, json.dumps(channel)
            )
            assert cloud.runtime is not None
            with pytest.raises(Exception, match=_denial(action)):
                cloud.runtime.invoke("notify", _failed_run_event(pipeline.name))


def _failed_run_event(pipeline: str) -> dict[str, Any]:
    machine = f"stepcrawl-{LOCAL_STAGE}-{pipeline}"
    start = datetime.now(UTC)
    execution = {
        "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{machine}:r1",
        "stateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{machine}",
        "name": "r1",
        "status": "FAILED",
        "startDate": start,
        "stopDate": start + timedelta(seconds=5),
        "error": "Stepcrawl.TaskFailed",
        "cause": "crawl",
    }
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT}:stepcrawl-{LOCAL_STAGE}-alerts"
    event = execution_event(execution, account=ACCOUNT, region=REGION)
    return sns_event(topic, event, subject=None, when=start)


def test_a_schedule_delivers_with_its_own_role(tmp_path: Path, cloud_env: None) -> None:
    """EventBridge Scheduler invokes the sweeper with the schedule's role: without its
    ``lambda:InvokeFunction`` the delivery is refused (and with it, it runs)."""
    pipeline = demo_pipeline("http://127.0.0.1:9/", crawl_only=True)
    with staged_pipelines([(pipeline, None)]) as directory:
        template = synthesize(directory)
        sweeper = next(
            s
            for s in schedules_from_template(template)
            if s.target_ref.startswith("WorkersSweeper")
        )
        role = template["Resources"][sweeper.role_ref]
        assert role["Type"] == "AWS::IAM::Role"
        now = datetime.now(UTC)
        with LocalCloud(template, directory, log_path=tmp_path / "full.log") as cloud:
            cloud.deliver(sweeper, now)  # the stack's own grant: delivered
        refused = without_grant(template, sweeper.role_ref, "lambda:InvokeFunction")
        with (
            LocalCloud(refused, directory, log_path=tmp_path / "refused.log") as cloud,
            pytest.raises(AccessDeniedError, match=r"lambda:InvokeFunction on resource: "),
        ):
            cloud.deliver(sweeper, now)
