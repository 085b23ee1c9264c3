"""The two Lambda layers: the library with its dependencies, and the pipeline files.

Two layers, because they change at different rates: the library layer (~60 MB) changes with
the code or a dependency, the pipelines layer (a few KB) with every pipeline edit, and a
pipeline edit should not upload the library again.

Both are built by local bundling (:class:`LocalBuild`, no Docker). Context
``aws:cdk:bundling-stacks: []`` skips bundling (the fast tests do); CDK then still computes
the same asset hashes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import bundling
from infra.config import REPO_ROOT

__all__ = ["LIBRARY_DIR", "LOCK", "PIPELINES_MOUNT", "LibraryLayer", "LocalBuild", "PipelinesLayer"]

LIBRARY_DIR: Final = REPO_ROOT / "layers" / "stepcrawl"
PYPROJECT: Final = REPO_ROOT / "pyproject.toml"
#: The one lock of every Python distribution (``make lock``); the layer installs from it.
LOCK: Final = REPO_ROOT / "uv.lock"
LAYER_CACHE: Final = REPO_ROOT / ".build" / "layer"
#: Where the pipelines layer puts the pipeline files in a function (layers unpack in /opt).
PIPELINES_MOUNT: Final = "/opt/pipelines"

# CDK requires an image even when local bundling always succeeds, as ours does. This is the
# image `sam build` uses for the same runtime; it is never pulled.
_UNUSED_IMAGE: Final = "public.ecr.aws/sam/build-python3.12:latest-arm64"


@jsii.implements(ILocalBundling)
class LocalBuild:
    """Local bundling that runs a Python function on the output directory (jsii calls it)."""

    def __init__(self, build: Callable[[Path], None]) -> None:
        self._build = build

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        self._build(Path(output_dir))
        return True


def _bundled_code(source: Path, asset_hash: str, build: Callable[[Path], None]) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(source),
        asset_hash=asset_hash,
        asset_hash_type=AssetHashType.CUSTOM,
        bundling=BundlingOptions(
            image=DockerImage.from_registry(_UNUSED_IMAGE), local=LocalBuild(build)
        ),
    )


class LibraryLayer(Construct):
    """``python/stepcrawl`` plus its runtime dependencies, for Python 3.12 on arm64."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.requirements = bundling.layer_requirements(LOCK)
        self.asset_hash = bundling.library_layer_hash(self.requirements, LIBRARY_DIR)

        def build(output: Path) -> None:
            built = bundling.build_library_layer(
                self.requirements, LIBRARY_DIR, LAYER_CACHE, self.asset_hash
            )
            bundling.copy_layer_zip(built, output)

        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=_bundled_code(LIBRARY_DIR, self.asset_hash, build),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description="stepcrawl library and its runtime dependencies",
            removal_policy=RemovalPolicy.DESTROY,
        )


class PipelinesLayer(Construct):
    """The pipeline files, at :data:`PIPELINES_MOUNT`; the same files the machines come from."""

    def __init__(self, scope: Construct, construct_id: str, *, files: Sequence[Path]) -> None:
        super().__init__(scope, construct_id)
        self.files = list(files)
        self.asset_hash = bundling.pipelines_hash(self.files)
        source = self.files[0].parent if self.files else REPO_ROOT

        def build(output: Path) -> None:
            bundling.copy_pipelines(self.files, output)

        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=_bundled_code(source, self.asset_hash, build),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description="stepcrawl pipeline files (/opt/pipelines)",
            removal_policy=RemovalPolicy.DESTROY,
        )
