"""Headers, cookies and proxies end to end on the local cloud (docs/pipelines.md, "Headers,
cookies and proxies").

One run of the synthesized stack in the emulator, two crawl tasks:

- ``shop`` crawls the same small shop on three loopback hosts through two real forward
  proxies on 127.0.0.1 that demand Basic credentials. The credentials live only in the
  emulator's Secrets Manager (put there from ``STEPCRAWL_LOCAL_SECRETS`` when the cloud
  starts); the pipeline names the secret. Each host goes through the one proxy the hash ring
  gives it, every request of it, and the task's headers and cookie reach the sites (robots.txt
  included) while the proxy credentials never do.
- ``stale`` names a secret with a wrong password: its pages end failed, class ``fatal``,
  reason ``proxy_auth``, the error naming the secret and the proxy.

Then the password (and its Basic encoding) is looked for everywhere a user can see: the
functions' structured log, the captured Python log records, every file of the run's output
(report, failures, pages, items, HTML report), ``stepcrawl status --json`` and ``stepcrawl
failures`` against the running cloud.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.deadlines import FOLLOWS_TIMEOUT, RUN_TIMEOUT
from tests.helpers.proxy import PRODUCTS, Proxy, forward_proxy, shop_sites

from stepcrawl.fetch.proxy import ProxyList
from stepcrawl.local.cloud import LocalCloud, synthesize
from stepcrawl.local.runner import _invocations, staged_pipelines
from stepcrawl.names import ENV_LOCAL_SECRETS, ENV_PROXY_SECRETS
from stepcrawl.pipeline import Pipeline
from stepcrawl.reports.report import write_run_outputs

pytestmark = pytest.mark.slow

USER = "crawler"
PASSWORD = "Zq7-proxy-PASSWORD-e2e"  # what must never show
WRONG = "Zq7-stale-PASSWORD-e2e"
SECRET = "stepcrawl/test/proxy"
STALE = "stepcrawl/test/stale"
HEADERS = {"X-Api-Key": "key-123", "Accept-Language": "de-CH"}
COOKIE = "session=abc123; theme=dark"


def _hosts(proxies: list[Proxy], count: int = 3) -> list[str]:
    """``count`` loopback hosts among which each proxy gets at least one (the ring depends on
    the proxies' ports, so the hosts are chosen once they are known)."""
    ring = ProxyList(tuple(p.url for p in proxies))
    chosen: list[str] = []
    covered: set[str] = set()
    for last in range(2, 60):
        host = f"127.0.0.{last}"
        proxy = ring.pick(host)
        if proxy not in covered or (len(covered) == len(proxies) and len(chosen) < count):
            chosen.append(host)
            covered.add(proxy)
        if len(covered) == len(proxies) and len(chosen) >= count:
            return chosen
    raise AssertionError("no hosts cover every proxy")


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "stepcrawl", *args]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=FOLLOWS_TIMEOUT, check=False
    )


