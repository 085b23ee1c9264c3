"""The console API on AWS: API Gateway HTTP API (payload 2.0) events in, responses out.

Authentication happens before the event arrives (the route's JWT authorizer, a Cognito user
pool); this adapter only translates. The pipelines are the deployed files in the Lambda
layer (``STEPCRAWL_PIPELINES_DIR``), shown read-only: the deployment comes from git through
``cdk deploy``, so an edit is downloaded, committed and deployed, never written here.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from stepcrawl.console.api import ApiRequest, ConsoleApi
from stepcrawl.console.store import ReadOnlyStore
from stepcrawl.crawl.context import CrawlConfig
from stepcrawl.environment import ConsoleEnvironment

__all__ = ["api_from_env", "handle", "request_of", "response_of"]


def api_from_env(environ: Mapping[str, str] | None = None) -> ConsoleApi:
    """The API over the function's stage and its layer's pipeline files."""
    from stepcrawl.deployment import Deployment  # noqa: PLC0415 - boto3, on first use

    env = ConsoleEnvironment.read(environ)
    stage, directory = env.stage, env.pipelines_dir
    deployment: list[Deployment] = []

    def deployed() -> Deployment:
        if not deployment:  # once per container: it reads the stack's outputs
            # The engine's settings are in this function's environment, as in the workers'.
            deployment.append(Deployment(stage, config=CrawlConfig.from_env(env.variables())))
        return deployment[0]

    return ConsoleApi(
        ReadOnlyStore(directory),
        deployed,
        mode="aws",
        stage=stage,
        deployed_dir=Path(directory),
    )


def request_of(event: Mapping[str, Any]) -> ApiRequest:
    http = event.get("requestContext", {}).get("http", {})
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else str(body).encode()
    return ApiRequest(
        method=str(http.get("method", "GET")).upper(),
        path=str(event.get("rawPath") or http.get("path") or "/"),
        query=dict(parse_qsl(str(event.get("rawQueryString") or ""))),
        headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
        body=raw,
    )


def response_of(status: int, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {
            "content-type": "application/json; charset=utf-8",
            "cache-control": "no-store",
            **{k.lower(): v for k, v in headers.items()},
        },
        "body": body.decode("utf-8"),
        "isBase64Encoded": False,
    }


def handle(event: Mapping[str, Any], api: ConsoleApi) -> dict[str, Any]:
    """Answer one HTTP API event with ``api`` (the console function's whole job)."""
    response = api.handle(request_of(event))
    return response_of(response.status, response.encode(), response.headers)
