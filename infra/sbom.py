"""``make sbom``: a CycloneDX SBOM of the Lambda layer's exact dependency set.

The set is what the library layer really holds: the distributions pip installed into it for
the Lambda platform from ``uv.lock`` (:mod:`infra.bundling`; built or reused from
``.build/layer``), each pinned to the version of its ``.dist-info``. The CycloneDX tool
(``cyclonedx-py``, the cyclonedx-bom distribution) turns that pinned list into the SBOM,
with stepcrawl itself (from ``pyproject.toml``) as the root component. ``make audit`` runs
pip-audit on the same list where the network allows (docs/operations.md).

    python -m infra.sbom [--out cdk.out/sbom.cdx.json] [--requirements-out FILE]
"""

from __future__ import annotations

import argparse
import email.parser
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from infra import bundling
from infra.config import REPO_ROOT
from infra.layers import LAYER_CACHE, LOCK

__all__ = ["SBOM_PATH", "layer_site", "main", "pinned", "write_sbom"]

#: Next to the synthesized template.
SBOM_PATH: Final = REPO_ROOT / "cdk.out" / "sbom.cdx.json"


def layer_site() -> Path:
    """The library layer's ``python/`` directory, built if it is not cached yet."""
    requirements = bundling.layer_requirements(LOCK)
    library = REPO_ROOT / "layers" / "stepcrawl"
    layer_hash = bundling.library_layer_hash(requirements, library)
    return bundling.build_library_layer(requirements, library, LAYER_CACHE, layer_hash) / "python"


def pinned(site: Path) -> list[str]:
    """``name==version`` of every distribution installed in ``site``, sorted by name."""
    pins = []
    for info in sorted(site.glob("*.dist-info")):
        metadata = email.parser.Parser().parsestr((info / "METADATA").read_text("utf-8"))
        pins.append(f"{metadata['Name']}=={metadata['Version']}")
    return sorted(pins, key=str.lower)


def write_sbom(pins: Sequence[str], out: Path, *, pyproject: Path) -> None:
    """Write the CycloneDX (JSON, spec 1.6) SBOM of ``pins`` to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("".join(f"{pin}\n" for pin in pins))
        requirements = Path(handle.name)
    try:
        subprocess.run(  # noqa: S603 - our own interpreter running the CycloneDX module
            [
                sys.executable,
                "-m",
                "cyclonedx_py",
                "requirements",
                str(requirements),
                "--pyproject",
                str(pyproject),
                "--mc-type",
                "library",
                "--of",
                "JSON",
                "--output-reproducible",
                "-o",
                str(out),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        requirements.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SBOM_PATH)
    parser.add_argument(
        "--requirements-out", type=Path, help="also write the pinned list (for pip-audit)"
    )
    args = parser.parse_args(argv)
    pins = pinned(layer_site())
    if args.requirements_out is not None:
        args.requirements_out.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has none
        args.requirements_out.write_text("".join(f"{pin}\n" for pin in pins), "utf-8")
    write_sbom(pins, args.out, pyproject=REPO_ROOT / "pyproject.toml")
    sys.stdout.write(f"{args.out}: {len(pins)} components of the library layer\n")


if __name__ == "__main__":
    main()
