"""The fetch function may read the proxy secrets the deployed pipelines name, and no other
secret; their names reach it in ENV_PROXY_SECRETS (docs/pipelines.md, "Headers, cookies and
proxies")."""

from __future__ import annotations

from pathlib import Path

from tests.infra.test_stack import allowed, role_of

from stepcrawl.names import ENV_PROXY_SECRETS

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:team/proxy-AbCdEf"


def crawl(name: str, proxy: str) -> str:
    return (
        f"name: {name}\ntasks:\n  - id: crawl\n    type: crawl\n"
        f"    seeds: [https://{name}.example.com/]\n    proxy: {proxy}\n"
    )


def test_fetch_reads_exactly_the_proxy_secrets_of_the_deployed_pipelines(
    tmp_path: Path, synthesize
) -> None:
    pipelines = {
        "named": "{urls: [http://p.example.com:3128], secret: stepcrawl/proxies}",
        "by-arn": f"{{urls: [http://q.example.com:3128], secret: '{ARN}'}}",
        "again": "{urls: [http://r.example.com:3128], secret: stepcrawl/proxies}",
        "open": "http://open-proxy.example.com:3128",  # no credentials: nothing to read
    }
    for name, proxy in pipelines.items():
        (tmp_path / f"{name}.yaml").write_text(crawl(name, proxy))
    synth = synthesize(pipelines_dir=str(tmp_path))
    workers = synth.stack.workers
    assert synth.stack.access.proxy_secrets == [ARN, "stepcrawl/proxies"]

    fetch = synth.json["Resources"][synth.logical_id(workers.fetch)]["Properties"]
    assert fetch["Environment"]["Variables"][ENV_PROXY_SECRETS] == f"{ARN},stepcrawl/proxies"
    read = {r for a, r in allowed(synth, role_of(synth, workers.fetch)) if a.startswith("secrets")}
    assert len(read) == 2
    assert ARN in read
    assert any("secret:stepcrawl/proxies-??????" in r for r in read), read
    actions = {a for a, _ in allowed(synth, role_of(synth, workers.fetch)) if "secret" in a}
    assert actions == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}

    for other in (workers.dispatch, workers.parse, workers.sweeper, workers.scaler):
        variables = synth.json["Resources"][synth.logical_id(other)]["Properties"]
        assert ENV_PROXY_SECRETS not in variables["Environment"]["Variables"]
        assert not any(
            a.startswith("secretsmanager:") for a, _ in allowed(synth, role_of(synth, other))
        )


def test_no_proxy_secret_no_grant(tmp_path: Path, synthesize) -> None:
    (tmp_path / "plain.yaml").write_text(crawl("plain", "http://p.example.com:3128"))
    synth = synthesize(pipelines_dir=str(tmp_path))
    fetch = synth.stack.workers.fetch
    props = synth.json["Resources"][synth.logical_id(fetch)]["Properties"]
    assert ENV_PROXY_SECRETS not in props["Environment"]["Variables"]
    assert not any(
        a.startswith("secretsmanager:") for a, _ in allowed(synth, role_of(synth, fetch))
    )
