"""Preflight's checks on the answers moto cannot give, from botocore's Stubber: an account
with 10 concurrent executions, a region without EventBridge Scheduler, refused permissions,
a failed toolkit stack; the render image's judgement on what Docker said; the command's
exit code 2. The same checks against the emulator: tests/integration/test_preflight_emulator.py.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.cli.preflight_command import stack_settings
from stepcrawl.preflight import (
    CONCURRENCY_QUOTA_CODE,
    MIN_MAPPING_CONCURRENCY,
    AwsAccount,
    DockerFacts,
    QueueMapping,
    StackSettings,
    Status,
    check_alert_secrets,
    check_bootstrap,
    check_concurrency,
    check_render_image,
    check_scheduler,
    check_xray,
    fit_into,
    probe_docker,
    run_preflight,
)
from stepcrawl.preflight.concurrency import scaled_peak
from stepcrawl.preflight.model import Target

ROOT = Path(__file__).resolve().parents[2]
REGION = "eu-west-1"
TARGET = Target(account="111122223333", region=REGION)
UNQUEUED = ("sweeper", "scaler", "notify")
DISPATCH = QueueMapping("dispatch", "dispatch_max_concurrency", 5)
FETCH = QueueMapping("fetch", "fetch_max_concurrency", 10, scaled=True)
PARSE = QueueMapping("parse", "parse_max_concurrency", 5, scaled=True)
RENDER = QueueMapping("render", "render_max_concurrency", 2)
#: The shipped defaults (infra/config.py), with the render function (pipelines/ renders).
DEFAULTS = StackSettings(
    stage="dev",
    mappings=(DISPATCH, FETCH, PARSE, RENDER),
    scaler_max_concurrency=1000,
    other_functions=UNQUEUED,
    alert_secrets=("stepcrawl/dev/alerts/oncall",),
    renders_pages=True,
)
NO_RENDER = StackSettings(
    stage="dev",
    mappings=(DISPATCH, FETCH, PARSE),
    scaler_max_concurrency=1000,
    other_functions=UNQUEUED,
)


class Stubbed:
    """Stubbed clients of one account: queue answers per service, then ``account``."""

    def __init__(self) -> None:
        session = boto3.Session(
            aws_access_key_id="stub", aws_secret_access_key="stub", region_name=REGION
        )
        self.clients: dict[str, Any] = {}
        self.stubs: dict[str, Stubber] = {}
        self._session = session
        self.account = AwsAccount(REGION, self.client)

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = self._session.client(service)  # type: ignore[call-overload]
            self.stubs[service] = Stubber(self.clients[service])
            self.stubs[service].activate()
        return self.clients[service]

    def unstubbed(self, service: str) -> Any:
        """A client with no stubber: its requests go as far as botocore's send hooks."""
        self.clients[service] = self._session.client(service)  # type: ignore[call-overload]
        return self.clients[service]

    def stub(self, service: str) -> Stubber:
        self.client(service)
        return self.stubs[service]

    def answers(self, service: str, method: str, response: dict[str, Any]) -> None:
        self.stub(service).add_response(method, response)

    def refuses(self, service: str, method: str, code: str, status: int = 400) -> None:
        self.stub(service).add_client_error(
            method,
            service_error_code=code,
            service_message=f"{code} says no",
            http_status_code=status,
        )

    def verify(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def aws() -> Iterator[Stubbed]:
    stubbed = Stubbed()
    yield stubbed
    stubbed.verify()  # every queued answer was asked for


def account_limit(quota: int, unreserved: int | None = None) -> dict[str, Any]:
    return {
        "AccountLimit": {
            "ConcurrentExecutions": quota,
            "UnreservedConcurrentExecutions": quota if unreserved is None else unreserved,
        }
    }


# -- Lambda concurrency --------------------------------------------------------------------


def test_a_new_account_of_10_cannot_hold_the_defaults_even_at_the_minimum(aws: Stubbed) -> None:
    aws.answers("lambda", "get_account_settings", account_limit(10))
    result = check_concurrency(aws.account, DEFAULTS)
    assert result.status is Status.fail
    assert "10 unreserved of the account's 10" in result.found
    assert "needs 25 at deploy" in result.found  # 5 + 10 + 5 + 2, and one each for 3 functions
    assert "fetch_max_concurrency=10" in result.found
    assert result.fix is not None
    assert f"--quota-code {CONCURRENCY_QUOTA_CODE} --desired-value 1000" in result.fix
    assert "needs 11" in result.fix  # 4 queues at 2, and 3: no setting fits, only the quota
    assert "-c " not in result.fix


def test_without_render_an_account_of_10_is_told_the_settings_that_fit(aws: Stubbed) -> None:
    aws.answers("lambda", "get_account_settings", account_limit(10))
    result = check_concurrency(aws.account, NO_RENDER)
    assert result.status is Status.fail
    assert result.fix is not None
    assert result.fix.startswith("aws service-quotas request-service-quota-increase")
    assert (
        "npx cdk deploy -c dispatch_max_concurrency=2 -c fetch_max_concurrency=2 "
        "-c parse_max_concurrency=2 -c scaler='{\"max_concurrency\": 2}'" in result.fix
    )


def test_the_scaler_ceiling_beyond_the_pool_is_a_warning_with_the_value_that_fits(
    aws: Stubbed,
) -> None:
    aws.answers("lambda", "get_account_settings", account_limit(1000))
    result = check_concurrency(aws.account, DEFAULTS)
    assert result.status is Status.warn
    assert "raise fetch and parse to 1000 each (2010 in all)" in result.found
    # (1000 - 3 others - dispatch 5 - render 2) // 2 scaled mappings
    assert result.fix == (
        "npx cdk deploy -c scaler='{\"max_concurrency\": 495}' "
        "(with your other scaler fields, if any)"
    )


def test_concurrency_reserved_by_other_functions_is_not_the_stacks(aws: Stubbed) -> None:
    settings = StackSettings(**{**DEFAULTS.__dict__, "scaler_max_concurrency": 200})
    aws.answers("lambda", "get_account_settings", account_limit(1000, unreserved=900))
    assert check_concurrency(aws.account, settings).status is Status.ok  # 412 of 900
    aws.answers("lambda", "get_account_settings", account_limit(1000, unreserved=400))
    result = check_concurrency(aws.account, settings)
    assert result.status is Status.warn
    assert "400 unreserved of the account's 1000" in result.found


def test_a_refused_permission_names_the_action_and_is_not_a_crash(aws: Stubbed) -> None:
    aws.refuses("lambda", "get_account_settings", "AccessDeniedException", 403)
    result = check_concurrency(aws.account, DEFAULTS)
    assert result.status is Status.warn
    assert "lambda:GetAccountSettings" in result.found
    assert result.fix is not None
    assert "allow lambda:GetAccountSettings" in result.fix


def test_what_fit_into_suggests_fits_and_only_lowers() -> None:
    mappings = (DISPATCH, FETCH, PARSE, RENDER)
    for scaler_max in (2, 7, 50, 1000):
        for budget in range(60):
            fit = fit_into(mappings, scaler_max, budget)
            if budget < MIN_MAPPING_CONCURRENCY * len(mappings):
                assert fit is None, budget
                continue
            assert fit is not None, budget
            suggested = tuple(
                QueueMapping(m.function, m.context_key, fit.ceilings[m.function], m.scaled)
                for m in mappings
            )
            assert sum(m.ceiling for m in suggested) <= budget, (budget, fit)
            assert scaled_peak(suggested, fit.scaler_max_concurrency) <= budget, (budget, fit)
            for before, after in zip(mappings, suggested, strict=True):
                assert MIN_MAPPING_CONCURRENCY <= after.ceiling <= before.ceiling, (budget, fit)
            assert MIN_MAPPING_CONCURRENCY <= fit.scaler_max_concurrency <= scaler_max


# -- regional services ---------------------------------------------------------------------


def test_a_region_without_scheduler_fails_and_xray_still_answers(aws: Stubbed) -> None:
    def no_endpoint(**_: Any) -> None:
        # What botocore raises when the service's regional name does not resolve.
        raise EndpointConnectionError(endpoint_url=f"https://scheduler.{REGION}.amazonaws.com/")

    aws.unstubbed("scheduler").meta.events.register("before-send.scheduler", no_endpoint)
    aws.answers("xray", "get_sampling_rules", {"SamplingRuleRecords": []})
    scheduler = check_scheduler(aws.account)
    assert scheduler.status is Status.fail
    assert scheduler.found.startswith(f"not available in {REGION}")
    assert scheduler.fix is not None
    assert "region that offers EventBridge Scheduler" in scheduler.fix
    assert check_xray(aws.account).status is Status.ok


def test_a_refused_scheduler_call_is_not_taken_for_an_absent_service(aws: Stubbed) -> None:
    aws.refuses("scheduler", "list_schedule_groups", "AccessDeniedException", 403)
    result = check_scheduler(aws.account)
    assert result.status is Status.warn
    assert "scheduler:ListScheduleGroups" in result.found


# -- CDK bootstrap -------------------------------------------------------------------------


def version(value: str) -> dict[str, Any]:
    return {"Parameter": {"Name": "/cdk-bootstrap/hnb659fds/version", "Value": value}}


def toolkit(status: str) -> dict[str, Any]:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    return {"Stacks": [{"StackName": "CDKToolkit", "StackStatus": status, "CreationTime": created}]}


def test_a_failed_toolkit_stack_fails_with_how_to_start_over(aws: Stubbed) -> None:
    aws.answers("ssm", "get_parameter", version("21"))
    aws.answers("cloudformation", "describe_stacks", toolkit("ROLLBACK_COMPLETE"))
    result = check_bootstrap(aws.account, TARGET, NO_RENDER)
    assert result.status is Status.fail
    assert "CDKToolkit is ROLLBACK_COMPLETE" in result.found
    assert result.fix == (
        "aws cloudformation delete-stack --stack-name CDKToolkit, then "
        "npx cdk bootstrap --no-notices aws://111122223333/eu-west-1"
    )


def test_a_toolkit_stack_of_another_name_is_fine_the_parameter_is_what_counts(
    aws: Stubbed,
) -> None:
    aws.answers("ssm", "get_parameter", version("21"))
    aws.stub("cloudformation").add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message="Stack with id CDKToolkit does not exist",
    )
    result = check_bootstrap(aws.account, TARGET, NO_RENDER)
    assert (result.status, result.fix) == (Status.ok, None)
    assert "no CDKToolkit stack (bootstrapped under another name?)" in result.found


