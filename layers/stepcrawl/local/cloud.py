"""The local cloud: the CDK stack synthesized, deployed into moto, its functions run here.

One source of truth: the same template as ``cdk deploy`` (resources, queue settings, mapping
batch sizes and concurrency, state machines from the compiler, schedules, TTL), the same
handlers, the same environment (with the endpoint pointed at the emulator and the pipelines
directory at the local one). What moto does not do, this plays:

* the Lambda service for every event-source mapping (:mod:`stepcrawl.emulator.lambda_runtime`);
* EventBridge Scheduler: every schedule of the template fires its target, a state machine
  (a new execution) or a function (the sweeper), on its cron or rate in its time zone;
* DynamoDB TTL: expired items are deleted by a reaper thread;
* CloudWatch Logs: what the functions print goes to ``logs`` (a file) instead of the
  terminal, as on AWS it goes to their log groups; and its Embedded Metric Format lines become
  metric data in the emulator's CloudWatch (:mod:`stepcrawl.emulator.metrics`), as on AWS.

Runs are started, followed and read through :class:`~stepcrawl.deployment.Deployment`,
exactly as ``stepcrawl start/status/items`` do against AWS.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final, TextIO

from stepcrawl.deployment import Deployment, stack_name
from stepcrawl.emulator.alarms import LOCAL_ALARM_EVERY, LocalAlarms
from stepcrawl.emulator.heap import long_lived, thaw_heap
from stepcrawl.emulator.lambda_runtime import Chaos, FunctionSpec, LambdaRuntime, MappingSpec
from stepcrawl.emulator.metrics import EmfForwarder
from stepcrawl.emulator.moto_iam import AccessDeniedError, Identity, is_permitted
from stepcrawl.emulator.scheduler import (
    LocalScheduler,
    ScheduleSpec,
    render_input,
    schedule_arn,
    schedules_from_template,
)
from stepcrawl.emulator.secrets import store_local_secrets
from stepcrawl.emulator.server import ACCOUNT, REGION, DeployedStack, Emulator
from stepcrawl.emulator.ttl import TtlReaper, ttl_attributes
from stepcrawl.environment import quiet_node_deprecation
from stepcrawl.errors import ConfigError
from stepcrawl.local.concurrency import MappingConcurrency, capped_scaler_settings
from stepcrawl.names import ENV_FETCH_MAPPING, ENV_PARSE_MAPPING, ENV_PIPELINES_DIR, ENV_SCALER
from stepcrawl.run_status import RunStatus
from stepcrawl.runtime import close_containers
from stepcrawl.scaling.scaler import SCALER_FUNCTION as SCALER
from stepcrawl.storage import Usage

__all__ = [
    "LOCAL_SCALE_EVERY",
    "LOCAL_STAGE",
    "LocalCloud",
    "capped_functions",
    "synthesize",
]

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
#: What each container process reports after an invocation: its metered usage by name.
CONTAINER_REPORT: Final = "stepcrawl.runtime:container_usage"
#: The library's modules every handler imports, imported once by the containers' fork server
#: (a cold start then costs ~0.1 s instead of ~0.7 s; docs/local.md, Containers).
PRELOADED_LIBRARY: Final = (
    "stepcrawl.crawl.entrypoints",
    "stepcrawl.runtime",
    "stepcrawl.storage.aws",
)
LOCAL_STAGE = "local"
_HANDLERS = ("dispatch", "fetch", "parse", "sweeper", SCALER, "notify", "render")
#: Seconds between the scaler's ticks locally (a minute on AWS): a local crawl lasts seconds.
LOCAL_SCALE_EVERY: Final = 3.0


def synthesize(
    pipelines_dir: Path,
    *,
    stage: str = LOCAL_STAGE,
    alert_secrets: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The stack's CloudFormation template, synthesized by the CDK app (``infra``, shipped in
    this distribution; its libraries are the ``cdk`` extra). ``alert_secrets`` replaces the
    ``alert_webhook_secrets`` context (the notifier's channel secrets, docs/local.md);
    ``settings`` sets other context keys, as ``-c key=value`` does (docs/deploy.md), e.g. a
    ``stall_after`` scaled to a local run's clock."""
    quiet_node_deprecation()
    try:
        from aws_cdk.assertions import Template  # noqa: PLC0415 - the cdk extra
        from infra.app import build_app  # noqa: PLC0415
        from infra.config import cdk_json_context  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError(
            f"the local cloud needs the CDK app's libraries ({exc}); install the cdk extra "
            "(`make setup` does)"
        ) from None
    context = cdk_json_context() | {
        "aws:cdk:bundling-stacks": [],  # the functions run here: no layer to build
        "pipelines_dir": str(pipelines_dir.resolve()),
        "stage": stage,
        "console": {},  # local mode serves its console itself (stepcrawl serve)
    }
    if alert_secrets is not None:
        context["alert_webhook_secrets"] = list(alert_secrets)
    context.update(settings or {})
    _, stack = build_app(context)
    return dict(Template.from_stack(stack).to_json())


