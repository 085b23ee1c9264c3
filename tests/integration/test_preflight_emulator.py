"""``stepcrawl preflight`` against the embedded emulator (moto's server, as local mode runs it).

A bootstrapped account is played by deploying what ``cdk bootstrap`` leaves that preflight
reads (the version parameter, the ``CDKToolkit`` stack, the image repository) as a stack
named CDKToolkit; an account that is not, by an emulator with an unrelated stack. moto
answers Scheduler, SSM, CloudFormation, ECR, Secrets Manager and STS; Lambda's
GetAccountSettings and X-Ray's GetSamplingRules it does not implement (404), which preflight
reports as a warn: those answers are tests/unit/test_preflight.py's, with botocore's Stubber.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepcrawl.cli import app
from stepcrawl.emulator.server import ACCOUNT, REGION, Emulator
from stepcrawl.preflight import (
    AwsAccount,
    DockerFacts,
    QueueMapping,
    StackSettings,
    Status,
    run_preflight,
)

pytestmark = pytest.mark.moto

ROOT = Path(__file__).resolve().parents[2]
SECRET = "stepcrawl/dev/alerts/oncall"
PARAMETER = "/cdk-bootstrap/hnb659fds/version"
REPOSITORY = f"cdk-hnb659fds-container-assets-{ACCOUNT}-{REGION}"
#: What preflight reads of a bootstrap (CDKToolkit creates these among its roles and bucket).
BOOTSTRAP = {
    "Resources": {
        "CdkBootstrapVersion": {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": PARAMETER, "Type": "String", "Value": "21"},
        },
        "ContainerAssetsRepository": {
            "Type": "AWS::ECR::Repository",
            "Properties": {"RepositoryName": REPOSITORY},
        },
    }
}
UNRELATED = {"Resources": {"Work": {"Type": "AWS::SQS::Queue"}}}
SETTINGS = StackSettings(
    stage="dev",
    mappings=(
        QueueMapping("dispatch", "dispatch_max_concurrency", 5),
        QueueMapping("fetch", "fetch_max_concurrency", 10, scaled=True),
        QueueMapping("parse", "parse_max_concurrency", 5, scaled=True),
        QueueMapping("render", "render_max_concurrency", 2),
    ),
    scaler_max_concurrency=1000,
    other_functions=("sweeper", "scaler", "notify"),
    alert_secrets=(SECRET,),
    renders_pages=True,
)
ARM64_DOCKER = DockerFacts(cli="/usr/bin/docker", server_arch="arm64", platforms=("linux/arm64",))


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The emulator's credentials from the environment, and no profile of the machine's."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


def _signed_in(monkeypatch: pytest.MonkeyPatch, emulator: Emulator) -> Emulator:
    """The environment holds the emulator's administrator key (IAM is enforced)."""
    assert emulator.admin is not None
    for name, value in emulator.admin.environment().items():
        monkeypatch.setenv(name, value)
    return emulator