def test_another_qualifier_is_read_and_bootstrapped_with_its_name(aws: Stubbed) -> None:
    settings = StackSettings(**{**NO_RENDER.__dict__, "bootstrap_qualifier": "team7"})
    aws.stub("ssm").add_client_error(
        "get_parameter",
        service_error_code="ParameterNotFound",
        expected_params={"Name": "/cdk-bootstrap/team7/version"},
    )
    result = check_bootstrap(aws.account, TARGET, settings)
    assert result.status is Status.fail
    assert (
        result.fix
        == "npx cdk bootstrap --no-notices --qualifier team7 aws://111122223333/eu-west-1"
    )


def test_an_unreadable_version_parameter_is_a_warning_naming_ssm(aws: Stubbed) -> None:
    aws.refuses("ssm", "get_parameter", "AccessDeniedException", 400)
    result = check_bootstrap(aws.account, TARGET, NO_RENDER)
    assert result.status is Status.warn
    assert "ssm:GetParameter" in result.found


# -- the notifier's secrets ----------------------------------------------------------------


def test_no_channels_is_a_warning_with_the_secret_and_context_to_add(aws: Stubbed) -> None:
    result = check_alert_secrets(aws.account, NO_RENDER)
    assert result.status is Status.warn
    assert result.fix is not None
    assert "aws secretsmanager create-secret --name stepcrawl/dev/alerts/oncall" in result.fix
    assert "-c alert_webhook_secrets='[\"stepcrawl/dev/alerts/oncall\"]'" in result.fix


