"""The console's HTTP API, written once for both places it runs (docs/console-api.md).

:class:`ConsoleApi` turns an :class:`ApiRequest` into an :class:`ApiResponse`
(:mod:`stepcrawl.console.messages`, re-exported here as the API's vocabulary) and knows
nothing of sockets or Lambda events: ``stepcrawl serve`` adapts it to a local HTTP server
(:mod:`stepcrawl.console.server`, which also checks the token and the Host), the stack's
console function to API Gateway (:mod:`stepcrawl.console.aws`, behind a JWT authorizer).
Pipelines come from a :class:`~stepcrawl.console.store.PipelineStore`; runs from a
:class:`~stepcrawl.deployment.Deployment`, the reader ``stepcrawl status`` uses.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepcrawl.console.editing import EditError, apply_ops, check_text, issue_json
from stepcrawl.console.executions import list_runs
from stepcrawl.console.messages import (
    ApiRequest,
    ApiResponse,
    HttpError,
    body_object,
    if_match,
    optional_string,
    query_int,
    required_string,
)
from stepcrawl.console.store import (
    ConflictError,
    PipelineNotFoundError,
    PipelineStore,
    ReadOnlyError,
    merge,
    unified_diff,
    version_of,
)
from stepcrawl.console.topology import DEFAULT_METRICS, TOPOLOGY_METRICS, TopologyProbe
from stepcrawl.errors import ConfigError, Issue
from stepcrawl.schema import pipeline_json_schema

if TYPE_CHECKING:
    from stepcrawl.deployment import Deployment

__all__ = ["ApiRequest", "ApiResponse", "ConsoleApi", "ProbeSettings"]

logger = logging.getLogger(__name__)
_LIMIT_RUNS = 200


@dataclass(frozen=True)
class ProbeSettings:
    """How the live topology is probed: the original design's ``intervalMs`` and
    ``includeMetrics``, defaults the page may change per viewer."""

    interval_ms: int = 2000
    include_metrics: tuple[str, ...] = DEFAULT_METRICS

    def __post_init__(self) -> None:
        if self.interval_ms < 250:
            raise ConfigError(f"probe interval {self.interval_ms} ms: use at least 250 ms")
        unknown = sorted(set(self.include_metrics) - set(TOPOLOGY_METRICS))
        if unknown:
            raise ConfigError(
                f"unknown topology metric(s) {', '.join(unknown)}; "
                f"known: {', '.join(TOPOLOGY_METRICS)}"
            )


Handler = Callable[[ApiRequest, re.Match[str]], ApiResponse]
#: What a refused request's status is, by the error's class (the first that matches).
_STATUS_OF: tuple[tuple[type[ConfigError], int], ...] = (
    (PipelineNotFoundError, 404),
    (ReadOnlyError, 403),
    (EditError, 422),
)


class ConsoleApi:
    """Every route of docs/console-api.md.

    ``deployment`` gives the stack runs are read from (called when a run route is used);
    ``deployed_dir`` holds the pipeline files the stack was deployed from, which tells a
    saved file apart from what runs.
    """

    def __init__(
        self,
        store: PipelineStore,
        deployment: Callable[[], Deployment],
        *,
        mode: str,
        stage: str,
        deployed_dir: Path | None = None,
        probe: ProbeSettings | None = None,
    ) -> None:
        self.store = store
        self.mode = mode
        self.stage = stage
        self.deployed_dir = deployed_dir
        self.probe = probe or ProbeSettings()
        self._deployment = deployment
        self._prober: TopologyProbe | None = None
        name = r"(?P<name>[A-Za-z0-9_.-]+)"
        run = r"(?P<run>[A-Za-z0-9_-]+)"
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(r"/api/info"), self._info),
            ("GET", re.compile(r"/api/schema"), self._schema),
            ("GET", re.compile(r"/api/pipelines"), self._list),
            ("POST", re.compile(r"/api/pipelines"), self._create),
            ("GET", re.compile(rf"/api/pipelines/{name}"), self._get),
            ("PUT", re.compile(rf"/api/pipelines/{name}"), self._save),
            ("POST", re.compile(rf"/api/pipelines/{name}/preview"), self._preview),
            ("GET", re.compile(rf"/api/pipelines/{name}/history"), self._history),
            ("GET", re.compile(rf"/api/pipelines/{name}/versions/(?P<v>\w+)"), self._version),
            ("GET", re.compile(rf"/api/pipelines/{name}/diff"), self._diff),
            ("POST", re.compile(rf"/api/pipelines/{name}/restore"), self._restore),
            ("POST", re.compile(rf"/api/pipelines/{name}/runs"), self._start),
            ("GET", re.compile(r"/api/runs"), self._runs),
            ("POST", re.compile(rf"/api/runs/{run}/cancel"), self._cancel),
            ("POST", re.compile(rf"/api/runs/{run}/redrive"), self._redrive),
            ("GET", re.compile(rf"/api/runs/{run}/topology"), self._topology),
        ]

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    def handle(self, request: ApiRequest) -> ApiResponse:
        path = request.path.rstrip("/") or "/"
        allowed = []
        for method, pattern, handler in self._routes:
            matched = pattern.fullmatch(path)
            if matched is None:
                continue
            if method == request.method:
                return self._call(handler, request, matched)
            allowed.append(method)
        if allowed:
            return ApiResponse(
                405, {"error": f"{request.method} not allowed"}, {"Allow": ", ".join(allowed)}
            )
        return ApiResponse(404, {"error": f"no route {path}"})

    def _call(self, handler: Handler, request: ApiRequest, matched: re.Match[str]) -> ApiResponse:
        """The handler's answer, or its error as the status that says what to do next."""
        try:
            return handler(request, matched)
        except HttpError as exc:
            return ApiResponse(exc.status, {"error": str(exc), **exc.extra})
        except ConflictError as exc:
            return self._conflict(exc, request)
        except ConfigError as exc:
            status = next((s for kind, s in _STATUS_OF if isinstance(exc, kind)), 400)
            return ApiResponse(status, {"error": str(exc)})
        except Exception:
            logger.exception("console API: %s %s failed", request.method, request.path)
            return ApiResponse(500, {"error": "internal error; the server's log says why"})

    # -- pipelines -----------------------------------------------------------------------------

    def _info(self, _request: ApiRequest, _m: re.Match[str]) -> ApiResponse:
        try:
            version = package_version("stepcrawl")
        except PackageNotFoundError:  # pragma: no cover - a source checkout without install
            version = "unknown"
        return ApiResponse(
            200,
            {
                "mode": self.mode,
                "read_only": self.read_only,
                "stage": self.stage,
                "version": version,
                "probe": {
                    "interval_ms": self.probe.interval_ms,
                    "include_metrics": list(self.probe.include_metrics),
                },
                "metrics": list(TOPOLOGY_METRICS),
            },
        )

    def _schema(self, _request: ApiRequest, _m: re.Match[str]) -> ApiResponse:
        return ApiResponse(200, pipeline_json_schema())

    def _list(self, _request: ApiRequest, _m: re.Match[str]) -> ApiResponse:
        deployed = self._deployed_versions()
        found = []
        for name in self.store.names():
            current = self.store.get(name)
            checked = check_text(current.text, current.file)
            summary = checked.graph
            data = checked.data if isinstance(checked.data, dict) else {}
            found.append(
                {
                    "name": name,
                    "file": current.file,
                    "version": current.version,
                    "valid": checked.valid,
                    "issues": len(checked.issues),
                    "description": data.get("description"),
                    "schedule": _schedule_text(summary["schedule"]),
                    "tasks": len(summary["nodes"]),
                    "deployed": name in deployed,
                    "deployed_version": deployed.get(name),
                }
            )
        return ApiResponse(200, {"pipelines": found})

    def _get(self, _request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        current = self.store.get(m["name"])
        checked = check_text(current.text, current.file)
        deployed = self._deployed_versions().get(current.name)
        return ApiResponse(
            200,
            {
                "name": current.name,
                "file": current.file,
                "version": current.version,
                "yaml": current.text,
                "valid": checked.valid,
                "issues": [issue_json(i) for i in checked.issues],
                "graph": checked.graph,
                "read_only": self.read_only,
                "deployed_version": deployed,
            },
            {"ETag": f'"{current.version}"'},
        )

    def _preview(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        current = self.store.get(m["name"])
        body = body_object(request)
        text = required_string(body, "yaml")
        ops = body.get("ops") or []
        if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
            raise HttpError(400, "`ops` must be a list of operation objects")
        try:
            edited = apply_ops(text, ops)
        except EditError as exc:
            checked = check_text(text, current.file)
            return ApiResponse(
                422,
                {
                    "error": str(exc),
                    "issues": [issue_json(i) for i in checked.issues],
                    "yaml": text,
                    "graph": checked.graph,
                },
            )
        checked = check_text(edited, current.file)
        return ApiResponse(
            200,
            {
                "yaml": edited,
                "valid": checked.valid,
                "issues": [issue_json(i) for i in checked.issues],
                "graph": checked.graph,
            },
        )

    def _save(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        name = m["name"]
        current = self.store.get(name)
        base = if_match(request)
        text = required_string(body_object(request), "yaml")
        self._check_savable(text, current.file, name)
        saved = self.store.save(name, text, base)
        return _saved(200, saved.name, saved.version)

    def _create(self, request: ApiRequest, _m: re.Match[str]) -> ApiResponse:
        text = required_string(body_object(request), "yaml")
        checked = check_text(text, "new.yaml")
        if checked.pipeline is None:
            raise HttpError(
                422,
                "the new pipeline is not valid",
                issues=[issue_json(i) for i in checked.issues],
            )
        name = checked.pipeline.name
        if name in self.store.names():
            raise HttpError(409, f"a pipeline {name!r} exists already; open it instead")
        created = self.store.create(name, text)
        return _saved(201, created.name, created.version)

    def _history(self, _request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        entries = self.store.history(m["name"])
        return ApiResponse(200, {"versions": [asdict(e) for e in entries]})

    def _version(self, _request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        return ApiResponse(200, {"version": m["v"], "yaml": self._text_at(m["name"], m["v"])})

    def _diff(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        name = m["name"]
        current = self.store.get(name)
        old = request.query.get("from")
        if not old:
            raise HttpError(400, "say which version to compare: ?from=VERSION[&to=VERSION]")
        new = request.query.get("to") or current.version
        diff = unified_diff(
            self._text_at(name, old), self._text_at(name, new), f"{name}@{old}", f"{name}@{new}"
        )
        return ApiResponse(200, {"from": old, "to": new, "diff": diff})

    def _restore(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        name = m["name"]
        current = self.store.get(name)
        base = if_match(request)
        wanted = required_string(body_object(request), "version")
        text = self._text_at(name, wanted)
        self._check_savable(text, current.file, name)
        saved = self.store.save(name, text, base, source="restore")
        return _saved(200, saved.name, saved.version)

    def _text_at(self, name: str, version: str) -> str:
        text = self.store.text_at(name, version)
        if text is None:
            raise HttpError(404, f"pipeline {name} has no version {version} in its history")
        return text

    def _check_savable(self, text: str, file: str, name: str) -> None:
        """A file is saved only when ``stepcrawl validate`` would pass it, under its name."""
        checked = check_text(text, file)
        issues = list(checked.issues)
        if checked.pipeline is not None and checked.pipeline.name != name:
            issues.append(
                Issue(
                    ("name",),
                    f"the name changed to {checked.pipeline.name!r}: runs, schedules and "
                    f"history are kept under {name!r}",
                    f"keep `name: {name}`, or create a new pipeline with the new name",
                )
            )
        if issues:
            raise HttpError(
                422,
                f"not saved: {len(issues)} problem(s) to fix first",
                issues=[issue_json(i) for i in issues],
            )

    def _conflict(self, exc: ConflictError, request: ApiRequest) -> ApiResponse:
        current = exc.current
        base_text = self.store.text_at(current.name, exc.base)
        merged: str | None = None
        conflicts = False
        try:
            mine = required_string(body_object(request), "yaml")
        except HttpError:  # a restore: nothing of the user's own to merge
            mine = None
        if base_text is not None and mine is not None:
            merged, conflicts = merge(base_text, current.text, mine)
        diff = unified_diff(
            base_text or "",
            current.text,
            f"{current.name}@{exc.base}",
            f"{current.name}@{current.version}",
        )
        return ApiResponse(
            409,
            {
                "error": f"{exc}; merge your edit into it, or overwrite it",
                "current_version": current.version,
                "current_yaml": current.text,
                "base_version": exc.base,
                "diff": diff,
                "merged": merged,
                "merge_conflicts": conflicts,
            },
            {"ETag": f'"{current.version}"'},
        )

    def _deployed_versions(self) -> dict[str, str]:
        """Pipeline name -> the version of the file the stack was deployed from."""
        if self.deployed_dir is None or not self.deployed_dir.is_dir():
            return {}
        found = {}
        for path in sorted(self.deployed_dir.iterdir()):
            if path.is_file() and path.suffix.lower() in (".yaml", ".yml", ".json"):
                text = path.read_text(encoding="utf-8-sig")
                checked = check_text(text, path.name)
                if checked.pipeline is not None:
                    found[checked.pipeline.name] = version_of(text)
        return found

    # -- runs ----------------------------------------------------------------------------------

    def _prober_for(self) -> TopologyProbe:
        if self._prober is None:
            self._prober = TopologyProbe(self._deployment())
        return self._prober

    def _runs(self, request: ApiRequest, _m: re.Match[str]) -> ApiResponse:
        pipeline = request.query.get("pipeline") or None
        limit = query_int(request.query.get("limit"), 50, "limit", 1, _LIMIT_RUNS)
        return ApiResponse(200, {"runs": list_runs(self._deployment(), pipeline, limit)})

    def _start(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        body = body_object(request) if request.body else {}
        run = body.get("run") or None
        if run is not None and not isinstance(run, str):
            raise HttpError(400, "`run` must be a string (the run's id)")
        from stepcrawl.run_status import new_run_id  # noqa: PLC0415 - boto3, on first use

        run = run or new_run_id()
        arn = self._deployment().start(m["name"], run)
        return ApiResponse(201, {"run": run, "execution_arn": arn})

    def _cancel(self, _request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        before = self._deployment().cancel(m["run"], cause="cancelled from the console")
        return ApiResponse(200, {"run": m["run"], "before": before})

    def _redrive(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        from stepcrawl.crawl.context import DirectoryRegistry  # noqa: PLC0415
        from stepcrawl.crawl.failures import list_failures, redrive  # noqa: PLC0415

        body = body_object(request) if request.body else {}
        deployment = self._deployment()
        if self.deployed_dir is None:
            raise HttpError(409, "this console does not know the deployed pipeline files")
        services = deployment.crawl_services(DirectoryRegistry(self.deployed_dir))
        found = list_failures(
            services.table,
            m["run"],
            task=optional_string(body, "task"),
            cls=optional_string(body, "class"),
            host=optional_string(body, "host"),
        )
        moved = redrive(services, m["run"], found)
        return ApiResponse(200, {"run": m["run"], "moved": moved, "found": len(found)})

    def _topology(self, request: ApiRequest, m: re.Match[str]) -> ApiResponse:
        wanted = request.query.get("metrics")
        metrics = self.probe.include_metrics
        if wanted is not None:
            metrics = tuple(x for x in wanted.split(",") if x)
        return ApiResponse(200, self._prober_for().probe(m["run"], metrics=metrics))


def _saved(status: int, name: str, version: str) -> ApiResponse:
    return ApiResponse(status, {"name": name, "version": version}, {"ETag": f'"{version}"'})


def _schedule_text(schedule: Any) -> str | None:
    if isinstance(schedule, dict):
        return str(schedule.get("cron") or schedule.get("rate") or schedule)
    return None if schedule is None else str(schedule)
