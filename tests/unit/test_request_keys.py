"""A crawl task's ``headers``, ``cookies`` and ``proxy`` keys: validation (file:line errors
with hints, a password never echoed), the proxy ring, proxy secrets, and the local cloud's
secrets file (docs/pipelines.md, "Headers, cookies and proxies")."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from stepcrawl.emulator.secrets import read_local_secrets, store_local_secrets
from stepcrawl.errors import ConfigError, InvalidPipelineError, Issue
from stepcrawl.fetch.proxy import ProxyList, parse_proxy_secret, shown_reason
from stepcrawl.fetch.proxy import read_proxy_secret as read_secret
from stepcrawl.fetch.request_options import RequestOptions
from stepcrawl.names import ENV_LOCAL_SECRETS, ENV_PROXY_SECRETS
from stepcrawl.pipeline import CrawlTask, load_pipeline
from stepcrawl.secret_store import reset_secrets

PASSWORD = "hunter2-Xq9"

HEAD = """\
name: req
tasks:
  - id: crawl
    type: crawl
    seeds: [https://shop.example.com/]
"""


def issues(tmp_path: Path, keys: str) -> list[Issue]:
    path = tmp_path / "req.yaml"
    path.write_text(HEAD + keys, encoding="utf-8")
    with pytest.raises(InvalidPipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value) + "".join(i.render(str(path)) for i in caught.value.issues)
    assert PASSWORD not in text
    return caught.value.issues


def only(tmp_path: Path, keys: str) -> Issue:
    found = issues(tmp_path, keys)
    assert len(found) == 1, [i.render() for i in found]
    return found[0]


def task(tmp_path: Path, keys: str) -> CrawlTask:
    path = tmp_path / "req.yaml"
    path.write_text(HEAD + keys, encoding="utf-8")
    found = load_pipeline(path).tasks[0]
    assert isinstance(found, CrawlTask)
    return found


# ------------------------------------------------------------------------------ valid keys


def test_headers_cookies_and_a_proxy_list_with_its_secret(tmp_path: Path) -> None:
    crawl = task(
        tmp_path,
        "    headers: {Accept-Language: de-CH, X-Count: 5}\n"
        '    cookies: {session: abc123, consent: "yes-1"}\n'
        "    proxy:\n"
        "      urls: [http://proxy-a.example.com:3128, HTTP://Proxy-B.example.com:3128/]\n"
        "      secret: stepcrawl/proxies\n",
    )
    assert crawl.headers == {"Accept-Language": "de-CH", "X-Count": "5"}
    assert crawl.cookies == {"session": "abc123", "consent": "yes-1"}
    assert crawl.proxy is not None
    assert crawl.proxy.urls == [
        "http://proxy-a.example.com:3128",
        "http://proxy-b.example.com:3128",
    ]
    assert crawl.proxy.secret == "stepcrawl/proxies"
    options = RequestOptions.of(crawl.headers, crawl.cookies, crawl.proxy)
    assert options.cookie == "session=abc123; consent=yes-1"


@pytest.mark.parametrize(
    ("value", "urls"),
    [
        ("http://proxy.example.com:8080", ["http://proxy.example.com:8080"]),
        (
            "[http://a.example.com:1, http://b.example.com]",
            ["http://a.example.com:1", "http://b.example.com:80"],
        ),
    ],
)
def test_a_proxy_may_be_one_url_or_a_list(tmp_path: Path, value: str, urls: list[str]) -> None:
    crawl = task(tmp_path, f"    proxy: {value}\n")
    assert crawl.proxy is not None
    assert crawl.proxy.urls == urls
    assert crawl.proxy.secret is None


# ------------------------------------------------------------------------------ mistakes


def test_a_password_in_a_proxy_url_is_refused_without_echoing_it(tmp_path: Path) -> None:
    issue = only(tmp_path, f"    proxy: http://bob:{PASSWORD}@proxy.example.com:3128\n")
    assert issue.line == 6
    assert "carries credentials" in issue.message
    assert "http://***@proxy.example.com:3128" in issue.message
    assert issue.hint is not None
    assert "secret" in issue.hint


def test_a_password_in_a_proxy_list_is_refused_without_echoing_it(tmp_path: Path) -> None:
    keys = f"""\
    proxy:
      urls:
        - http://proxy.example.com:3128
        - http://bob:{PASSWORD}@proxy2.example.com:3128
      secret: stepcrawl/proxies
"""
    issue = only(tmp_path, keys)
    assert issue.line == 9
    assert "carries credentials" in issue.message


def test_a_proxy_authorization_header_is_refused_without_echoing_it(tmp_path: Path) -> None:
    issue = only(tmp_path, f"    headers: {{Proxy-Authorization: Basic {PASSWORD}}}\n")
    assert "Proxy-Authorization" in issue.message
    assert issue.hint is not None
    assert "Secrets Manager" in issue.hint


def test_an_invalid_authorization_value_is_not_echoed(tmp_path: Path) -> None:
    issue = only(tmp_path, f'    headers: {{Authorization: "Bearer {PASSWORD}\\n"}}\n')
    assert "***" in issue.message
    assert "not a valid header value" in issue.message


@pytest.mark.parametrize(
    ("keys", "message", "hint"),
    [
        ("    headers: {User-Agent: x}\n", "may not set the User-Agent header", "politeness"),
        ("    headers: {Host: x}\n", "may not set the Host header", "URL"),
        ("    headers: {If-None-Match: x}\n", "If-None-Match", "incremental"),
        ('    headers: {"bad name": x}\n', "is not a header name", "letters"),
        ("    headers: {X-A: 1, x-a: 2}\n", "same header", "keep one"),
        ("    headers: {X-Flag: true}\n", "is not text", "quote"),
        ('    cookies: {"a b": x}\n', "is not a cookie name", "no spaces"),
        ('    cookies: {a: "x;y"}\n', "not a valid cookie value", "percent-encode"),
        (
            "    cookies: {a: x}\n    headers: {Cookie: b=y}\n",
            "both cookies and a Cookie header",
            "keep one",
        ),
        ("    proxy: socks5://proxy.example.com:1080\n", "not an http:// proxy URL", "CONNECT"),
        ("    proxy: http://proxy.example.com:3128/path\n", "only a scheme, a host", "http://"),
        (
            "    proxy: [http://p.example.com:1, http://P.example.com:1/]\n",
            "listed twice",
            "once",
        ),
        (
            "    proxy: {urls: [http://p.example.com:1], secret: 'has space'}\n",
            "not a Secrets Manager secret name",
            "ARN",
        ),
        ("    proxy: {urls: []}\n", "at least 1", None),
        ("    proxy: {urls: [http://p.example.com:1], user: bob}\n", "user", None),
    ],
)
def test_each_mistake_names_the_key_and_a_fix(
    tmp_path: Path, keys: str, message: str, hint: str | None
) -> None:
    issue = only(tmp_path, keys)
    assert issue.line is not None
    assert issue.line >= 3
    assert message in issue.message, issue.render()
    if hint is not None:
        assert hint in (issue.hint or ""), issue.render()


def test_headers_and_cookies_over_the_request_size_are_refused(tmp_path: Path) -> None:
    many = ", ".join(f"X-H{i}: {'v' * 1000}" for i in range(9))
    issue = only(tmp_path, f"    headers: {{{many}}}\n")
    assert "over 8192" in issue.message


# ------------------------------------------------------------------------------ the ring


def test_each_host_always_goes_through_the_same_proxy_and_a_new_one_moves_few() -> None:
    three = ProxyList(tuple(f"http://p{i}.example.com:3128" for i in range(3)))
    hosts = [f"site{i}.example.org" for i in range(600)]
    picked = {h: three.pick(h) for h in hosts}
    assert picked == {h: three.pick(h.upper() + ".") for h in hosts}  # stable, normalized
    counts = {u: list(picked.values()).count(u) for u in three.urls}
    assert all(120 < n < 280 for n in counts.values()), counts  # about a third each
    four = ProxyList((*three.urls, "http://p3.example.com:3128"))
    moved = [h for h in hosts if four.pick(h) != picked[h]]
    assert all(four.pick(h) == "http://p3.example.com:3128" for h in moved)
    assert 60 < len(moved) < 250  # about a quarter of the hosts, all to the new proxy


# ------------------------------------------------------------------------------ secrets


def test_a_proxy_secret_for_every_proxy_or_per_proxy() -> None:
    both = parse_proxy_secret(
        "s",
        json.dumps(
            {
                "username": "all",
                "password": PASSWORD,
                "proxies": {"HTTP://A.example.com:3128/": {"username": "a", "password": "pa"}},
            }
        ),
    )
    first = both.for_proxy("http://a.example.com:3128")
    other = both.for_proxy("http://b.example.com:3128")
    assert first is not None
    assert first.username == "a"
    assert other is not None
    assert other.username == "all"
    assert PASSWORD not in repr(both) + str(other)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'{{"username": "u", "password": "{PASSWORD}"', "is not JSON"),
        (f'["{PASSWORD}"]', "must be a JSON object"),
        (f'{{"user": "u", "pass": "{PASSWORD}"}}', "unknown key(s)"),
        (f'{{"username": "u:x", "password": "{PASSWORD}"}}', "must not contain ':'"),
        ('{"username": "u"}', "password must be a non-empty string"),
        ("{}", "holds no credentials"),
    ],
)
def test_a_bad_proxy_secret_is_named_never_quoted(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="secret 'stepcrawl/p'") as caught:
        parse_proxy_secret("stepcrawl/p", text)
    assert message in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_a_proxy_failure_shows_its_detail_never_userinfo() -> None:
    shown = shown_reason("proxy_auth", "proxy http://u:pw@p:1 refused (407)", "fatal", "fatal")
    assert shown == "proxy_auth: proxy http://***@p:1 refused (407)"
    assert shown_reason("timeout", "after 10 s", "transient", "transient") == "timeout"
    assert shown_reason("http_404", "", "transient", "fatal") == "http_404 (transient)"


def test_the_fetch_function_reads_only_the_secrets_it_was_granted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    reset_secrets()
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        client.create_secret(Name="granted", SecretString="one")
        client.create_secret(Name="other", SecretString=PASSWORD)
        monkeypatch.setenv(ENV_PROXY_SECRETS, "granted")
        assert read_secret("granted") == "one"
        with pytest.raises(PermissionError, match="'other' is not one the stack granted") as no:
            read_secret("other")
        assert PASSWORD not in str(no.value)
    reset_secrets()


# ------------------------------------------------------------------------ the local cloud


def test_the_local_secrets_file_is_stored_in_the_emulator(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"proxy": {"username": "u", "password": PASSWORD}, "token": "t"}))
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="us-east-1")
        client.create_secret(Name="token", SecretString="old")
        stored = store_local_secrets(client, {ENV_LOCAL_SECRETS: str(path)})
        assert stored == ["proxy", "token"]
        value = client.get_secret_value(SecretId="proxy")["SecretString"]
        assert json.loads(value) == {"username": "u", "password": PASSWORD}
        assert client.get_secret_value(SecretId="token")["SecretString"] == "t"
        assert store_local_secrets(client, {}) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'{{"proxy": "{PASSWORD}"', "not JSON (line 1"),
        (f'["{PASSWORD}"]', "expected an object"),
        (f'{{"proxy": 5, "x": "{PASSWORD}"}}', "secret 'proxy' must be a non-empty string"),
    ],
)
def test_a_bad_local_secrets_file_never_shows_a_value(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=ENV_LOCAL_SECRETS) as caught:
        read_local_secrets(path)
    assert message in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_a_valid_credential_header_loads_unchanged_and_is_hidden_in_other_errors(
    tmp_path: Path,
) -> None:
    crawl = task(tmp_path, f"    headers: {{Authorization: Bearer {PASSWORD}}}\n")
    assert crawl.headers == {"Authorization": f"Bearer {PASSWORD}"}
    issue = only(tmp_path, f"    headers: {{Authorization: Bearer {PASSWORD}, Host: x}}\n")
    assert "may not set the Host header" in issue.message


@pytest.mark.parametrize(
    "render",
    ["    render: browser\n", "    follow: [{selector: a, allow: [x], render: browser}]\n"],
)
def test_a_proxy_with_browser_rendering_is_refused(tmp_path: Path, render: str) -> None:
    issue = only(tmp_path, "    proxy: http://p.example.com:3128\n" + render)
    assert "renders pages but has a proxy" in issue.message