def test_each_channel_source_is_checked_and_every_fix_given(aws: Stubbed) -> None:
    settings = StackSettings(
        **{**NO_RENDER.__dict__, "alert_secrets": ("team/slack", "ssm:/team/dingtalk", "team/ok")}
    )
    aws.refuses("secretsmanager", "describe_secret", "ResourceNotFoundException")
    aws.answers("ssm", "describe_parameters", {"Parameters": []})
    aws.answers("secretsmanager", "describe_secret", {"Name": "team/ok"})
    result = check_alert_secrets(aws.account, settings)
    assert result.status is Status.fail
    assert result.found == (
        "secret team/slack does not exist; parameter /team/dingtalk does not exist; secret team/ok"
    )
    assert result.fix is not None
    assert "aws secretsmanager create-secret --name team/slack --secret-string '{" in result.fix
    assert "aws ssm put-parameter --name /team/dingtalk --type SecureString" in result.fix


def test_a_secret_the_caller_may_not_describe_is_a_warning(aws: Stubbed) -> None:
    aws.refuses("secretsmanager", "describe_secret", "AccessDeniedException")
    result = check_alert_secrets(aws.account, DEFAULTS)
    assert result.status is Status.warn
    assert "secretsmanager:DescribeSecret" in result.found


# -- credentials: nothing else is asked without them ---------------------------------------


