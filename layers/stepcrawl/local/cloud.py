"""The local cloud: the CDK stack synthesized, deployed into moto, its functions run here.

One source of truth: the same template as ``cdk deploy`` (resources, queue settings, mapping
batch sizes and concurrency, state machines from the compiler), the same handlers, the same
environment (with the endpoint pointed at the emulator and the pipelines directory at the
local one).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepcrawl.errors import ConfigError
from stepcrawl.local.emulator import LOCAL_CREDENTIAL, REGION, Emulator
from stepcrawl.local.lambda_runtime import FunctionSpec, LambdaRuntime, MappingSpec
from stepcrawl.names import ENV_PIPELINES_DIR

__all__ = ["LocalCloud", "synthesize"]

ROOT = Path(__file__).resolve().parents[3]
_HANDLERS = ("dispatch", "fetch", "parse", "sweeper")


def synthesize(pipelines_dir: Path, *, stage: str = "local") -> dict[str, Any]:
    """The stack's CloudFormation template (from a checkout: the CDK app lives in infra/)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    try:
        from aws_cdk.assertions import Template  # noqa: PLC0415 - the cdk extra
        from infra.app import build_app  # noqa: PLC0415 - in a checkout only
    except ImportError as exc:
        raise ConfigError(
            f"the local cloud needs the CDK app and its libraries ({exc}); run it from a "
            "checkout with `make setup`"
        ) from None
    context: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["context"]
    context |= {
        "aws:cdk:bundling-stacks": [],  # the functions run here: no layer to build
        "pipelines_dir": str(pipelines_dir),
        "stage": stage,
    }
    _, stack = build_app(context)
    return dict(Template.from_stack(stack).to_json())


class LocalCloud:
    """Emulator + local Lambda runtime for one stack; use as a context manager."""

    def __init__(self, template: dict[str, Any], pipelines_dir: Path) -> None:
        self.emulator = Emulator(template)
        self.pipelines_dir = pipelines_dir
        self.runtime: LambdaRuntime | None = None

    def __enter__(self) -> LocalCloud:
        stack = self.emulator.start()
        sqs = self.emulator.client("sqs")
        functions = [self._function(name, config) for name, config in stack.functions.items()]
        arns = {
            f.name: config["FunctionArn"]
            for f, config in zip(functions, stack.functions.values(), strict=True)
        }
        by_arn = {arn: name for name, arn in arns.items()}
        mappings = [
            MappingSpec(
                by_arn[m["FunctionArn"]],
                sqs.get_queue_url(QueueName=m["EventSourceArn"].rsplit(":", 1)[-1])["QueueUrl"],
                batch_size=int(m.get("BatchSize", 10)),
                maximum_batching_window=float(m.get("MaximumBatchingWindowInSeconds", 0)),
                max_concurrency=int(m.get("ScalingConfig", {}).get("MaximumConcurrency", 2)),
                report_batch_item_failures="ReportBatchItemFailures"
                in m.get("FunctionResponseTypes", []),
            )
            for m in stack.mappings
        ]
        self.runtime = LambdaRuntime(functions, mappings, sqs=sqs)
        self.runtime.start()
        return self

    def _function(self, name: str, config: Mapping[str, Any]) -> FunctionSpec:
        kind = next((k for k in _HANDLERS if k in name.lower()), None)
        if kind is None:
            raise ConfigError(f"no handler in functions/ matches the stack's function {name}")
        environment = dict(config.get("Environment", {}).get("Variables", {}))
        # Same for every function, so the runtime never has to swap environments.
        environment.pop("POWERTOOLS_SERVICE_NAME", None)
        environment |= {
            ENV_PIPELINES_DIR: str(self.pipelines_dir),
            "AWS_ENDPOINT_URL": self.emulator.endpoint,
            "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIAL,
            "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIAL,
            "AWS_DEFAULT_REGION": REGION,
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        return FunctionSpec(
            kind,
            f"{ROOT}/functions/{kind}/handler.py:handler",
            environment,
            timeout=float(config.get("Timeout", 60)),
            memory_mb=int(config.get("MemorySize", 1024)),
        )

    def run(self, state_machine: str, run_id: str, *, timeout: float = 300) -> dict[str, Any]:
        """Start a named execution and play the world until it ends; its description."""
        assert self.runtime is not None
        assert self.emulator.stack is not None
        sfn = self.emulator.client("stepfunctions")
        arn = self.emulator.stack.state_machines[state_machine]
        execution = sfn.start_execution(stateMachineArn=arn, name=run_id, input="{}")
        deadline = time.monotonic() + timeout
        next_tick = 0.0
        while time.monotonic() < deadline:
            described: dict[str, Any] = sfn.describe_execution(
                executionArn=execution["executionArn"]
            )
            if described["status"] != "RUNNING":
                return described
            if time.monotonic() >= next_tick:  # the sweeper's schedule, sped up
                self.runtime.invoke("sweeper", {})
                next_tick = time.monotonic() + 2.0
            time.sleep(0.1)
        raise TimeoutError(f"run {run_id} still running after {timeout}s")

    def __exit__(self, *exc: object) -> None:
        if self.runtime is not None:
            self.runtime.stop()
        self.emulator.stop()