@pytest.fixture
def bootstrapped(credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(BOOTSTRAP, stack_name="CDKToolkit") as emulator:
        yield _signed_in(monkeypatch, emulator)


@pytest.fixture
def bare(credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(UNRELATED) as emulator:
        yield _signed_in(monkeypatch, emulator)


def account_of(emulator: Emulator) -> AwsAccount:
    return AwsAccount.from_session(profile=None, region=REGION, endpoint_url=emulator.endpoint)


def by_name(
    emulator: Emulator, settings: StackSettings = SETTINGS
) -> dict[str, tuple[Status, str, str | None]]:
    report = run_preflight(account_of(emulator), settings, ARM64_DOCKER)
    return {r.name: (r.status, r.found, r.fix) for r in report.results}


def test_an_account_without_bootstrap_fails_and_is_told_the_command(bare: Emulator) -> None:
    found = by_name(bare)
    assert found["credentials"] == (Status.ok, f"account {ACCOUNT} in {REGION}", None)
    status, text, fix = found["cdk bootstrap"]
    assert status is Status.fail
    assert PARAMETER in text
    assert fix == f"npx cdk bootstrap --no-notices aws://{ACCOUNT}/{REGION}"


def test_a_bootstrapped_account_passes_with_its_version_stack_and_repository(
    bootstrapped: Emulator,
) -> None:
    status, text, fix = by_name(bootstrapped)["cdk bootstrap"]
    assert (status, fix) == (Status.ok, None)
    assert "version 21" in text
    assert "CDKToolkit CREATE_COMPLETE" in text
    assert REPOSITORY in text


def test_an_old_bootstrap_or_a_missing_repository_fails(bootstrapped: Emulator) -> None:
    bootstrapped.client("ecr").delete_repository(repositoryName=REPOSITORY)
    status, text, _ = by_name(bootstrapped)["cdk bootstrap"]
    assert status is Status.fail
    assert f"no image repository {REPOSITORY}" in text
    bootstrapped.client("ssm").put_parameter(
        Name=PARAMETER, Value="5", Type="String", Overwrite=True
    )
    status, text, fix = by_name(bootstrapped)["cdk bootstrap"]
    assert status is Status.fail
    assert "bootstrap version 5" in text
    assert fix is not None
    assert fix.startswith("npx cdk bootstrap")


def test_scheduler_answers_and_the_calls_moto_lacks_are_warnings(bootstrapped: Emulator) -> None:
    found = by_name(bootstrapped)
    assert found["eventbridge scheduler"] == (Status.ok, f"available in {REGION}", None)
    for check, permission in (
        ("lambda concurrency", "lambda:GetAccountSettings"),
        ("x-ray", "xray:GetSamplingRules"),
    ):
        status, text, _ = found[check]
        assert status is Status.warn
        assert f"does not implement {permission}" in text


def test_a_missing_channel_secret_fails_until_it_is_created(bootstrapped: Emulator) -> None:
    status, text, fix = by_name(bootstrapped)["alert channel secrets"]
    assert (status, text) == (Status.fail, f"secret {SECRET} does not exist")
    assert fix is not None
    assert fix.startswith(f"aws secretsmanager create-secret --name {SECRET} --secret-string '{{")
    bootstrapped.client("secretsmanager").create_secret(
        Name=SECRET, SecretString='{"type": "slack", "url": "https://hooks.slack.com/services/x"}'
    )
    assert by_name(bootstrapped)["alert channel secrets"] == (Status.ok, f"secret {SECRET}", None)
    bootstrapped.client("secretsmanager").delete_secret(SecretId=SECRET, RecoveryWindowInDays=7)
    status, text, fix = by_name(bootstrapped)["alert channel secrets"]
    assert (status, fix) == (Status.fail, f"aws secretsmanager restore-secret --secret-id {SECRET}")
    assert "scheduled for deletion" in text


# -- the command, as a person runs it: exit 1 on a failed check, 0 otherwise --------------


@pytest.fixture
def plain_pipelines(tmp_path: Path) -> Path:
    """A pipelines directory that renders nothing: the command then asks no local Docker."""
    directory = tmp_path / "pipelines"
    directory.mkdir()
    shutil.copyfile(ROOT / "pipelines" / "books.yaml", directory / "books.yaml")
    return directory


def preflight(emulator: Emulator, pipelines: Path, *extra: str) -> tuple[int, str, str]:
    """The command's exit code, what it printed, and its stdout alone (JSON when asked)."""
    result = CliRunner().invoke(
        app,
        [
            "preflight",
            "--region",
            REGION,
            "--endpoint-url",
            emulator.endpoint,
            "-c",
            f"pipelines_dir={pipelines}",
            "-c",
            f"alert_webhook_secrets={SECRET}",
            *extra,
        ],
    )
    return result.exit_code, result.output, result.stdout


def test_the_command_exits_1_on_an_account_without_bootstrap(
    bare: Emulator, plain_pipelines: Path
) -> None:
    code, output, stdout = preflight(bare, plain_pipelines, "--format", "json")
    assert code == 1, output
    report = json.loads(stdout)
    assert (report["account"], report["region"], report["failed"]) == (ACCOUNT, REGION, True)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["cdk bootstrap"]["status"] == "fail"
    assert (
        checks["cdk bootstrap"]["fix"] == f"npx cdk bootstrap --no-notices aws://{ACCOUNT}/{REGION}"
    )
    assert checks["render image"]["status"] == "ok"  # books does not render: Docker not asked


def test_the_command_exits_0_when_nothing_fails_and_prints_a_table(
    bootstrapped: Emulator, plain_pipelines: Path
) -> None:
    bootstrapped.client("secretsmanager").create_secret(Name=SECRET, SecretString="{}")
    code, output, _ = preflight(bootstrapped, plain_pipelines)
    assert code == 0, output
    assert f"stepcrawl preflight (account {ACCOUNT}, {REGION})" in output
    for check in ("cdk bootstrap", "lambda concurrency", "eventbridge scheduler", "x-ray"):
        assert f"│ {check} " in output
    assert output.rstrip().endswith("5 ok, 2 warn, 0 fail")