def test_credentials_aws_refuses_fail_once_and_nothing_else_is_asked(aws: Stubbed) -> None:
    aws.refuses("sts", "get_caller_identity", "InvalidClientTokenId", 403)
    report = run_preflight(aws.account, NO_RENDER, None)
    assert [(r.name, r.status) for r in report.results] == [
        ("credentials", Status.fail),
        ("render image", Status.ok),
    ]
    assert report.failed
    assert report.results[0].fix is not None
    assert "--profile" in report.results[0].fix


# -- the render image ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "status", "says"),
    [
        (DockerFacts(cli=None), Status.fail, "no docker on PATH"),
        (DockerFacts(cli="docker", error="Cannot connect"), Status.fail, "Cannot connect"),
        (DockerFacts(cli="docker", server_arch="arm64"), Status.ok, "natively"),
        (DockerFacts(cli="docker", server_arch="amd64"), Status.warn, "cannot tell"),
        (
            DockerFacts(cli="docker", server_arch="amd64", platforms=("linux/amd64",)),
            Status.fail,
            "cannot build linux/arm64",
        ),
        (
            DockerFacts(
                cli="docker", server_arch="amd64", platforms=("linux/amd64", "linux/arm64")
            ),
            Status.ok,
            "under emulation",
        ),
    ],
)
def test_the_render_image_verdict_on_what_docker_said(
    facts: DockerFacts, status: Status, says: str
) -> None:
    result = check_render_image(DEFAULTS, facts)
    assert (result.status, says in result.found) == (status, True), result


def test_nothing_rendering_needs_no_docker() -> None:
    assert check_render_image(NO_RENDER, DockerFacts(cli=None)).status is Status.ok


def fake_docker(tmp_path: Path, version: str, buildx: str) -> str:
    script = tmp_path / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then {version}; fi\n'
        f'if [ "$1" = buildx ]; then {buildx}; fi\n'
    )
    script.chmod(0o755)
    return str(script)


def test_probe_reads_the_daemon_and_its_builders(tmp_path: Path) -> None:
    listed = "printf 'default* docker\\n  default running v0.17 linux/amd64, linux/arm64*\\n'"
    facts = probe_docker(fake_docker(tmp_path, "echo amd64", listed))
    assert (facts.server_arch, facts.platforms) == ("amd64", ("linux/amd64", "linux/arm64"))
    assert check_render_image(DEFAULTS, facts).status is Status.ok


def test_probe_reports_a_daemon_that_does_not_answer(tmp_path: Path) -> None:
    down = "echo 'Cannot connect to the Docker daemon' >&2; exit 1"
    facts = probe_docker(fake_docker(tmp_path, down, "exit 1"))
    assert (facts.server_arch, facts.error) == (None, "Cannot connect to the Docker daemon")


def test_the_function_and_its_image_are_both_arm64_in_the_stack() -> None:
    # The check takes linux/arm64 as the image's platform: infra/render.py must say so too.
    names = {
        node.attr
        for node in ast.walk(ast.parse((ROOT / "infra" / "render.py").read_text()))
        if isinstance(node, ast.Attribute)
    }
    assert {"LINUX_ARM64", "ARM_64"} <= names
    assert not {"LINUX_AMD64", "X86_64"} & names


# -- the stack's settings and the command --------------------------------------------------


def test_the_settings_are_the_cdk_apps_with_the_real_context_keys() -> None:
    from infra.config import DEFAULTS as CONTEXT_DEFAULTS  # noqa: PLC0415

    settings = stack_settings({"fetch_max_concurrency": "3", "alert_webhook_secrets": "a/b"})
    assert {m.context_key for m in settings.mappings} <= set(CONTEXT_DEFAULTS)
    ceilings = {m.function: m.ceiling for m in settings.mappings}
    assert ceilings["fetch"] == 3
    assert ceilings["dispatch"] == CONTEXT_DEFAULTS["dispatch_max_concurrency"]
    assert settings.renders_pages  # pipelines/browser-rendering.yaml
    assert settings.alert_secrets == ("a/b",)


runner = CliRunner()


def test_a_bad_context_value_exits_2_naming_the_key() -> None:
    result = runner.invoke(app, ["preflight", "-c", "fetch_max_concurrency=1", "--region", REGION])
    assert result.exit_code == 2, result.output
    assert "fetch_max_concurrency" in result.output


def test_an_unknown_profile_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    result = runner.invoke(app, ["preflight", "--profile", "nobody", "--format", "json"])
    assert result.exit_code == 2, result.output
    assert "nobody" in result.output
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout or "")  # no report when the input was bad
