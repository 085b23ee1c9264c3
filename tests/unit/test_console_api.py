"""The console API's pipeline routes: validation, versions (409), history, read-only mode.

Run routes need a deployment: tests/integration/test_console_moto.py covers them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from stepcrawl.console.api import ApiRequest, ApiResponse, ConsoleApi, ProbeSettings
from stepcrawl.console.aws import handle
from stepcrawl.console.store import FileStore, ReadOnlyStore, version_of
from stepcrawl.errors import ConfigError

PIPELINE = """\
# keep me
name: shop
tasks:
  - id: crawl
    type: crawl
    seeds: ['https://example.com/']
    extract:
      - name: page
        fields: {title: h1}
  - id: clean
    type: transform
    depends_on: [crawl]
    operations:
      - {op: strip, fields: [title]}
"""


def no_deployment() -> Any:
    raise ConfigError("no stack in these tests")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "shop.yaml").write_text(PIPELINE)
    return tmp_path


@pytest.fixture
def api(folder: Path) -> ConsoleApi:
    return ConsoleApi(FileStore(folder), no_deployment, mode="local", stage="local")


def call(
    api: ConsoleApi,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> ApiResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    return api.handle(ApiRequest(method, path, query or {}, headers or {}, raw))


def test_info_and_schema(api: ConsoleApi) -> None:
    info = call(api, "GET", "/api/info").body
    assert info["mode"] == "local"
    assert info["read_only"] is False
    assert "p99_fetch_ms" in info["metrics"]
    assert info["probe"]["interval_ms"] == 2000
    schema = call(api, "GET", "/api/schema").body
    assert schema["title"] == "stepcrawl pipeline"


def test_list_shows_validity_and_size(api: ConsoleApi, folder: Path) -> None:
    (folder / "bad.yaml").write_text("name: bad\ntasks:\n  - id: x\n    type: nope\n")
    listed = {p["name"]: p for p in call(api, "GET", "/api/pipelines").body["pipelines"]}
    assert listed["shop"]["valid"] is True
    assert listed["shop"]["tasks"] == 2
    assert listed["shop"]["version"] == version_of(PIPELINE)
    assert listed["bad"]["valid"] is False
    assert listed["bad"]["issues"] >= 1
    assert listed["shop"]["deployed"] is False


def test_get_gives_the_text_graph_and_etag(api: ConsoleApi) -> None:
    got = call(api, "GET", "/api/pipelines/shop")
    assert got.status == 200
    assert got.headers["ETag"] == f'"{version_of(PIPELINE)}"'
    assert got.body["yaml"] == PIPELINE
    assert got.body["graph"]["edges"] == [{"source": "crawl", "target": "clean"}]
    assert call(api, "GET", "/api/pipelines/ghost").status == 404


def test_preview_applies_ops_and_validates_without_saving(api: ConsoleApi, folder: Path) -> None:
    ops = [{"op": "add_task", "task": {"id": "load", "type": "load", "target": {"kind": "s3"}}}]
    ops.append({"op": "connect", "source": "clean", "target": "load"})
    previewed = call(api, "POST", "/api/pipelines/shop/preview", {"yaml": PIPELINE, "ops": ops})
    assert previewed.status == 200
    assert previewed.body["valid"] is True
    assert "# keep me" in previewed.body["yaml"]
    assert {"source": "clean", "target": "load"} in previewed.body["graph"]["edges"]
    assert (folder / "shop.yaml").read_text() == PIPELINE  # nothing saved


def test_preview_reports_issues_at_their_field_and_line(api: ConsoleApi) -> None:
    text = PIPELINE.replace("{title: h1}", "{title: {selector: h1, type: money}}")
    previewed = call(api, "POST", "/api/pipelines/shop/preview", {"yaml": text})
    assert previewed.body["valid"] is False
    issue = previewed.body["issues"][0]
    assert issue["line"] == 9
    assert issue["field"].startswith("tasks[0].extract[0].fields.title")


def test_an_op_that_cannot_apply_is_422_and_keeps_the_text(api: ConsoleApi) -> None:
    body = {"yaml": PIPELINE, "ops": [{"op": "connect", "source": "x", "target": "clean"}]}
    refused = call(api, "POST", "/api/pipelines/shop/preview", body)
    assert refused.status == 422
    assert "no task 'x'" in refused.body["error"]
    assert refused.body["yaml"] == PIPELINE


def test_save_needs_if_match_and_a_valid_file(api: ConsoleApi) -> None:
    edited = PIPELINE.replace("# keep me", "# kept")
    assert call(api, "PUT", "/api/pipelines/shop", {"yaml": edited}).status == 428
    version = version_of(PIPELINE)
    invalid = call(
        api,
        "PUT",
        "/api/pipelines/shop",
        {"yaml": edited.replace("type: transform", "type: transfrom")},
        {"if-match": f'"{version}"'},
    )
    assert invalid.status == 422
    assert invalid.body["issues"][0]["line"] == 11
    renamed = call(
        api,
        "PUT",
        "/api/pipelines/shop",
        {"yaml": edited.replace("name: shop", "name: store")},
        {"if-match": f'"{version}"'},
    )
    assert renamed.status == 422
    assert "keep `name: shop`" in renamed.body["issues"][0]["hint"]


def test_a_stale_save_is_409_with_the_current_version_a_diff_and_a_merge(
    api: ConsoleApi, folder: Path
) -> None:
    base = version_of(PIPELINE)
    theirs = PIPELINE.replace("# keep me", "# their header")
    saved = call(api, "PUT", "/api/pipelines/shop", {"yaml": theirs}, {"if-match": f'"{base}"'})
    assert saved.status == 200
    assert saved.body["version"] == version_of(theirs)
    mine = PIPELINE.replace("fields: [title]", "fields: [title, body]")
    stale = call(api, "PUT", "/api/pipelines/shop", {"yaml": mine}, {"if-match": f'"{base}"'})
    assert stale.status == 409
    body = stale.body
    assert body["current_version"] == version_of(theirs)
    assert body["base_version"] == base
    assert body["current_yaml"] == theirs
    assert "-# keep me\n+# their header\n" in body["diff"]
    assert body["merge_conflicts"] is False
    assert body["merged"] == theirs.replace("fields: [title]", "fields: [title, body]")
    assert (folder / "shop.yaml").read_text() == theirs  # the stale save changed nothing
    # Overwrite: the same edit based on the current version.
    current = body["current_version"]
    over = call(api, "PUT", "/api/pipelines/shop", {"yaml": mine}, {"if-match": f'"{current}"'})
    assert over.status == 200
    assert (folder / "shop.yaml").read_text() == mine


def test_history_versions_diff_and_restore(api: ConsoleApi, folder: Path) -> None:
    first = version_of(PIPELINE)
    second_text = PIPELINE.replace("# keep me", "# second")
    second = call(
        api, "PUT", "/api/pipelines/shop", {"yaml": second_text}, {"if-match": f'"{first}"'}
    ).body["version"]
    versions = call(api, "GET", "/api/pipelines/shop/history").body["versions"]
    assert [(v["version"], v["source"]) for v in versions] == [
        (second, "console"),
        (first, "file"),
    ]
    old = call(api, "GET", f"/api/pipelines/shop/versions/{first}").body
    assert old["yaml"] == PIPELINE
    diff = call(api, "GET", "/api/pipelines/shop/diff", query={"from": first}).body["diff"]
    assert "-# keep me\n+# second\n" in diff
    assert call(api, "GET", "/api/pipelines/shop/diff").status == 400
    assert call(api, "GET", "/api/pipelines/shop/versions/000000000000").status == 404
    restored = call(
        api, "POST", "/api/pipelines/shop/restore", {"version": first}, {"if-match": f'"{second}"'}
    )
    assert restored.status == 200
    assert (folder / "shop.yaml").read_text() == PIPELINE
    newest = call(api, "GET", "/api/pipelines/shop/history").body["versions"][0]
    assert newest["source"] == "restore"
    stale = call(
        api, "POST", "/api/pipelines/shop/restore", {"version": second}, {"if-match": f'"{second}"'}
    )
    assert stale.status == 409
    assert stale.body["merged"] is None  # a restore has no edit of its own to merge


def test_create_a_new_pipeline(api: ConsoleApi, folder: Path) -> None:
    text = PIPELINE.replace("name: shop", "name: fresh")
    created = call(api, "POST", "/api/pipelines", {"yaml": text})
    assert created.status == 201
    assert (folder / "fresh.yaml").read_text() == text
    assert call(api, "POST", "/api/pipelines", {"yaml": text}).status == 409
    assert call(api, "POST", "/api/pipelines", {"yaml": "name: [\n"}).status == 422


@pytest.mark.parametrize(
    ("method", "path", "raw", "status"),
    [
        ("DELETE", "/api/pipelines/shop", b"", 405),
        ("GET", "/api/nothing", b"", 404),
        ("PUT", "/api/pipelines/shop", b"{not json", 400),
        ("PUT", "/api/pipelines/shop", b"[1]", 400),
        ("POST", "/api/pipelines/shop/preview", b'{"yaml": 3}', 400),
        ("POST", "/api/pipelines/shop/preview", b'{"yaml": "", "ops": [1]}', 400),
        ("GET", "/api/runs", b"", 400),  # no deployment: a clear error, not a crash
    ],
)
def test_bad_requests_get_a_clear_status(
    api: ConsoleApi, method: str, path: str, raw: bytes, status: int
) -> None:
    answered = api.handle(ApiRequest(method, path, {}, {"if-match": '"x"'}, raw))
    assert answered.status == status
    assert answered.body["error"]


def test_probe_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="at least 250"):
        ProbeSettings(interval_ms=10)
    with pytest.raises(ConfigError, match="unknown topology metric"):
        ProbeSettings(include_metrics=("pages", "vibes"))


def test_the_aws_console_is_read_only(folder: Path) -> None:
    api = ConsoleApi(
        ReadOnlyStore(folder), no_deployment, mode="aws", stage="prod", deployed_dir=folder
    )
    assert call(api, "GET", "/api/info").body["read_only"] is True
    listed = call(api, "GET", "/api/pipelines").body["pipelines"]
    assert listed[0]["deployed_version"] == version_of(PIPELINE)
    version = version_of(PIPELINE)
    refused = call(api, "PUT", "/api/pipelines/shop", {"yaml": PIPELINE}, {"if-match": version})
    assert refused.status == 403
    assert "download" in refused.body["error"]
    assert call(api, "POST", "/api/pipelines", {"yaml": PIPELINE}).status in (403, 409)


def test_the_lambda_adapter_translates_http_api_events(folder: Path) -> None:
    api = ConsoleApi(ReadOnlyStore(folder), no_deployment, mode="aws", stage="prod")
    body = json.dumps({"yaml": PIPELINE, "ops": [{"op": "remove_task", "id": "clean"}]})
    event = {
        "version": "2.0",
        "rawPath": "/api/pipelines/shop/preview",
        "rawQueryString": "",
        "headers": {"Content-Type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/api/pipelines/shop/preview"}},
        "body": base64.b64encode(body.encode()).decode(),
        "isBase64Encoded": True,
    }
    answered = handle(event, api)
    assert answered["statusCode"] == 200
    assert answered["headers"]["cache-control"] == "no-store"
    assert "id: clean" not in json.loads(answered["body"])["yaml"]
    event = {
        "rawPath": "/api/pipelines/shop",
        "rawQueryString": "x=1",
        "requestContext": {"http": {"method": "GET"}},
    }
    got = handle(event, api)
    assert got["statusCode"] == 200
    assert got["headers"]["etag"] == f'"{version_of(PIPELINE)}"'
