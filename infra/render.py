"""The render function (``render: browser``; docs/pipelines.md, "Browser rendering").

Deployed only when a deployed pipeline renders pages. A container-image Lambda (Chromium does
not fit a zip and its layers; the image is Playwright's, with Chromium and its libraries) fed by
its own queue and dead-letter queue, with its own concurrency (``render_max_concurrency``) and
timeout; the feeders (dispatch, parse, sweeper) send rendered pages there instead of the fetch
queue (:mod:`stepcrawl.crawl.render`). Its grants are the fetch function's: the table, raw
bodies in the bucket, its own queue (retries), the parse queue.

The image's build context is staged at synth (:func:`stage_context`): the Dockerfile and
handler of ``functions/render/``, the library, its requirements and the deployed pipeline
files. ``cdk synth`` only copies that directory into the cloud assembly; Docker builds it at
``cdk deploy`` (or ``cdk-assets publish``).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.access import BODIES
from infra.config import REPO_ROOT, StackConfig
from infra.functions import FUNCTIONS_DIR, Workers
from infra.queues import WorkQueue, WorkQueues
from infra.retention import retention_days
from infra.storage import Storage
from stepcrawl.crawl.render import renders_any
from stepcrawl.environment import WorkerEnvironment
from stepcrawl.functions_spec import FUNCTION_MEMORY_MB
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_QUEUE_URL,
    ENV_PIPELINES_DIR,
    ENV_RENDER_QUEUE_URL,
    ENV_TABLE,
    METRICS_NAMESPACE,
)
from stepcrawl.pipeline import Pipeline

__all__ = [
    "BATCH_SIZE",
    "RENDER_MEMORY_MB",
    "RENDER_TIMEOUT",
    "RenderWorker",
    "renders_pages",
    "stage_context",
]

#: A batch of pages, four at a time in one Chromium (fetch/browser.py), each within its task's
#: render_timeout (at most 120 s): 5 minutes covers a batch with room to close the browser.
RENDER_TIMEOUT: Final = Duration.minutes(5)
BATCH_SIZE: Final = 4
#: One Chromium rendering up to four pages at once (and CPU in proportion, which it needs).
RENDER_MEMORY_MB: Final = FUNCTION_MEMORY_MB["render"]
#: Where the image finds the pipelines (the Dockerfile copies them there).
IMAGE_PIPELINES: Final = "/var/task/pipelines"
#: The playwright pin of the image (its base image carries the matching Chromium).
PLAYWRIGHT_PIN: Final = "playwright==1.49.1"
#: Staged build contexts kept in the temporary directory (see :func:`stage_context`).
KEEP_STAGED: Final = 8


def renders_pages(pipelines: Sequence[Pipeline]) -> bool:
    """Whether any of ``pipelines`` renders pages (then the render function is deployed)."""
    return any(renders_any(task) for pipeline in pipelines for task in pipeline.tasks)


def stage_context(pipeline_files: Sequence[Path]) -> Path:
    """The image's build context, in a directory named by its content (reused when equal)."""
    library = REPO_ROOT / "layers" / "stepcrawl"
    files = sorted(p for p in library.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = "\n".join([*project["project"]["dependencies"], PLAYWRIGHT_PIN]) + "\n"
    digest = hashlib.sha256(requirements.encode())
    for path in [FUNCTIONS_DIR / "render" / "Dockerfile", FUNCTIONS_DIR / "render" / "handler.py"]:
        digest.update(path.read_bytes())
    for path in files:
        digest.update(str(path.relative_to(library)).encode() + b"\0" + path.read_bytes())
    for path in pipeline_files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    context = Path(tempfile.gettempdir()) / "stepcrawl-render" / digest.hexdigest()[:20]
    if context.is_dir():
        return context
    building = Path(tempfile.mkdtemp(prefix="render-", dir=context.parent.parent))
    for name in ("Dockerfile", "handler.py"):
        shutil.copyfile(FUNCTIONS_DIR / "render" / name, building / name)
    (building / "requirements.txt").write_text(requirements, encoding="utf-8")
    shutil.copytree(
        library, building / "stepcrawl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    (building / "pipelines").mkdir()
    for path in pipeline_files:
        shutil.copyfile(path, building / "pipelines" / path.name)
    context.parent.mkdir(parents=True, exist_ok=True)
    try:
        building.rename(context)
    except OSError:  # another synth staged the same content meanwhile
        shutil.rmtree(building, ignore_errors=True)
    # Each change of the library stages anew: keep the newest few (3 MB each).
    staged = sorted(context.parent.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in staged[KEEP_STAGED:]:
        if old != context:
            shutil.rmtree(old, ignore_errors=True)
    return context


class RenderWorker(Construct):
    """The render queue (+ DLQ) and the render function consuming it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        storage: Storage,
        queues: WorkQueues,
        workers: Workers,
        pipeline_files: Sequence[Path],
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = WorkQueue(self, "Queue", consumer_timeout=RENDER_TIMEOUT)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention_days(config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="stepcrawl render function",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.DockerImageFunction(
            self,
            "Function",
            code=lambda_.DockerImageCode.from_image_asset(
                str(stage_context(pipeline_files)), platform=ecr_assets.Platform.LINUX_ARM64
            ),
            architecture=lambda_.Architecture.ARM_64,
            role=self.role,
            timeout=RENDER_TIMEOUT,
            memory_size=RENDER_MEMORY_MB,
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            log_group=self.log_group,
            environment={
                # Through render's model (stepcrawl.environment), which it reads them with.
                **WorkerEnvironment.model_validate(
                    {
                        ENV_TABLE: storage.table.table_name,
                        ENV_BUCKET: storage.bucket.bucket_name,
                        ENV_FETCH_QUEUE_URL: queues.fetch.queue.queue_url,
                        ENV_PARSE_QUEUE_URL: queues.parse.queue.queue_url,
                        ENV_RENDER_QUEUE_URL: self.queue.queue.queue_url,
                        ENV_PIPELINES_DIR: IMAGE_PIPELINES,
                        **config.engine.to_env(),
                    }
                ).variables(),
                "POWERTOOLS_SERVICE_NAME": "render",
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            },
            description=f"stepcrawl render ({config.stage})",
        )
        self.mapping = sources.SqsEventSource(
            self.queue.queue,
            batch_size=BATCH_SIZE,
            max_concurrency=config.render_max_concurrency,
            report_batch_item_failures=True,
        )
        self.function.add_event_source(self.mapping)  # receive/delete on its own queue
        # The fetch function's grants: the table (hosts, breakers, robots delays), raw pages
        # too large for a message, its own queue (retries, deferrals), the parse queue.
        storage.table.grant_read_write_data(self.function)
        storage.bucket.grant_put(self.function, BODIES)
        self.queue.queue.grant_send_messages(self.function)
        queues.parse.queue.grant_send_messages(self.function)
        # The feeders send rendered pages here (crawl/render.py).
        for feeder in (workers.dispatch, workers.parse, workers.sweeper):
            self.queue.queue.grant_send_messages(feeder)
            feeder.add_environment(ENV_RENDER_QUEUE_URL, self.queue.queue.queue_url)
