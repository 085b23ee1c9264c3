"""``archive: warc`` under redelivery, through the real stages (MemoryRunner): every fetch and
parse message delivered twice. Each page is fetched twice, each bundle's archive is written
twice, yet every page is in the archives exactly once and each rewrite is the same bytes."""

from __future__ import annotations

import io
from collections import Counter, defaultdict

from tests.helpers.archive_site import PRODUCTS, archive_site
from warcio.archiveiterator import ArchiveIterator

from stepcrawl.pipeline import Pipeline
from stepcrawl.testing import MemoryRunner


def test_redelivered_bundles_rewrite_the_same_archive_and_no_page_twice() -> None:
    def twice(work: object) -> None:
        work()  # type: ignore[operator]
        work()  # type: ignore[operator]

    with archive_site() as site:
        pipeline = Pipeline.model_validate(
            {
                "name": "archive-twice",
                "defaults": {"politeness": {"delay": 0}, "limits": {"max_error_ratio": 0.5}},
                "tasks": [
                    {
                        "id": "shop",
                        "type": "crawl",
                        "seeds": [f"{site.base}/"],
                        "allow_private_network": True,
                        "archive": "warc",
                        "follow": [{"selector": "a[href]"}],
                        "extract": [{"match": "/p/", "fields": {"name": "h1"}}],
                    }
                ],
            }
        )
        runner = MemoryRunner(pipeline, deliver=twice)
        written: defaultdict[str, list[bytes]] = defaultdict(list)
        put = runner.blobs.put

        def recording_put(key: str, body: bytes, **kw: str) -> None:
            if key.startswith("archive/"):
                written[key].append(body)
            put(key, body, **kw)

        runner.blobs.put = recording_put  # type: ignore[method-assign]
        with runner:
            assert runner.run() == ["shop"]
    pages = [f"{site.base}/", *(f"{site.base}{p}" for p in PRODUCTS)]
    assert all(site.requests[p.removeprefix(site.base)] == 2 for p in pages), site.requests
    assert written
    assert all(len(bodies) == 2 and bodies[0] == bodies[1] for bodies in written.values())
    assert sorted(written) == sorted(runner.blobs.list("archive/"))
    archived: Counter[str] = Counter()
    for key in written:
        for record in ArchiveIterator(io.BytesIO(runner.blobs.get(key))):
            if record.rec_type in ("request", "response"):
                archived[
                    f"{record.rec_type} {record.rec_headers.get_header('WARC-Target-URI')}"
                ] += 1
    assert archived == Counter([f"{kind} {p}" for p in pages for kind in ("request", "response")])
