"""Only adapter modules import the AWS SDK or the emulator (docs/architecture.md, "Modules")."""

from __future__ import annotations

import ast
from pathlib import Path

import stepcrawl

LIBRARY = Path(stepcrawl.__file__).parent
FUNCTIONS = LIBRARY.parents[1] / "functions"

#: Modules (paths relative to the library) that may import boto3/botocore: they talk to AWS.
AWS_ADAPTERS = {
    "storage/aws.py",
    "deployment.py",
    "local/emulator.py",
    "local/in_process.py",
    "local/report.py",
    "local/moto_patches.py",
    "local/moto_fastpath.py",
    "scaling/aws.py",
    "alerts/secrets.py",  # Powertools Parameters: Secrets Manager and SSM through boto3
}
AWS_ADAPTER_PACKAGES = ("local/lambda_runtime/",)
#: Modules that may import moto: the emulator and its patches.
MOTO_USERS = {
    "local/emulator.py",
    "local/in_process.py",
    "local/moto_patches.py",
    "local/moto_fastpath.py",
    "local/moto_sqs.py",
}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def modules() -> dict[str, set[str]]:
    return {str(path.relative_to(LIBRARY)): imported_roots(path) for path in LIBRARY.rglob("*.py")}


def test_the_finder_sees_imports_inside_functions() -> None:
    # storage/aws.py imports boto3 at the top; runtime.py imports Powertools only inside a
    # function: both count.
    found = modules()
    assert "boto3" in found["storage/aws.py"]
    assert "aws_lambda_powertools" in found["runtime.py"]


def test_only_adapters_import_the_aws_sdk() -> None:
    offenders = sorted(
        name
        for name, roots in modules().items()
        if roots & {"boto3", "botocore"}
        and name not in AWS_ADAPTERS
        and not name.startswith(AWS_ADAPTER_PACKAGES)
    )
    assert offenders == [], "move the AWS calls behind an adapter, or document the new adapter"


def test_only_the_emulator_imports_moto() -> None:
    offenders = sorted(
        name for name, roots in modules().items() if "moto" in roots and name not in MOTO_USERS
    )
    assert offenders == []


def test_handlers_import_neither_the_sdk_nor_http_clients() -> None:
    for handler in FUNCTIONS.glob("*/handler.py"):
        assert not imported_roots(handler) & {"boto3", "botocore", "httpx", "aiohttp"}, handler
