"""Each function's unzipped size with its layers, from the synthesized assembly: Lambda's limit.

Lambda refuses a function whose deployment package and layers pass 250 MB unzipped
(262,144,000 bytes: docs/deploy.md, "AWS limits the system touches"), and only at deploy
time. ``make synth`` (the CDK CLI's ``python -m infra.app``) measures what it staged instead:
per function of the template, its code asset plus each layer's asset (a directory, or the
library layer's zip by the sizes its entries unpack to), prints every one, and fails naming
each function over the limit. Container-image functions (render) have no package: skipped.
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from infra.archive import unzipped_size

__all__ = [
    "UNZIPPED_LIMIT",
    "PackageSize",
    "PackageTooLargeError",
    "check",
    "package_sizes",
    "report",
]

#: Lambda's quota "Deployment package (.zip file archive) size: 250 MB (unzipped)", layers
#: included (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
UNZIPPED_LIMIT: Final = 250 * 1024 * 1024
_MB: Final = 1024 * 1024  # Lambda's "MB" in its quotas are MiB (250 MB = 262,144,000 bytes)


class PackageTooLargeError(Exception):
    """A function and its layers pass Lambda's unzipped limit."""


@dataclass(frozen=True)
class PackageSize:
    function: str  # its construct path in the stack (``Workers/Fetch/Function``)
    code: int
    layers: int

    @property
    def total(self) -> int:
        return self.code + self.layers

    def line(self) -> str:
        return (
            f"{self.function}: {self.total / _MB:.1f} MB unzipped "
            f"(code {self.code / _MB:.2f} MB + layers {self.layers / _MB:.1f} MB; "
            f"limit {UNZIPPED_LIMIT / _MB:.0f} MB)"
        )


def _unpacked(path: Path) -> int:
    if path.is_file() and zipfile.is_zipfile(path):
        return unzipped_size(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _asset(assembly: Path, resource: Mapping[str, Any]) -> Path | None:
    where = resource.get("Metadata", {}).get("aws:asset:path")
    return assembly / str(where) if where else None


def package_sizes(assembly: Path, template: Mapping[str, Any]) -> list[PackageSize]:
    """Every zip-packaged function of ``template`` (in ``assembly``), with its layers."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    layer_sizes: dict[str, int] = {}
    for logical, resource in resources.items():
        if resource.get("Type") == "AWS::Lambda::LayerVersion":
            path = _asset(assembly, resource)
            layer_sizes[logical] = _unpacked(path) if path is not None and path.exists() else 0
    sizes = []
    for logical, resource in sorted(resources.items()):
        properties = resource.get("Properties", {})
        if resource.get("Type") != "AWS::Lambda::Function" or properties.get("PackageType"):
            continue  # a container image (render) has no package to measure
        code = _asset(assembly, resource)
        layers = properties.get("Layers", [])
        refs = [layer.get("Ref") for layer in layers if isinstance(layer, dict)]
        construct = str(resource.get("Metadata", {}).get("aws:cdk:path", logical))
        sizes.append(
            PackageSize(
                function=construct.split("/", 1)[-1].removesuffix("/Resource"),
                code=_unpacked(code) if code is not None and code.exists() else 0,
                layers=sum(layer_sizes.get(str(ref), 0) for ref in refs),
            )
        )
    return sizes


def check(sizes: list[PackageSize], limit: int = UNZIPPED_LIMIT) -> None:
    """Raise naming every function over ``limit``."""
    if over := [size for size in sizes if size.total > limit]:
        raise PackageTooLargeError(
            "over Lambda's unzipped limit of the package and its layers: "
            + "; ".join(size.line() for size in over)
            + ". Trim the layer (infra/bundling.py RUNTIME_EXCLUDED, pyproject.toml) or ship "
            "the function as a container image."
        )


def report(assembly: Path, stack_name: str) -> list[PackageSize]:
    """Print each function's size and :func:`check` them (``infra.app`` after a synth)."""
    template = json.loads((assembly / f"{stack_name}.template.json").read_text("utf-8"))
    sizes = package_sizes(assembly, template)
    for size in sizes:
        print(f"package size {size.line()}", file=sys.stderr)  # noqa: T201 - the synth's report
    check(sizes)
    return sizes
