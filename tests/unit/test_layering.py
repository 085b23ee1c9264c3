"""The library's layering (docs/architecture.md, "Modules"): packages import downwards only,
and only adapter modules import the AWS SDK or the emulator."""

from __future__ import annotations

import ast
from pathlib import Path

import stepcrawl

LIBRARY = Path(stepcrawl.__file__).parent
FUNCTIONS = LIBRARY.parents[1] / "functions"

#: Modules (paths relative to the library) that may import boto3/botocore: they talk to AWS.
AWS_ADAPTERS = {
    "deployment.py",
    "emulator/server.py",
    "emulator/in_process.py",
    "emulator/moto_patches.py",
    "emulator/moto_fastpath.py",
    "emulator/moto_iam.py",  # Step Functions' integrations: clients signed by the role
    "scaling/aws.py",
    "preflight/aws.py",  # preflight's checks: a session's clients, each call's answer or refusal
    "secret_store.py",  # Powertools Parameters: Secrets Manager and SSM through boto3
}
AWS_ADAPTER_PACKAGES = ("emulator/lambda_runtime/", "storage/aws/")
#: Modules that may import moto: the emulator and its patches.
MOTO_USERS = {
    "emulator/server.py",
    "emulator/in_process.py",
    "emulator/moto_patches.py",
    "emulator/moto_fastpath.py",
    "emulator/moto_sqs.py",
    "emulator/moto_cloudwatch.py",
    "emulator/moto_quotas.py",
    "emulator/moto_iam.py",
    "emulator/moto_iam_requests.py",
    "emulator/moto_sns.py",
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
    # storage/aws/dynamodb.py imports boto3 at the top; runtime.py imports Powertools only
    # inside a function: both count.
    found = modules()
    assert "boto3" in found["storage/aws/dynamodb.py"]
    assert "aws_lambda_powertools" in found["telemetry/emf.py"]


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


#: The library's packages by tier, lowest first: a package imports only packages of lower
#: tiers (and its own modules). Top-level modules count as packages of their own name.
TIERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation: errors and names", frozenset({"stepcrawl", "errors", "names", "lazy_exports"})),
    (
        "the functions' sizes and environment models",
        frozenset({"functions_spec", "environment"}),
    ),
    (
        "contracts: storage protocols, pipeline models",
        frozenset({"storage", "pipeline", "secret_store", "demo"}),
    ),
    (
        "engine parts",
        frozenset({"table_keys", "locks", "fetch", "extract", "etl", "cost", "schema"}),
    ),
    (
        "engine services",
        frozenset({"breaker", "alerts", "compiler", "archive", "telemetry", "quality"}),
    ),
    ("the engine", frozenset({"crawl"})),
    ("a run as a client sees it", frozenset({"run_status"})),
    (
        "beside the engine: scaling, the deployed stack and its preflight, the emulator, "
        "the test harness",
        frozenset({"scaling", "deployment", "preflight", "emulator", "testing"}),
    ),
    ("the functions' runtime, diagnosis", frozenset({"runtime", "diagnose"})),
    ("outputs: reports, the console", frozenset({"reports", "console"})),
    ("local runs", frozenset({"local"})),
    ("the command line", frozenset({"cli"})),
    ("python -m stepcrawl", frozenset({"__main__"})),
)
#: What the emulator must never import: it plays AWS, and knows nothing of the engine.
ENGINE = frozenset({"crawl", "fetch", "extract", "etl", "scaling", "runtime", "deployment"})


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph() -> dict[str, set[str]]:
    """Package -> the library packages its modules import (type-only and lazy imports too)."""
    graph: dict[str, set[str]] = {}
    for path in LIBRARY.rglob("*.py"):
        rel = path.relative_to(LIBRARY)
        package = (
            rel.parts[0].removesuffix(".py")
            if len(rel.parts) > 1 or rel.stem != "__init__"
            else "stepcrawl"
        )
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        graph.setdefault(package, set()).update(
            _package(n) for n in names if n.split(".")[0] == "stepcrawl"
        )
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a package into its own tier or a higher one, said plainly."""
    tier = {package: n for n, (_, members) in enumerate(TIERS) for package in members}
    found = []
    for package, imported in sorted(graph.items()):
        for other in sorted(imported - {package}):
            if package not in tier or other not in tier:
                found.append(f"{package} -> {other}: put the new package in a tier (TIERS)")
            elif tier[other] >= tier[package]:
                found.append(
                    f"{package} ({TIERS[tier[package]][0]}) imports {other} "
                    f"({TIERS[tier[other]][0]}): dependencies point downwards only"
                )
    return found


def test_packages_import_downwards_only() -> None:
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found() -> None:
    graph = import_graph()
    graph["storage"] = graph["storage"] | {"crawl"}  # the storage layer reaching into the engine
    graph["crawl"] = graph["crawl"] | {"scaling"}  # the cycle this layering broke
    found = upward_imports(graph)
    assert any(f.startswith("storage (contracts") and "imports crawl" in f for f in found)
    assert any(f.startswith("crawl (the engine) imports scaling") for f in found)


def test_every_package_has_a_tier() -> None:
    tiered = {package for _, members in TIERS for package in members}
    assert set(import_graph()) <= tiered


def test_the_emulator_knows_nothing_of_the_engine() -> None:
    assert not import_graph()["emulator"] & ENGINE


def test_each_package_says_what_it_is() -> None:
    for init in LIBRARY.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert len((doc or "").split()) >= 8, f"{init.parent.name}: say its one concern"


def test_only_the_environment_models_and_the_emulator_read_the_environment() -> None:
    # stepcrawl.environment reads each function's variables through its model; the emulator
    # plays Lambda, which sets them. Anything else takes its settings as arguments.
    readers = sorted(
        str(path.relative_to(LIBRARY))
        for path in LIBRARY.rglob("*.py")
        if "os.environ" in path.read_text(encoding="utf-8")
    )
    allowed = [r for r in readers if r == "environment.py" or r.startswith("emulator/")]
    assert readers == allowed, "read the variable through a model of stepcrawl.environment"
