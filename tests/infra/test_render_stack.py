"""The render function in the stack (render: browser): a container image with its own queue,
DLQ, concurrency and timeout, the fetch function's grants, and the feeders' way to it; absent
where no pipeline renders. Synthesizing needs no Docker: the image's context is only staged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.queues import VISIBILITY_FACTOR
from infra.render import BATCH_SIZE, RENDER_TIMEOUT, stage_context
from tests.infra.test_stack import allowed, role_of, write_pipeline

from stepcrawl.names import ENV_PIPELINES_DIR, ENV_RENDER_QUEUE_URL

ROOT = Path(__file__).resolve().parents[2]


def _resource(synth: Any, construct: Any) -> dict[str, Any]:
    found: dict[str, Any] = synth.json["Resources"][synth.logical_id(construct)]
    return found


def test_the_render_function_is_an_image_with_its_queue_and_limits(default) -> None:
    render = default.stack.render
    assert render is not None  # pipelines/browser-rendering.yaml renders
    function = _resource(default, render.function)["Properties"]
    assert function["PackageType"] == "Image"
    assert "ImageUri" in function["Code"]
    assert function["Timeout"] == RENDER_TIMEOUT.to_seconds()
    assert function["MemorySize"] >= 2048
    assert function["Architectures"] == ["arm64"]
    assert function["TracingConfig"] == {"Mode": "Active"}
    env = function["Environment"]["Variables"]
    assert env[ENV_RENDER_QUEUE_URL] == {"Ref": default.logical_id(render.queue.queue)}
    assert env[ENV_PIPELINES_DIR] == "/var/task/pipelines"

    queue = _resource(default, render.queue.queue)["Properties"]
    assert queue["VisibilityTimeout"] == RENDER_TIMEOUT.to_seconds() * VISIBILITY_FACTOR
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": [default.logical_id(render.queue.dead_letters), "Arn"]
    }
    assert queue["SqsManagedSseEnabled"] is True
    mappings = [
        m["Properties"]
        for m in default.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": default.logical_id(render.function)}
    ]
    assert len(mappings) == 1
    assert mappings[0]["BatchSize"] == BATCH_SIZE
    assert mappings[0]["ScalingConfig"] == {"MaximumConcurrency": 2}
    assert mappings[0]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_render_concurrency_comes_from_the_context(synthesize) -> None:
    synth = synthesize(render_max_concurrency=7)
    assert synth.stack.render is not None
    mapping = next(
        m["Properties"]
        for m in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": synth.logical_id(synth.stack.render.function)}
    )
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 7}


def test_grants_are_the_fetch_functions_and_the_feeders_may_send(default) -> None:
    render = default.stack.render
    assert render is not None
    queue = f"<{default.logical_id(render.queue.queue)}.Arn>"
    parse = f"<{default.logical_id(default.stack.queues.parse.queue)}.Arn>"
    fetch = f"<{default.logical_id(default.stack.queues.fetch.queue)}.Arn>"
    pairs = {(a, str(r)) for a, r in allowed(default, role_of(default, render.function))}
    assert ("sqs:SendMessage", queue) in pairs
    assert ("sqs:SendMessage", parse) in pairs
    assert ("sqs:SendMessage", fetch) not in pairs
    assert not any(a.startswith("s3:GetObject") for a, _ in pairs)  # puts raw bodies only
    workers = default.stack.workers
    for feeder in (workers.dispatch, workers.parse, workers.sweeper):
        sends = {(a, str(r)) for a, r in allowed(default, role_of(default, feeder))}
        assert ("sqs:SendMessage", queue) in sends, feeder.node.path
        env = _resource(default, feeder)["Properties"]["Environment"]["Variables"]
        assert env[ENV_RENDER_QUEUE_URL] == {"Ref": default.logical_id(render.queue.queue)}
    # the plain fetch function knows nothing of it
    env = _resource(default, workers.fetch)["Properties"]["Environment"]["Variables"]
    assert ENV_RENDER_QUEUE_URL not in env


def test_no_render_function_where_no_pipeline_renders(synthesize, tmp_path: Path) -> None:
    write_pipeline(
        tmp_path,
        "plain",
        "tasks:\n  - {id: a, type: crawl, seeds: ['https://a.example.com/']}\n",
    )
    synth = synthesize(pipelines_dir=str(tmp_path))
    assert synth.stack.render is None
    functions = synth.resources("AWS::Lambda::Function")
    assert all(f["Properties"].get("PackageType") != "Image" for f in functions.values())


def test_the_image_context_holds_the_library_the_handler_and_the_pipelines() -> None:
    pipeline = ROOT / "pipelines" / "browser-rendering.yaml"
    context = stage_context([pipeline])
    assert stage_context([pipeline]) == context  # same content, same directory
    assert (context / "Dockerfile").read_text() == (
        ROOT / "functions/render/Dockerfile"
    ).read_text()
    assert (context / "handler.py").is_file()
    assert (context / "stepcrawl" / "fetch" / "browser.py").is_file()
    assert not list(context.rglob("__pycache__"))
    assert (context / "pipelines" / "browser-rendering.yaml").is_file()
    requirements = (context / "requirements.txt").read_text().splitlines()
    assert any(r.startswith("playwright==") for r in requirements)
    assert any(r.startswith("httpx") for r in requirements)
