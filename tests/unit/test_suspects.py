"""diagnose's suspects (stepcrawl.diagnose.suspects): one ranked list across kinds."""

from __future__ import annotations

from stepcrawl.diagnose import Failure, PageRecord, RunData, suspects


def _failure(host: str, reason: str, cls: str = "transient") -> Failure:
    return Failure("crawl", f"http://{host}/x", host, cls, None, reason, 2, 1, 0.0)


def _pages(done: int, failed: int) -> list[PageRecord]:
    return [PageRecord("crawl", "done") for _ in range(done)] + [
        PageRecord("crawl", "failed") for _ in range(failed)
    ]


def test_urls_a_breaker_ended_count_for_the_reason_that_opened_it() -> None:
    opened = "host down since 2026-12-03T19:20:00+00:00 (its circuit breaker stayed open; "
    failures = [
        *[_failure("b.example", "http_503") for _ in range(2)],
        *[_failure("b.example", opened + "it opened on http_503)", "host_down") for _ in range(4)],
        _failure("c.example", "http_404", "fatal"),
    ]
    run = RunData(run="r", pages=_pages(13, 7), failures=failures)
    first, second = suspects(run)[:2]
    assert (first.kind, first.subject) == ("failures", "b.example http_503")
    assert first.score == 0.3, "6 of the 20 pages"
    assert "4 of them ended host_down" in first.detail
    assert second.subject == "c.example http_404"


def test_a_host_down_since_before_with_no_reason_known_is_host_down() -> None:
    reason = "host down since 2026-12-03T19:20:00+00:00 (its circuit breaker stayed open)"
    run = RunData(
        run="r", pages=_pages(5, 5), failures=[_failure("d.example", reason, "host_down")]
    )
    assert suspects(run)[0].subject == "d.example host_down"


def test_lost_urls_rank_first_and_consequences_count_half() -> None:
    checks = [
        {"id": "items_vs_baseline", "monitor": "items_vs_baseline", "subject": "", "value": 0.6,
         "check": ">= 0.8", "baseline": 1.0},
        {"id": "field_coverage:price", "monitor": "field_coverage", "subject": "price",
         "value": 0.6, "check": ">= 0.95", "baseline": 1.0},
    ]  # fmt: skip
    run = RunData(run="r", pages=_pages(10, 0), quality={"crawl": checks}, in_flight={"crawl": 1})
    lost, field, items = suspects(run)
    assert (lost.kind, lost.score) == ("lost_in_flight", 1.0)
    assert (field.subject, field.score) == ("crawl price", 0.4), "1 - 0.6 / baseline 1"
    assert (items.subject, items.score) == ("crawl items_vs_baseline", 0.2), "half its shortfall"
