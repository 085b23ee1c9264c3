"""Stages fail permanent problems as the hierarchy's permanent classes, never by retrying.

A fetch message naming a task that does not crawl is a bug (or a pipeline version changed
under a queue): a FatalError, as in the parse stage, not an ``assert`` (which ``python -O``
would remove). An ETL stage's ConfigError fails its task.
"""

from __future__ import annotations

import pytest
from tests.helpers.demo import demo_pipeline

from stepcrawl.crawl import FetchMessage, process_fetch_batch
from stepcrawl.crawl.fetch_stage import fetch_policy
from stepcrawl.crawl.messages import UrlRef
from stepcrawl.errors import FatalError
from stepcrawl.pipeline import CrawlTask, Pipeline
from stepcrawl.testing import MemoryRunner

SITE = "http://127.0.0.1:9"  # never fetched: the stage refuses the message first


def test_a_fetch_message_for_a_non_crawl_task_is_fatal() -> None:
    pipeline = demo_pipeline(SITE)
    with MemoryRunner(pipeline) as runner:
        message = FetchMessage(
            pipeline=pipeline.name,
            version=pipeline.version_hash(),
            run=runner.run_id,
            task="clean_products",  # the demo's transform task
            ref=UrlRef(url=f"{SITE}/"),
            shard=0,
        )
        with pytest.raises(FatalError, match=r"task clean_products of .* is not a crawl task"):
            runner.loop.run_until_complete(
                process_fetch_batch(runner.services, runner.fetcher, [message])
            )
        assert runner.fetch_queue.drain() == []
        assert runner.parse_queue.drain() == []


def test_a_load_the_deployment_cannot_do_fails_its_task_instead_of_retrying() -> None:
    """A ConfigError in an ETL stage (here: a load into a bucket the stack has no rights to;
    on AWS also a missing target table) cannot be fixed by a redelivery: the task fails."""
    pipeline = demo_pipeline(
        SITE, tasks={"export_products": {"target": {"bucket": "someone-elses-bucket"}}}
    )
    with MemoryRunner(pipeline) as runner:
        runner.start("export_products")  # no upstream items needed to reach the check
        (answer,) = runner.tokens.answers
    assert answer.kind == "failure"
    assert answer.error == "Stepcrawl.ConfigError"
    assert "someone-elses-bucket" in answer.cause


def test_a_seed_host_the_fetch_policy_refuses_does_not_break_the_task_policy() -> None:
    """One seed with a host the policy cannot read must end on its own (bad_url), not fail
    every fetch batch of its task while the policy is built."""
    data = {
        "name": "odd",
        "tasks": [
            {"id": "c", "type": "crawl", "seeds": ["http://exa mple.com/", "http://good.example/"]}
        ],
    }
    pipeline = Pipeline.model_validate(data)
    task = pipeline.task("c")
    assert isinstance(task, CrawlTask)
    assert fetch_policy(pipeline, task).allowed_domains == ("good.example",)
    only_bad = Pipeline.model_validate(
        {"name": "odd", "tasks": [{"id": "c", "type": "crawl", "seeds": ["http://exa mple.com/"]}]}
    )
    policy = fetch_policy(only_bad, only_bad.task("c"))  # type: ignore[arg-type]
    assert policy.allowed_domains
    assert not policy.allows_host("anything.example")
