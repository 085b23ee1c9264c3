"""``archive: warc`` end to end on the local cloud, then ``stepcrawl replay`` over the archives.

A crawl of a small shop on 127.0.0.1 with every message delivered twice (so parse bundles
are redelivered and fetches repeated) writes one WARC file per parse bundle, exported by
``stepcrawl run`` to ``OUT/archive/<task>/``. warcio reads them back: one request and one
response per page fetched, each exactly once, with the status, headers and body the site
sent. With the site stopped, ``stepcrawl replay`` over them gives the crawl's items (minus
the fetch time), and with changed extract rules the new items, without a single request.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.helpers.archive_site import GZIPPED, PRODUCTS, archive_site
from tests.helpers.deadlines import RUN_TIMEOUT
from tests.helpers.demo import write_pipeline
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator

from stepcrawl.cli import app
from stepcrawl.emulator.lambda_runtime.chaos import Chaos
from stepcrawl.local.runner import run_local
from stepcrawl.pipeline import Pipeline

pytestmark = pytest.mark.slow

RULES = [
    {"match": "/p/", "fields": {"name": {"selector": "h1", "required": True}, "price": ".price"}}
]
NEW_RULES = [
    {
        "match": "/p/",
        "fields": {
            "title": "title",
            "sku": ".sku",
            "price": {"selector": ".price", "type": "float"},
        },
    }
]


def shop(base: str, extract: list[dict[str, Any]]) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "archive-local",
            # the one missing page (404) must not fail the task
            "defaults": {"politeness": {"delay": 0}, "limits": {"max_error_ratio": 0.5}},
            "tasks": [
                {
                    "id": "shop",
                    "type": "crawl",
                    "seeds": [f"{base}/"],
                    "allow_private_network": True,
                    "archive": "warc",
                    "follow": [{"selector": "a[href]"}],
                    "extract": extract,
                }
            ],
        }
    )


def read_records(files: list[Path]) -> list[Any]:
    """(type, WARC headers, HTTP head, body) of every record, digests checked."""
    out = []
    for path in files:
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream, check_digests="raise"):
                body = record.content_stream().read()
                out.append((record.rec_type, record.rec_headers, record.http_headers, body))
    return out


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def without_fetch_time(items: list[dict[str, Any]]) -> list[str]:
    return sorted(
        json.dumps({k: v for k, v in i.items() if k != "_fetched_at"}, sort_keys=True)
        for i in items
    )


def test_a_crawl_archives_its_pages_and_replay_reextracts_them_offline(
    tmp_path: Path, cloud_env: None
) -> None:
    out = tmp_path / "run"
    with archive_site() as site:
        base = site.base
        run = run_local(
            shop(base, RULES),
            out,
            "archived",
            console=Console(file=io.StringIO()),
            chaos=Chaos(duplicate_rate=1.0, seed=3),
            # The run must end by itself, duplicates and all (TimeoutError otherwise); how
            # fast is the machine's, not the archive's: the bound is for a loaded box.
            timeout=RUN_TIMEOUT,
        )
        served = Counter(site.requests)
    assert run.status.status == "SUCCEEDED", run.report
    assert run.report["faults"]["duplicates"] > 0
    items = jsonl(out / "items" / "shop.jsonl")
    assert sorted(i["name"] for i in items) == sorted(n for n, _, _ in PRODUCTS.values())

    files = sorted((out / "archive" / "shop").glob("*.warc.gz"))
    assert files, "stepcrawl run exports the task's archives"
    records = read_records(files)
    responses = [(w, h, b) for kind, w, h, b in records if kind == "response"]
    requests = [(w, h) for kind, w, h, _ in records if kind == "request"]
    pages = [f"{base}/", *(f"{base}{p}" for p in PRODUCTS)]
    # Each page fetched is archived exactly once, however often it was fetched or its
    # bundle delivered; the 404 is not a page.
    assert sorted(w.get_header("WARC-Target-URI") for w, _, _ in responses) == sorted(pages)
    assert sorted(w.get_header("WARC-Target-URI") for w, _ in requests) == sorted(pages)
    assert sum(kind == "warcinfo" for kind, *_ in records) == len(files)
    by_id = {w.get_header("WARC-Record-ID"): w for w, _, _ in responses}
    for warc, head in requests:
        response = by_id[warc.get_header("WARC-Concurrent-To")]
        assert response.get_header("WARC-Target-URI") == warc.get_header("WARC-Target-URI")
        assert head.protocol == "GET"
        assert head.get_header("Host") == base.removeprefix("http://")
    for warc, head, body in responses:
        url = warc.get_header("WARC-Target-URI")
        assert warc.get_header("WARC-Date").endswith("Z")
        assert warc.get_header("WARC-Payload-Digest").startswith("sha1:")
        assert head.get_statuscode() == "200"
        assert head.get_header("X-Shop") == "archive-test"
        assert head.get_header("Content-Type") == "text/html; charset=utf-8"
        path = url.removeprefix(base)
        if path in PRODUCTS:
            name, price, sku = PRODUCTS[path]
            assert f"<h1>{name}</h1>".encode() in body
            assert f">{price}</span><span class='sku'>{sku}<".encode() in body
        if path == GZIPPED:  # stored decoded, the wire's coding kept aside
            assert head.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
            assert head.get_header("Content-Length") == str(len(body))

    # The site is gone: whatever replay does, it cannot fetch.
    pipeline_file = write_pipeline(shop(base, RULES), tmp_path / "archive-local.yaml")
    cli = CliRunner()
    replayed_dir = tmp_path / "replay"
    result = cli.invoke(
        app,
        ["replay", "-p", str(pipeline_file), "-t", "shop", "-o", str(replayed_dir),
         str(out / "archive" / "shop")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "3 items from 4 pages" in result.output
    replayed = jsonl(replayed_dir / "items" / "shop.jsonl")
    assert without_fetch_time(replayed) == without_fetch_time(items)
    summary = json.loads((replayed_dir / "replay.json").read_text())
    assert (summary["pages"], summary["items"], summary["archives"]) == (4, 3, len(files))

    # New rules over the same archives: new items, still nothing fetched.
    changed_file = write_pipeline(shop(base, NEW_RULES), tmp_path / "changed.yaml")
    result = cli.invoke(
        app,
        ["replay", "-p", str(changed_file), "-t", "shop", "-o", str(tmp_path / "new"),
         *map(str, files)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    new = jsonl(tmp_path / "new" / "items" / "shop.jsonl")
    assert sorted((i["title"], i["sku"], i["price"]) for i in new) == sorted(
        (n, s, float(p)) for n, p, s in PRODUCTS.values()
    )
    assert {i["_url"] for i in new} == {f"{base}{p}" for p in PRODUCTS}
    assert site.requests == served, "replay sent no request"
