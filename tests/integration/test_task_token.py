"""A task's Step Functions token is kept once, apart from the items written again and again:
what a crawl writes does not grow with the token's length (a token is hundreds of
characters on AWS, and DynamoDB bills each write by the KB)."""

from __future__ import annotations

import pytest
from tests.helpers.bench import load_bench

from stepcrawl.table_keys import task_token_key
from stepcrawl.testing import MemoryRunner
from stepcrawl.testing.memory_runner import TASK_TOKEN_CHARS


def test_a_crawls_write_units_do_not_grow_with_its_tokens_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the task record and in the admission entry, a token of 2,048 characters (the
    API's bound, the memory runner's) cost the demo shop's crawl 0.055 write units a page
    against one of 20 (docs/performance.md, "Cost per page"): every commit writes the
    record. Kept apart, it costs its own put: 3 units a task."""
    bench = load_bench("cost_per_page")
    long = bench.measure(2, 30)
    monkeypatch.setattr(MemoryRunner, "token", lambda self, task: f"token-{task}")
    short = bench.measure(2, 30)
    pages = long["pages"]
    assert pages == short["pages"] > 20
    extra = (long["counts"]["ddb_write_units"] - short["counts"]["ddb_write_units"]) * pages
    assert extra == pytest.approx(3 - 1, abs=0.5)  # 3 units for 2 KB, 1 for a short one


def test_only_the_tokens_own_item_holds_it_and_the_task_is_answered_with_it() -> None:
    bench = load_bench("cost_per_page")
    seen: list[MemoryRunner] = []
    original = MemoryRunner.__enter__

    def keep(self: MemoryRunner) -> MemoryRunner:
        seen.append(self)
        return original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MemoryRunner, "__enter__", keep)
        bench.measure(2, 30)
    (runner,) = seen
    (task,) = [t.id for t in runner.pipeline.tasks]
    token = runner.token(task)
    assert len(token) == TASK_TOKEN_CHARS
    (answer,) = runner.tokens.answers
    assert answer.token == token
    holding = [key for key, item in runner.table.items.items() if token in str(item)]
    assert holding == [task_token_key(runner.run_id, task)]
