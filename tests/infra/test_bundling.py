"""Layer building: requirement list from pyproject, hashes, pruning, pipeline copies."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from infra.bundling import (
    RUNTIME_EXCLUDED,
    distribution_name,
    library_layer_hash,
    pipelines_hash,
    runtime_requirements,
)

from infra import bundling

REPO = Path(__file__).resolve().parents[2]


def write_pyproject(path: Path, dependencies: list[str]) -> Path:
    path.write_text(
        "[project]\nname = 'x'\ndependencies = [\n"
        + "".join(f"  {d!r},\n" for d in dependencies)
        + "]\n"
    )
    return path


def make_library(root: Path) -> Path:
    library = root / "stepcrawl"
    (library / "sub").mkdir(parents=True)
    (library / "__init__.py").write_text("")
    (library / "sub" / "mod.py").write_text("X = 1\n")
    return library


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("PyYAML>=6.0", "pyyaml"),
        ("aws-lambda-powertools[tracer]>=3.0", "aws-lambda-powertools"),
        ("httpx_aiohttp>=0.2", "httpx-aiohttp"),
        ("zope.interface ; python_version>'3'", "zope-interface"),
    ],
)
def test_distribution_name(requirement: str, name: str) -> None:
    assert distribution_name(requirement) == name


def test_runtime_requirements_are_the_project_dependencies_minus_exclusions() -> None:
    with (REPO / "pyproject.toml").open("rb") as handle:
        declared = tomllib.load(handle)["project"]["dependencies"]
    got = runtime_requirements(REPO / "pyproject.toml")
    assert got == [d for d in declared if distribution_name(d) not in RUNTIME_EXCLUDED]
    names = {distribution_name(r) for r in got}
    assert not names & {"boto3", "botocore", "typer", "rich", "moto"}
    assert {"pydantic", "selectolax", "aws-lambda-powertools"} <= names


def test_library_hash_changes_with_requirements_and_source(tmp_path: Path) -> None:
    library = make_library(tmp_path)
    base = library_layer_hash(["a>=1"], library)
    assert library_layer_hash(["a>=1"], library) == base
    assert library_layer_hash(["a>=2"], library) != base
    assert library_layer_hash(["a>=1", "b"], library) != base
    (library / "sub" / "mod.py").write_text("X = 2\n")
    changed = library_layer_hash(["a>=1"], library)
    assert changed != base
    # Caches and bytecode are not source.
    (library / "__pycache__").mkdir()
    (library / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (library / "sub" / "mod.pyc").write_bytes(b"junk")
    assert library_layer_hash(["a>=1"], library) == changed
    # A renamed file is a different library even with the same bytes.
    (library / "sub" / "mod.py").rename(library / "sub" / "other.py")
    assert library_layer_hash(["a>=1"], library) != changed


def test_pipelines_hash_covers_names_and_content(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("name: a\n")
    base = pipelines_hash([a])
    a.write_text("name: a\n# edited\n")
    assert pipelines_hash([a]) != base
    b = tmp_path / "b.yaml"
    b.write_text("name: a\n# edited\n")
    assert pipelines_hash([b]) != pipelines_hash([a])


def test_prune_removes_a_distribution_by_its_record(tmp_path: Path) -> None:
    site = tmp_path / "layer" / "python"
    keep = tmp_path / "keep.txt"  # what "../../keep.txt" in a RECORD would point at
    keep.write_text("")
    for name, files in {
        "botocore": ["botocore/__init__.py", "botocore/data/x.json"],
        "wrapt": ["wrapt/__init__.py"],
    }.items():
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        for file in files:
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            (site / file).write_text("")
        records = [*files, f"{name}-1.0.dist-info/RECORD", "../../keep.txt"]
        (info / "RECORD").write_text("".join(f"{r},,\n" for r in records))
    removed = bundling._prune(site, {"botocore"})
    assert removed == ["botocore"]
    assert not (site / "botocore").exists()
    assert not (site / "botocore-1.0.dist-info").exists()
    assert (site / "wrapt" / "__init__.py").exists()
    assert keep.exists()  # nothing outside the site is ever deleted


def test_build_uses_the_cache_and_copies_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_pip(requirements: list[str], target: Path) -> None:
        calls.append(list(requirements))
        (target / "dep").mkdir(parents=True)
        (target / "dep" / "__init__.py").write_text("")
        (target / "bin").mkdir()
        (target / "bin" / "tool").write_text("")

    monkeypatch.setattr(bundling, "_pip_install", fake_pip)
    library = make_library(tmp_path / "src")
    (library / "__pycache__").mkdir()
    (library / "__pycache__" / "x.pyc").write_bytes(b"")
    cache = tmp_path / "cache"
    stale = cache / "0ld"
    stale.mkdir(parents=True)
    built = bundling.build_library_layer(["dep"], library, cache, "h1")
    assert built == cache / "h1"
    assert (built / "python" / "dep" / "__init__.py").exists()
    assert (built / "python" / "stepcrawl" / "sub" / "mod.py").read_text() == "X = 1\n"
    assert not (built / "python" / "stepcrawl" / "__pycache__").exists()
    assert not (built / "python" / "bin").exists()
    assert not stale.exists()  # older builds are removed
    assert bundling.build_library_layer(["dep"], library, cache, "h1") == built
    assert calls == [["dep"]]  # the second call came from the cache
    out = tmp_path / "out"
    bundling.copy_tree(built, out)
    assert (out / "python" / "stepcrawl" / "__init__.py").exists()


def test_copy_pipelines_follows_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("name: demo-shop\n")
    link = tmp_path / "demo-shop.yaml"
    link.symlink_to(real)
    out = tmp_path / "out"
    bundling.copy_pipelines([link], out)
    copied = out / "pipelines" / "demo-shop.yaml"
    assert copied.is_file()
    assert not copied.is_symlink()
    assert copied.read_text() == "name: demo-shop\n"