class _FunctionOutput(io.TextIOBase):
    """``sys.stdout``/``stderr`` while the cloud runs: what the functions' containers print
    (relayed by the runtime's ``lambda-*`` threads) goes to CloudWatch's metric extraction and
    to their log (a file, or the terminal)."""

    def __init__(
        self, terminal: TextIO, log: IO[str] | None, metrics: EmfForwarder, lock: threading.Lock
    ) -> None:
        self.terminal, self.log, self.metrics, self.lock = terminal, log, metrics, lock

    def write(self, text: str) -> int:
        if not threading.current_thread().name.startswith("lambda-"):
            return self.terminal.write(text)
        self.metrics.write(text)
        if self.log is None:
            return self.terminal.write(text)
        with self.lock:
            return self.log.write(text)

    def flush(self) -> None:
        self.terminal.flush()
        if self.log is not None:
            with self.lock:
                self.log.flush()

    def isatty(self) -> bool:
        return self.terminal.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.terminal.encoding


class LocalCloud:
    """Emulator + local Lambda runtime + schedules + TTL for one stack; a context manager.

    ``log_path`` receives the functions' output (``None``: it stays on the terminal);
    ``chaos`` injects crashes and duplicate deliveries (tests); ``sweep_every`` overrides the
    sweeper's schedule (tests that must not wait a minute for the safety net). The scaler
    runs every ``scale_every`` seconds instead of every minute (its tick scaled to match, see
    docs/scaling.md; ``None``: on its schedule); :attr:`scaling` keeps what each tick did.
    The stack's alarms are evaluated every ``alarm_every`` seconds, a local minute, with their
    periods scaled alike (:mod:`stepcrawl.emulator.alarms`; ``None``: not evaluated).
    ``batching_window_scale`` plays the mappings' batching windows at that share of their
    deployed length (1: as Lambda does; ``stepcrawl run``: 0.1, unless ``--deployed-windows``).
    ``containers_per_function`` caps the concurrency the scaler sets on fetch and parse
    (``stepcrawl run`` and ``serve``: :func:`machine_containers`; ``None``: the scaler's, as
    on Lambda).

    While it runs, what this process held when it had started (the emulator, the stack, and
    whatever else the process had) is frozen for the garbage collector (``gc.freeze``:
    :mod:`stepcrawl.emulator.heap`); :meth:`stop` thaws it.
    """

    def __init__(
        self,
        template: dict[str, Any],
        pipelines_dir: Path,
        *,
        stage: str = LOCAL_STAGE,
        log_path: Path | None = None,
        chaos: Chaos | None = None,
        sweep_every: float | None = None,
        scale_every: float | None = LOCAL_SCALE_EVERY,
        alarm_every: float | None = LOCAL_ALARM_EVERY,
        batching_window_scale: float = 1.0,
        containers_per_function: int | None = None,
        enforce_iam: bool = True,
    ) -> None:
        if containers_per_function is not None and containers_per_function < 1:
            raise ConfigError(
                f"containers per function must be at least 1, got {containers_per_function}"
            )
        self.template = template
        self.batching_window_scale = batching_window_scale
        self.containers_per_function = containers_per_function
        self.stage = stage
        self.emulator = Emulator(template, stack_name=stack_name(stage), enforce_iam=enforce_iam)
        self.pipelines_dir = pipelines_dir.resolve()
        self.log_path = log_path
        self.chaos = chaos
        self.sweep_every = sweep_every
        self.scale_every = scale_every
        self.alarm_every = alarm_every
        #: Each scaler tick: seconds since start, the feed window, and per function the
        #: decision (concurrency before and after, reason, inputs).
        self.scaling: list[dict[str, Any]] = []
        self._started_at = time.monotonic()
        self.runtime: LambdaRuntime | None = None
        self.deployment: Deployment | None = None
        self.scheduler: LocalScheduler | None = None
        self.reaper: TtlReaper | None = None
        self.metrics: EmfForwarder | None = None
        self.alarms: LocalAlarms | None = None
        self._stack = contextlib.ExitStack()
        self._sweeping = threading.Event()
        self._schedule_roles: dict[str, Identity] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> LocalCloud:
        """Deploy and start everything (idempotent); :meth:`stop` or ``with`` undoes it."""
        if self.deployment is None:
            # The emulator's models, the stack and the runtime live until stop: frozen once
            # built, no collection passes over them (emulator/heap.py); thawed at stop.
            self._stack.callback(thaw_heap)
            try:
                with long_lived():
                    self._start()
            except BaseException:
                self._stack.close()
                raise
        return self

    def stop(self) -> None:
        self._sweeping.set()
        self._stack.close()

    def __enter__(self) -> LocalCloud:
        return self.start()

    def _start(self) -> None:
        # werkzeug logs every request; moto logs a failed execution's whole parse tree. What
        # matters reaches the user through the run's status instead.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        logging.getLogger("moto").setLevel(logging.CRITICAL)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            # moto prints "Starting a new Thread ..." and warns about every resource type its
            # CloudFormation skips (queue policies, invoke configs): none matters locally.
            warnings.simplefilter("ignore", UserWarning)
            stack = self.emulator.start()
        self._stack.callback(self.emulator.stop)
        # STEPCRAWL_LOCAL_SECRETS: secrets (proxy credentials) the functions will read
        store_local_secrets(self.emulator.client("secretsmanager"))
        self.metrics = self._stack.enter_context(EmfForwarder(self.emulator.client("cloudwatch")))
        self._capture_function_output(self.log_path)
        sqs = self.emulator.client("sqs")
        # Fetch and parse run the machine's share of containers: all of them initialised
        # before the run, not cold-started in its first second (docs/local.md, Containers).
        capped = capped_functions(stack)
        share = self.containers_per_function or 1
        functions = {
            name: self._function(name, config, provisioned=share if name in capped else 1)
            for name, config in stack.functions.items()
        }
        mappings = self._mappings(stack, functions, sqs)
        self.runtime = LambdaRuntime(
            list(functions.values()),
            mappings,
            sqs=sqs,
            chaos=self.chaos,
            container_report=CONTAINER_REPORT,
            batching_window_scale=self.batching_window_scale,
            preload=PRELOADED_LIBRARY,
        )
        self.runtime.start()
        self._stack.callback(close_containers)  # after the runtime has stopped (LIFO)
        self._stack.callback(self.runtime.stop)
        self.deployment = Deployment(self.stage, client=self.emulator.client)
        self.scheduler = LocalScheduler(schedules_from_template(self.template), self.deliver)
        self.scheduler.start()
        self._stack.callback(self.scheduler.stop)
        tables = {
            stack.resources[logical]: attribute
            for logical, attribute in ttl_attributes(self.template).items()
            if logical in stack.resources
        }
        self.reaper = TtlReaper(self.emulator.client("dynamodb"), tables)
        self.reaper.start()
        self._stack.callback(self.reaper.stop)
        if self.sweep_every is not None:
            self._sweep_loop(self.sweep_every)
        if self.scale_every is not None and SCALER in self.runtime.functions():
            self._scale_loop(self.scale_every)
        if self.alarm_every is not None:
            runtime = self.runtime
            self.alarms = LocalAlarms(
                self.template,
                stack.resources,
                self.emulator.client,
                lambda name, event: runtime.invoke(_kind(name), event),
                account=ACCOUNT,
                region=REGION,
                state_machines=list(stack.state_machines.values()),
                every=self.alarm_every,
                queue_ages=self.emulator.oldest_message_ages,
                put_composite=self.emulator.put_composite_alarm,
            )
            self.alarms.start()
            self._stack.callback(self.alarms.stop)  # before the runtime stops (LIFO)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def container_usage(self) -> dict[str, Usage]:
        """Each function container's metered usage so far, by container name (the report's
        cost per function reads it)."""
        usage: dict[str, Usage] = {}
        if self.runtime is not None:
            for report in self.runtime.container_reports().values():
                for name, used in (report or {}).items():
                    usage[name] = usage.get(name, Usage()) + used
        return usage

    @property
    def endpoint(self) -> str:
        return self.emulator.endpoint

    def environment(self) -> dict[str, str]:
        """What a shell needs for the aws CLI, boto3 and ``stepcrawl`` to use this cloud."""
        assert self.emulator.admin is not None, "the cloud is not started"
        return {
            "AWS_ENDPOINT_URL": self.emulator.endpoint,
            **self.emulator.admin.environment(),
            "AWS_DEFAULT_REGION": REGION,
            "STEPCRAWL_STAGE": self.stage,
        }

    def _capture_function_output(self, path: Path | None) -> None:
        log = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            log = self._stack.enter_context(path.open("a", encoding="utf-8"))
        assert self.metrics is not None
        lock = threading.Lock()
        saved = sys.stdout, sys.stderr
        sys.stdout = _FunctionOutput(saved[0], log, self.metrics, lock)
        sys.stderr = _FunctionOutput(saved[1], log, self.metrics, lock)

        def restore() -> None:
            sys.stdout, sys.stderr = saved

        self._stack.callback(restore)

    def _mappings(
        self, stack: DeployedStack, functions: Mapping[str, FunctionSpec], sqs: Any
    ) -> list[MappingSpec]:
        """The stack's event source mappings as the runtime plays them: each polled with its
        function's role, fetch's and parse's capped at :attr:`containers_per_function`."""
        # The poller's session of each role (a container gets its own as it starts).
        roles = {
            name: self.emulator.role_identity(config["Role"], "lambda.amazonaws.com", name)
            for name, config in stack.functions.items()
        }
        by_arn = {config["FunctionArn"]: name for name, config in stack.functions.items()}
        scaled = _scaled_mappings(stack)
        return [
            MappingSpec(
                functions[by_arn[m["FunctionArn"]]].name,
                sqs.get_queue_url(QueueName=m["EventSourceArn"].rsplit(":", 1)[-1])["QueueUrl"],
                batch_size=int(m.get("BatchSize", 10)),
                maximum_batching_window=float(m.get("MaximumBatchingWindowInSeconds", 0)),
                max_concurrency=MappingConcurrency(
                    self.emulator.client("lambda"),
                    m["UUID"],
                    int(m.get("ScalingConfig", {}).get("MaximumConcurrency", 2)),
                    cap=self.containers_per_function if m["UUID"] in scaled else None,
                ),
                report_batch_item_failures="ReportBatchItemFailures"
                in m.get("FunctionResponseTypes", []),
                # Lambda's poller reads the queue with the function's role.
                client=self.emulator.client("sqs", roles[by_arn[m["FunctionArn"]]]),
            )
            for m in stack.mappings
        ]

    def _function(self, name: str, config: Mapping[str, Any], *, provisioned: int) -> FunctionSpec:
        kind = _kind(name)
        environment = dict(config.get("Environment", {}).get("Variables", {}))
        environment |= {
            ENV_PIPELINES_DIR: str(self.pipelines_dir),
            "AWS_ENDPOINT_URL": self.emulator.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        if kind == SCALER and self.containers_per_function is not None:
            scaler = environment.get(ENV_SCALER, "")
            environment[ENV_SCALER] = capped_scaler_settings(scaler, self.containers_per_function)
        return FunctionSpec(
            kind,
            f"{ROOT}/functions/{kind}/handler.py:handler",
            environment,
            timeout=float(config.get("Timeout", 60)),
            memory_mb=int(config.get("MemorySize", 1024)),
            provisioned=provisioned,
            # Each container a session of the function's execution role, as on Lambda.
            credentials=lambda: self.emulator.role_identity(
                str(config["Role"]), "lambda.amazonaws.com", name
            ).environment(),
        )

    # -- schedules ----------------------------------------------------------------------------

    def deliver(self, spec: ScheduleSpec, when: datetime) -> None:
        """EventBridge Scheduler's delivery of ``spec``'s firing at ``when``: start the state
        machine or invoke the function, with the schedule's role. A role that may not:
        botocore's ``ClientError`` (``AccessDeniedException``) for a state machine, and
        :class:`AccessDeniedError` for a function (invoked by the local runtime, not by a
        request)."""
        assert self.emulator.stack is not None
        assert self.runtime is not None
        target = self.template["Resources"].get(spec.target_ref, {})
        payload = render_input(spec, when, schedule_arn(spec, region=REGION, account=ACCOUNT))
        # The scheduler delivers with the schedule's role: a role without the grant fails.
        role = self._schedule_role(spec)
        if target.get("Type") == "AWS::StepFunctions::StateMachine":
            name = str(target["Properties"]["StateMachineName"])
            self.emulator.client("stepfunctions", role).start_execution(
                stateMachineArn=self.emulator.stack.state_machines[name],
                name=f"{when:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}",
                input=payload or "{}",
            )
        elif target.get("Type") == "AWS::Lambda::Function":
            function = self.emulator.stack.resources[spec.target_ref]
            kind = _kind(function)
            if kind == SCALER and self.scale_every is not None:
                return  # the scaler runs on the local clock (_scale_loop)
            arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}"
            if role is not None and not is_permitted(ACCOUNT, role, "lambda:InvokeFunction", arn):
                raise AccessDeniedError(
                    f"schedule {spec.name}: its role {role.arn} is not authorized to perform: "
                    f"lambda:InvokeFunction on resource: {arn}"
                )
            self.runtime.invoke(kind, json.loads(payload or "{}"))
        else:
            raise ConfigError(
                f"schedule {spec.name}: cannot play a target of type {target.get('Type')}"
            )

    def _schedule_role(self, spec: ScheduleSpec) -> Identity | None:
        """A session of the schedule's role (``None``: a role from outside the stack, whose
        grants cannot be known here: the administrator delivers)."""
        assert self.emulator.stack is not None
        name = self.emulator.stack.resources.get(spec.role_ref) if spec.role_ref else None
        if name is None:
            return None
        if name not in self._schedule_roles:
            arn = self.emulator.client("iam").get_role(RoleName=name)["Role"]["Arn"]
            self._schedule_roles[name] = self.emulator.role_identity(
                arn, "scheduler.amazonaws.com", spec.name
            )
        return self._schedule_roles[name]

    def _sweep_loop(self, every: float) -> None:
        def loop() -> None:
            while not self._sweeping.wait(every):
                if self.runtime is not None:
                    self.runtime.invoke("sweeper", {})

        threading.Thread(target=loop, name="local-sweep", daemon=True).start()

    def _scale_loop(self, every: float) -> None:
        def loop() -> None:
            while not self._sweeping.wait(every):
                if self.runtime is None:
                    continue
                try:
                    tick = self.runtime.invoke(SCALER, {"tick": every})
                except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
                    log.warning("scaler tick failed: %s", exc)
                    continue
                at = round(time.monotonic() - self._started_at, 2)
                self.scaling.append({"t": at, **tick})

        threading.Thread(target=loop, name="local-scale", daemon=True).start()

    # -- runs ---------------------------------------------------------------------------------

    def run(
        self,
        pipeline: str,
        run_id: str,
        *,
        timeout: float | None = None,
        on_tick: Callable[[RunStatus], None] | None = None,
        interval: float = 0.5,
    ) -> RunStatus:
        """Start a run of ``pipeline`` and follow it to its end."""
        assert self.deployment is not None
        self.deployment.start(pipeline, run_id)
        return self.deployment.wait(
            run_id, pipeline=pipeline, timeout=timeout, on_tick=on_tick, interval=interval
        )


def _scaled_mappings(stack: DeployedStack) -> set[str]:
    """The UUIDs of the mappings the scaler sets (its environment names them): the ones
    capped at the machine's share."""
    return {
        value
        for config in stack.functions.values()
        for key, value in config.get("Environment", {}).get("Variables", {}).items()
        if key in (ENV_FETCH_MAPPING, ENV_PARSE_MAPPING)
    }


def capped_functions(stack: DeployedStack) -> set[str]:
    """The functions the scaled mappings invoke (fetch and parse), by name in the stack."""
    by_arn = {config["FunctionArn"]: name for name, config in stack.functions.items()}
    scaled = _scaled_mappings(stack)
    return {by_arn[m["FunctionArn"]] for m in stack.mappings if m["UUID"] in scaled}


def _kind(function_name: str) -> str:
    kind = next((k for k in _HANDLERS if k in function_name.lower()), None)
    if kind is None:
        raise ConfigError(f"no handler in functions/ matches the stack's function {function_name}")
    return kind