def test_requests_go_through_the_hosts_proxy_with_the_tasks_headers_and_no_secret_shows(
    tmp_path: Path,
    cloud_env: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    secrets = tmp_path / "secrets.json"
    secrets.write_text(
        json.dumps(
            {
                SECRET: {"username": USER, "password": PASSWORD},
                STALE: {"username": USER, "password": WRONG},
            }
        )
    )
    monkeypatch.setenv(ENV_LOCAL_SECRETS, str(secrets))
    out = tmp_path / "out"
    run = "proxied"
    with forward_proxy(USER, PASSWORD) as first, forward_proxy(USER, PASSWORD) as second:
        proxies = [first, second]
        hosts = _hosts(proxies)
        with shop_sites(hosts) as sites:
            seeds = [f"{base}/" for base in sites.bases.values()]
            task = {
                "type": "crawl",
                "allow_private_network": True,  # the sites and the proxies are on loopback
                "follow": [{"selector": "a[href]"}],
                "extract": [{"match": "/products/", "fields": {"title": {"selector": "h1"}}}],
            }
            pipeline = Pipeline.model_validate(
                {
                    "name": "proxy-local",
                    "defaults": {"politeness": {"delay": 0}},
                    "tasks": [
                        {
                            **task,
                            "id": "shop",
                            "seeds": seeds,
                            "headers": HEADERS,
                            "cookies": {"session": "abc123", "theme": "dark"},
                            "proxy": {"urls": [p.url for p in proxies], "secret": SECRET},
                        },
                        {
                            **task,
                            "id": "stale",
                            "seeds": seeds[:1],
                            "proxy": {"urls": [first.url], "secret": STALE},
                            # its pages fail by design; the run still ends
                            "limits": {"max_error_ratio": 1.0},
                        },
                    ],
                }
            )
            with staged_pipelines([(pipeline, None)]) as directory:
                template = synthesize(directory)
                fetch_env = next(
                    r["Properties"]["Environment"]["Variables"]
                    for r in template["Resources"].values()
                    if r["Type"] == "AWS::Lambda::Function"
                    and ENV_PROXY_SECRETS
                    in r["Properties"].get("Environment", {}).get("Variables", {})
                )
                assert fetch_env[ENV_PROXY_SECRETS] == f"{SECRET},{STALE}"
                with LocalCloud(
                    template, directory, log_path=out / "logs" / "functions.log"
                ).start() as cloud:
                    assert cloud.deployment is not None
                    status = cloud.run(pipeline.name, run, timeout=RUN_TIMEOUT)
                    write_run_outputs(cloud.deployment, status, out, _invocations(cloud))
                    env = {**os.environ, **cloud.environment()}
                    env.pop(ENV_LOCAL_SECRETS, None)
                    shown = _run(env, "status", run, "--stage", "local", "--json")
                    listed = _run(env, "failures", run, "--stage", "local")
                    listed_json = _run(env, "failures", run, "--stage", "local", "--format", "json")
            site_seen = sites.seen

    assert status.status == "SUCCEEDED", status
    # shop: every product of every host, through the proxies
    lines = (out / "items" / "shop.jsonl").read_text("utf-8").splitlines()
    assert sorted(json.loads(line)["title"] for line in lines) == sorted(
        list(PRODUCTS.values()) * len(hosts)
    )
    # each host through the proxy the ring gives it, both proxies used, every request of it
    ring = ProxyList(tuple(p.url for p in proxies))
    for proxy in proxies:
        expected = {
            sites.bases[h].removeprefix("http://") for h in hosts if ring.pick(h) == proxy.url
        }
        assert expected
        assert proxy.hosts() == expected, proxy.url
    forwarded = {(s.host, s.path) for p in proxies for s in p.seen}
    direct = {(s.host, s.path) for s in site_seen}
    assert direct <= forwarded  # nothing reached a site but through a proxy
    assert {path for _, path in direct} >= {"/robots.txt", "/", *PRODUCTS}
    # the task's headers and cookie arrive at the sites; the proxy credentials do not
    for seen in site_seen:
        headers = {k.lower(): v for k, v in seen.headers.items()}
        if headers.get("cookie") is None:  # the stale task's requests never got through
            continue
        assert headers["cookie"] == COOKIE, seen
        assert headers["x-api-key"] == "key-123", seen
        assert headers["accept-language"] == "de-CH", seen
        assert "proxy-authorization" not in headers
    assert all(
        headers_of.get("Proxy-Authorization")
        for p in proxies
        for headers_of in (s.headers for s in p.seen)
    )

    # stale: refused by the proxy (407), its pages failed with a clear class and reason
    counters = status.tasks["stale"].counters
    assert counters["failed"] >= 1
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    stale = [f for f in failures if f["task"] == "stale"]
    assert stale
    assert {f["cls"] for f in stale} == {"fatal"}
    assert all("proxy_auth" in f["reason"] and STALE in f["reason"] for f in stale), stale
    assert not [f for f in failures if f["task"] == "shop"]
    assert first.refused  # the proxy did see the wrong credentials, and said 407

    # the password shows nowhere
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tasks"]["shop"]["counters"]["items"] == 2 * len(hosts)
    assert listed.returncode == 0, listed.stderr
    assert listed_json.returncode == 0, listed_json.stderr
    assert STALE in listed.stdout
    basic = {base64.b64encode(f"{USER}:{p}".encode()).decode() for p in (PASSWORD, WRONG)}
    visible = {
        "status --json": shown.stdout + shown.stderr,
        "failures": listed.stdout + listed.stderr + listed_json.stdout,
        "log records": "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records),
        **{
            str(path.relative_to(out)): path.read_text("utf-8", errors="replace")
            for path in out.rglob("*")
            if path.is_file()
        },
    }
    assert "logs/functions.log" in visible
    assert visible["logs/functions.log"].strip()
    for where, text in visible.items():
        for secret in (PASSWORD, WRONG, *basic):
            assert secret not in text, f"{where} shows a credential"
