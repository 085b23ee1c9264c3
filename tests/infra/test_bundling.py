"""Layer building: requirement list, hashes, what the layer must not hold, bytecode, the
reproducible zip, pipeline copies."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from infra.archive import LAYER_ZIP
from infra.bundling import (
    RUNTIME_EXCLUDED,
    distribution_name,
    library_layer_hash,
    pipelines_hash,
    runtime_requirements,
)
from infra.bytecode import LAMBDA_PYTHON_ENV, BytecodeError, lambda_python

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


def fake_distribution(site: Path, name: str, version: str = "1.0") -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("name", ["urllib3", "botocore", "jmespath", "python_dateutil", "typer"])
def test_a_layer_holding_what_the_runtime_ships_or_the_cli_needs_is_refused(
    tmp_path: Path, name: str
) -> None:
    site = tmp_path / "python"
    fake_distribution(site, "wrapt")
    bundling.check_not_shadowing(site)  # nothing of the runtime's: fine
    fake_distribution(site, name)
    with pytest.raises(bundling.LayerBuildError) as refused:
        bundling.check_not_shadowing(site)
    canonical = distribution_name(name)
    assert f"must not hold {canonical} ({canonical}: {RUNTIME_EXCLUDED[canonical]})" in str(
        refused.value
    )


def test_the_runtime_ships_boto3_with_its_whole_closure_and_the_layer_excludes_it() -> None:
    # botocore's and s3transfer's own dependencies (the runtime's /var/runtime holds them).
    for name in (
        "boto3",
        "botocore",
        "s3transfer",
        "jmespath",
        "python-dateutil",
        "six",
        "urllib3",
    ):
        assert "Lambda runtime" in RUNTIME_EXCLUDED[name]


def test_build_uses_the_cache_and_copies_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_pip(
        requirements: list[str], target: Path, options: object = (), platform: str = ""
    ) -> None:
        calls.append(list(requirements))
        (target / "dep").mkdir(parents=True)
        (target / "dep" / "__init__.py").write_text("")
        (target / "bin").mkdir()
        (target / "bin" / "tool").write_text("")

    monkeypatch.setattr(bundling, "pip_install", fake_pip)
    library = make_library(tmp_path / "src")
    (library / "__pycache__").mkdir()
    (library / "__pycache__" / "x.pyc").write_bytes(b"")
    cache = tmp_path / "cache"
    stale = cache / "0ld"
    stale.mkdir(parents=True)
    python = sys.executable  # compiles for this interpreter: enough to see the steps run
    built = bundling.build_library_layer(["dep"], library, cache, "h1", python=python)
    assert built == cache / "h1"
    assert (built / "python" / "dep" / "__init__.py").exists()
    assert (built / "python" / "stepcrawl" / "sub" / "mod.py").read_text() == "X = 1\n"
    assert not (built / "python" / "stepcrawl" / "__pycache__" / "x.pyc").exists()
    assert list((built / "python" / "stepcrawl" / "sub" / "__pycache__").glob("mod.*.pyc"))
    assert not (built / "python" / "bin").exists()
    assert not stale.exists()  # older builds are removed
    assert bundling.build_library_layer(["dep"], library, cache, "h1", python=python) == built
    assert calls == [["dep"]]  # the second call came from the cache
    out = tmp_path / "out"
    out.mkdir()
    bundling.copy_layer_zip(built, out)
    with zipfile.ZipFile(out / LAYER_ZIP) as archive:
        assert "python/stepcrawl/__init__.py" in archive.namelist()


def _wheel(folder: Path, name: str = "dep", version: str = "1.0") -> tuple[Path, str]:
    """A real (tiny) wheel, and its pinned requirement with the hash pip checks."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(member, text)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return path, f"{name}=={version} --hash=sha256:{digest}"


def test_two_builds_of_one_commit_give_byte_identical_layer_zips(tmp_path: Path) -> None:
    """Real pip (from a local folder, offline), real 3.12 bytecode, two caches apart."""
    try:
        python = lambda_python()
    except BytecodeError as missing:
        pytest.skip(str(missing))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _, requirement = _wheel(wheels)
    library = make_library(tmp_path / "src")
    options = ["--no-index", "--find-links", str(wheels)]
    zips = []
    for n in (1, 2):
        built = bundling.build_library_layer(
            [requirement], library, tmp_path / f"cache{n}", "h", pip_options=options, python=python
        )
        zips.append((built / LAYER_ZIP).read_bytes())
        time.sleep(1.1)  # a second apart: no timestamp may reach the bytes
    assert zips[0] == zips[1]
    with zipfile.ZipFile(tmp_path / "cache1" / "h" / LAYER_ZIP) as archive:
        names = archive.namelist()
        assert names == sorted(names)
        assert {"python/dep/__init__.py", "python/stepcrawl/sub/mod.py"} <= set(names)
        assert "python/stepcrawl/sub/__pycache__/mod.cpython-312.pyc" in names
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        pyc = archive.read("python/stepcrawl/sub/__pycache__/mod.cpython-312.pyc")
    # unchecked-hash bytecode (PEP 552: flags 0b01): no mtime in the file, none checked
    assert int.from_bytes(pyc[4:8], "little") == 0b01


def test_a_wrong_hash_fails_the_build(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _, requirement = _wheel(wheels)
    tampered = requirement[:-4] + "0000"
    with pytest.raises(subprocess.CalledProcessError):
        bundling.build_library_layer(
            [tampered],
            make_library(tmp_path / "src"),
            tmp_path / "cache",
            "h",
            pip_options=["--no-index", "--find-links", str(wheels)],
            python=sys.executable,
        )


def test_no_python_312_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAMBDA_PYTHON_ENV, "/nowhere/python3.12")
    with pytest.raises(BytecodeError) as missing:
        lambda_python()
    assert "no Python 3.12 interpreter found" in str(missing.value)
    assert "uv python install 3.12" in str(missing.value)
    assert "/nowhere/python3.12" in str(missing.value)


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
