"""The emulator's own process talks to moto without HTTP.

Local mode runs the functions in the process that also runs moto's server, so every AWS call
they make went through botocore's HTTP client, a socket, werkzeug and back, only to reach
backends living in this very process. A py-spy profile of a crawl put a large share of the
time there (docs/performance.md, "Local mode against Scrapy"). Here a request sent to a live
emulator's endpoint by any botocore client of this process (the functions', the runtime's,
the deployment's, moto's own Step Functions interpreter's) is handed to moto's request
handler directly, as moto's ``mock_aws`` does, while the server keeps serving the aws CLI
and other processes from the same backends.

What a handler sees is what the server would give it: the same URL (the emulator's, so
queue URLs and the like read the same), the same headers and body, the same routing (moto's
own, from the service the request is signed for), the same errors (a ``ClientError`` is a
400, an unexpected exception a 500, as the server answers). A request this cannot place (an
unsigned one, a service the stack does not use) still goes over HTTP.

Unlike ``mock_aws``, nothing here is global beyond those endpoints: clients aimed anywhere
else (AWS itself, another server) are untouched, and credentials are not replaced.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.endpoint import Endpoint
from botocore.exceptions import ClientError
from werkzeug.exceptions import HTTPException, InternalServerError

__all__ = ["dispatch", "serve_in_process", "stop_serving_in_process"]

_Handler = Callable[[Any, str, Any], Any]

#: Signing names of the services local mode calls (its tests exercise each in-process). DynamoDB
#: Streams and S3 Control share a signing name with their service: they are told apart below
#: and left to the server, like every other service.
_SERVICES = frozenset({"cloudformation", "dynamodb", "lambda", "monitoring", "s3", "sqs", "states"})


class _Served:
    """The URL prefixes (``http://127.0.0.1:PORT/``) of the emulators served in-process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prefixes: tuple[str, ...] = ()


_served = _Served()
#: botocore's own send (``Endpoint._send``: the HTTP request), for every other URL.
_HTTP_SEND: Callable[[Endpoint, AWSPreparedRequest], Any] = getattr(Endpoint, "_send")  # noqa: B009


def _prefixes(port: int) -> set[str]:
    # moto's Step Functions interpreter reaches the server as localhost (MOTO_PORT).
    return {f"http://127.0.0.1:{port}/", f"http://localhost:{port}/"}


def serve_in_process(port: int) -> None:
    """Serve this process's requests to the emulator on ``port`` in-process, until
    :func:`stop_serving_in_process`."""
    with _served.lock:
        _served.prefixes = tuple(set(_served.prefixes) | _prefixes(port))
        setattr(Endpoint, "_send", _send)  # noqa: B010 - botocore's stubs omit it


def stop_serving_in_process(port: int) -> None:
    with _served.lock:
        _served.prefixes = tuple(set(_served.prefixes) - _prefixes(port))
        if not _served.prefixes:
            setattr(Endpoint, "_send", _HTTP_SEND)  # noqa: B010


def _send(self: Endpoint, request: AWSPreparedRequest) -> Any:
    if (request.url or "").startswith(_served.prefixes):
        response = dispatch(request)
        if response is not None:
            return response
    return _HTTP_SEND(self, request)


def dispatch(request: AWSPreparedRequest) -> AWSResponse | None:
    """Moto's answer to a botocore request, handled in this process as its server would
    handle it; ``None`` for a request it cannot place (unsigned, a service not played)."""
    from moto.core.botocore_stubber import MockRawResponse  # noqa: PLC0415 - local mode only
    from moto.core.request import normalize_request  # noqa: PLC0415
    from moto.moto_api import recorder  # noqa: PLC0415

    host = _aws_host(request)
    if host is None:
        return None
    handler = _route(host, _path(request.url or ""))
    if handler is None:
        return None
    normalized = normalize_request(request)
    try:
        # As the server's Flask view does (moto.core.utils.convert_to_flask_response).
        recorder._record_request(normalized)
        result = handler(normalized, normalized.raw_url, dict(normalized.headers))
    except ClientError as exc:
        result = 400, {}, exc.response["Error"]["Message"]
    except HTTPException as exc:  # moto's service errors; werkzeug renders them so
        result = exc.code, dict(exc.get_headers()), exc.get_body()
    except Exception:  # noqa: BLE001 - the server answers 500 to whatever escapes a handler
        error = InternalServerError()
        result = error.code, dict(error.get_headers()), error.get_body()
    status, headers, body = result if len(result) == 3 else (200, {}, result)
    return AWSResponse(request.url, status, headers, MockRawResponse(body))


def _aws_host(request: AWSPreparedRequest) -> str | None:
    """The AWS host the request would have gone to, from its SigV4 credential scope (as
    moto's server infers it, ``DomainDispatcherApplication.infer_service_region_host``)."""
    auth = request.headers.get("Authorization")
    if isinstance(auth, bytes):
        auth = auth.decode()
    if not auth or not auth.startswith("AWS4-"):
        return None
    try:
        _, _, region, service, _ = auth.split(",")[0].split()[1].split("/")
    except (IndexError, ValueError):
        return None
    if service not in _SERVICES:
        return None
    target = request.headers.get("X-Amz-Target") or ""
    if isinstance(target, bytes):
        target = target.decode()
    if service == "dynamodb" and target.startswith("DynamoDBStreams"):
        return None
    if service == "s3" and _path(request.url or "").startswith("/v20180820/"):
        return None  # S3 Control
    return f"{service}.{region}.amazonaws.com"


def _path(url: str) -> str:
    after_scheme = url.split("://", 1)[-1]
    slash = after_scheme.find("/")
    return "/" if slash < 0 else after_scheme[slash:].split("?", 1)[0]


def _route(host: str, path: str) -> _Handler | None:
    """moto's own in-process routing (``BotocoreStubber.process_request``): the URL the
    request would have had on AWS, matched against its backend's URL patterns."""
    url = f"https://{host}{path}"
    for pattern, handler in _backend_urls(host):
        if pattern.match(url):
            return handler
    return None


@cache
def _backend_urls(host: str) -> tuple[tuple[re.Pattern[str], _Handler], ...]:
    from moto import backend_index, backends  # noqa: PLC0415
    from moto.core.base_backend import BackendDict  # noqa: PLC0415
    from moto.core.models import DEFAULT_ACCOUNT_ID  # noqa: PLC0415

    service = next(
        (
            name
            for name, pattern in backend_index.backend_url_patterns
            if pattern.match(f"https://{host}")
        ),
        None,
    )
    if service is None:
        return ()
    # As moto does: one backend instance, for its URL table only (the handlers pick the
    # account and region of each request themselves).
    backend_dict = backends.get_backend(service)  # type: ignore[call-overload]
    if isinstance(backend_dict, BackendDict):
        regions = backend_dict[DEFAULT_ACCOUNT_ID]
        backend = regions["us-east-1"] if "us-east-1" in regions else regions["aws"]
    else:
        backend = backend_dict["global"]
    return tuple((re.compile(url), handler) for url, handler in backend.urls.items())
