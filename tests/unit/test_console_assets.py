"""The console's built assets are in the package, and built from the sources committed.

`make console` writes ``build.json`` with a hash of the sources it built from (the recipe is in
console/README.md); a source edited without a rebuild no longer matches it. CI also rebuilds
the assets and checks them byte for byte (.ci/run).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from stepcrawl.console.server import static_dir

CONSOLE = Path(__file__).resolve().parents[2] / "console"


def sources_sha256(console: Path) -> str:
    paths = ["package-lock.json", "package.json", "index.html"]
    paths += [p.name for p in console.glob("vite.config.*")]
    paths += [
        p.relative_to(console).as_posix() for p in (console / "src").rglob("*") if p.is_file()
    ]
    digest = hashlib.sha256()
    for relative in sorted(paths):
        digest.update(relative.encode() + b"\n" + (console / relative).read_bytes() + b"\n")
    return digest.hexdigest()


def test_the_package_ships_the_built_console() -> None:
    index = static_dir() / "index.html"
    assert index.exists(), "run `make console` to build the console's assets"
    html = index.read_text()
    assert "%STEPCRAWL_TOKEN%" in html  # the local server puts the session's token there
    assert "http://" not in html
    assert "https://" not in html  # nothing from a CDN: the page works offline
    assert (static_dir() / "assets" / "app.js").stat().st_size > 100_000
    assert (static_dir() / "assets" / "app.css").exists()


def test_the_assets_were_built_from_the_committed_sources() -> None:
    built = json.loads((static_dir() / "build.json").read_text())
    assert built["sources_sha256"] == sources_sha256(CONSOLE), (
        "console/ changed since the assets were built: run `make console` and commit "
        "layers/stepcrawl/console/static"
    )


def test_the_hash_sees_an_edit(tmp_path: Path) -> None:
    copy = tmp_path / "console"
    for name in ("package-lock.json", "package.json", "index.html"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((CONSOLE / name).read_bytes())
    (copy / "src").mkdir()
    (copy / "src" / "main.tsx").write_text("render()\n")
    before = sources_sha256(copy)
    (copy / "src" / "main.tsx").write_text("render();\n")
    assert sources_sha256(copy) != before
