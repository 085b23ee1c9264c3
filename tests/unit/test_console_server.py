"""The local console's guards (token, Host, change header) and its live version events."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stepcrawl.console.api import ConsoleApi
from stepcrawl.console.events import EventBus
from stepcrawl.console.local import store_for
from stepcrawl.console.server import COOKIE, TOKEN_HEADER, ConsoleServer
from stepcrawl.console.store import version_of
from stepcrawl.errors import ConfigError

TEXT = "name: shop\ntasks:\n  - id: crawl\n    type: crawl\n    seeds: ['https://a.test/']\n"
TOKEN = "t0ken-for-tests"


def no_deployment() -> object:
    raise ConfigError("no stack here")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ConsoleServer]:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "shop.yaml").write_text(TEXT)
    assets = tmp_path / "static"
    (assets / "assets").mkdir(parents=True)
    (assets / "index.html").write_text(
        '<meta name="stepcrawl-token" content="%STEPCRAWL_TOKEN%"><script src="assets/app.js">'
    )
    (assets / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("outside the assets")
    events = EventBus()
    api = ConsoleApi(store_for([pipelines], events), no_deployment, mode="local", stage="local")
    with ConsoleServer(api, events=events, token=TOKEN, assets=assets, watch_every=0.05) as s:
        yield s


def base(server: ConsoleServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def test_the_printed_url_sets_a_strict_cookie_and_leaves_the_address_bar(
    server: ConsoleServer,
) -> None:
    assert server.url == f"{base(server)}/?token={TOKEN}"
    first = httpx.get(server.url)
    assert first.status_code == 302
    assert first.headers["location"] == "/"
    cookie = first.headers["set-cookie"]
    assert f"{COOKIE}={TOKEN}" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert first.headers["referrer-policy"] == "no-referrer"
    page = httpx.get(f"{base(server)}/", cookies={COOKIE: TOKEN})
    assert page.status_code == 200
    assert f'content="{TOKEN}"' in page.text  # the page sends it back in the change header
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_without_the_token_there_is_no_page_and_no_api(server: ConsoleServer) -> None:
    assert httpx.get(f"{base(server)}/").status_code == 401
    assert httpx.get(f"{base(server)}/?token=wrong").status_code == 403
    assert httpx.get(f"{base(server)}/api/pipelines").status_code == 401
    wrong = httpx.get(f"{base(server)}/api/pipelines", cookies={COOKIE: "wrong"})
    assert wrong.status_code == 401
    for offered in (
        {"cookies": {COOKIE: TOKEN}},
        {"headers": {TOKEN_HEADER: TOKEN}},
        {"params": {"token": TOKEN}},
    ):
        assert httpx.get(f"{base(server)}/api/pipelines", **offered).status_code == 200  # type: ignore[arg-type]
    # The assets are the public part of stepcrawl, as on AWS (the data is behind the API).
    assert httpx.get(f"{base(server)}/assets/app.js").status_code == 200
    assert httpx.get(f"{base(server)}/config.json").json() == {"mode": "local", "api": "/api"}


def test_a_rebinding_host_is_refused(server: ConsoleServer) -> None:
    # evil.example resolving to 127.0.0.1 still sends Host: evil.example.
    for host in (f"evil.example:{server.port}", "127.0.0.1:1", "localhost"):
        refused = httpx.get(
            f"{base(server)}/api/pipelines", headers={"Host": host, TOKEN_HEADER: TOKEN}
        )
        assert refused.status_code == 403, host
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}"):
        allowed = httpx.get(
            f"{base(server)}/api/pipelines", headers={"Host": host, TOKEN_HEADER: TOKEN}
        )
        assert allowed.status_code == 200, host


def test_a_change_needs_the_token_header_not_just_the_cookie(server: ConsoleServer) -> None:
    url = f"{base(server)}/api/pipelines/shop"
    body = {"yaml": TEXT + "# edited\n"}
    match = {"If-Match": f'"{version_of(TEXT)}"'}
    # What a cross-site form could send: the cookie rides along, no custom header.
    forged = httpx.put(url, json=body, headers=match, cookies={COOKIE: TOKEN})
    assert forged.status_code == 403
    saved = httpx.put(url, json=body, headers={**match, TOKEN_HEADER: TOKEN})
    assert saved.status_code == 200
    assert saved.headers["etag"] == '"' + version_of(body["yaml"]) + '"'


def test_assets_cannot_reach_outside_their_folder(server: ConsoleServer) -> None:
    for path in ("/../secret.txt", "/assets/../../secret.txt", "/%2e%2e/secret.txt"):
        assert httpx.get(f"{base(server)}{path}").status_code == 404, path


def test_every_open_page_hears_of_a_new_version_at_once(server: ConsoleServer) -> None:
    heard: list[list[dict[str, object]]] = [[], []]
    ready = threading.Barrier(3)

    def listen(inbox: list[dict[str, object]]) -> None:
        with httpx.stream(
            "GET", f"{base(server)}/api/events", params={"token": TOKEN}, timeout=30
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: hello"):
                    ready.wait()
                if line.startswith("data:") and "subscribed" not in line:
                    inbox.append(json.loads(line.removeprefix("data:")))
                    if len(inbox) == 2:
                        return

    threads = [threading.Thread(target=listen, args=(inbox,), daemon=True) for inbox in heard]
    for thread in threads:
        thread.start()
    ready.wait(timeout=30)  # generous: a loaded machine; it ends when both listen
    saved = httpx.put(
        f"{base(server)}/api/pipelines/shop",
        json={"yaml": TEXT + "# one\n"},
        headers={"If-Match": version_of(TEXT), TOKEN_HEADER: TOKEN},
    )
    assert saved.status_code == 200
    # A change made on disk (an editor, git) is noticed by the watcher and told too.
    pipelines = server.api.store.directory  # type: ignore[attr-defined]
    (pipelines / "shop.yaml").write_text(TEXT + "# two\n")
    for thread in threads:
        thread.join(timeout=30)
    for inbox in heard:
        assert inbox == [
            {"name": "shop", "version": version_of(TEXT + "# one\n"), "source": "console"},
            {"name": "shop", "version": version_of(TEXT + "# two\n"), "source": "file"},
        ]
