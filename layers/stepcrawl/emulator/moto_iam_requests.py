"""How moto checks one request, mended where it differs from AWS for a call the stack makes.

moto checks a request's signature, then evaluates the caller's policies for its action, once
:func:`enforcing` is on. Each mend below is tested against AWS's documented behaviour in
``tests/integration/test_moto_iam.py``:

- **Signatures of empty requests.** moto hashed a request's parsed parameters (its query,
  even its headers) as the payload of a request without a body, so no ``GET`` of a REST API
  (Lambda's ``ListFunctions``) and no ``Invoke`` without a payload verified; SigV4 signs the
  empty string's hash for no payload.
- **Resources.** moto evaluates most services' requests against the resource ``*``, which no
  least-privilege statement (``Resource: arn:...:table/T``) matches: the stack's own grants
  would all be refused. Each request is evaluated against the resources AWS authorizes it on
  (:func:`_authorizations`): DynamoDB's table (or index) ARN, and for ``BatchGetItem`` /
  ``BatchWriteItem`` every table named; Step Functions' state machine or execution ARN (a task
  token's: its state machine's); Lambda's event-source mapping or function ARN (decoded,
  qualified, ``Invoke`` as ``lambda:InvokeFunction``); Secrets Manager's secret ARN; SQS's
  queue ARN also for ``GetQueueUrl``; X-Ray's sampling rule for ``UpdateSamplingRule``;
  SSM's parameter for ``GetParameter(s)`` (moto: ``*``).
- **Compressed bodies.** botocore gzips a large ``PutMetricData``; moto unzipped it before
  checking a signature made over the zipped bytes, so it refused the request.
- **Action names.** moto named an action by the service's signing name, and CloudWatch
  signs as ``monitoring``: ``monitoring:GetMetricStatistics`` is ``cloudwatch:...`` in IAM.
- **Wildcards.** IAM's ``?`` matches one character; moto left it to a regular expression,
  and ``secret:name-??????`` (CDK's grant of a secret) failed the request.
- **Batches.** SQS authorizes ``SendMessageBatch``, ``DeleteMessageBatch`` and
  ``ChangeMessageVisibilityBatch`` as ``SendMessage``, ``DeleteMessage`` and
  ``ChangeMessageVisibility`` (there are no IAM actions of the batch names); moto asked for
  the batch names, which no policy can grant.
- **Transactions.** DynamoDB authorizes ``TransactWriteItems`` / ``TransactGetItems`` item by
  item, as the underlying ``PutItem``, ``UpdateItem``, ``DeleteItem``, ``GetItem`` and
  ``dynamodb:ConditionCheckItem`` on each item's table ("Using IAM with DynamoDB
  transactions"); moto asks for an action ``dynamodb:TransactWriteItems`` that no policy
  grants.
- **Errors.** moto renders its authorization errors as XML whatever the protocol, which
  botocore cannot read from a JSON service (the code comes out as ``403``). They are
  answered as the JSON protocols do (``AccessDeniedException``,
  ``UnrecognizedClientException``, ``InvalidSignatureException``). A denial of a request
  whose resource is resolved here (and S3's, where moto said "Access Denied") names the
  caller, action and resource, as AWS's message does; moto's other denials name the caller
  and the action.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlparse

from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import AccessDeniedError as AccessDeniedError_
from moto.core.exceptions import (
    InvalidClientTokenIdError,
    JsonRESTError,
    SignatureDoesNotMatchError,
    _RESTError,
)
from moto.core.responses import BaseResponse
from moto.iam.access_control import IAMPolicyStatement, IAMRequest, IAMRequestBase, S3IAMRequest
from moto.s3.exceptions import S3AccessDeniedError, S3ClientError

__all__ = ["enforcing", "is_enforcing", "request_patches"]

_enforcement = threading.Lock()
_holders: list[tuple[float, int]] = []  # what each enforcing() entered over


@contextlib.contextmanager
def enforcing() -> Iterator[None]:
    """moto checks every request's signature and policies while this lasts, and not after
    (process-wide: moto's setting is a module global; nested or overlapping uses are
    counted, the last one out restores moto's own setting)."""
    with _enforcement:
        _holders.append(
            (settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count)
        )
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
    try:
        yield
    finally:
        with _enforcement:
            saved = _holders.pop()
            if not _holders:
                settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = (
                    saved
                )


def is_enforcing() -> bool:
    return ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT


# -- what a request is authorized on ---------------------------------------------------------

_Checks = list[tuple[str, str]]  # (action, resource ARN)


def _body(response: Any) -> dict[str, Any]:
    """A JSON request's parameters (DynamoDB's handler has replaced its body by them)."""
    body = response.body
    if isinstance(body, dict):
        return body
    try:
        parsed = json.loads(body or "{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _table_arn(response: Any, name: str) -> str:
    if name.startswith("arn:"):
        return name
    return f"arn:aws:dynamodb:{response.region}:{response.current_account}:table/{name}"


_TRANSACT_ACTIONS: Final = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(response: Any, action: str) -> _Checks | None:
    body = _body(response)
    if action in ("TransactWriteItems", "TransactGetItems"):
        checks = []
        for entry in body.get("TransactItems", []):
            for kind, operation in entry.items():
                if kind in _TRANSACT_ACTIONS and "TableName" in operation:
                    arn = _table_arn(response, operation["TableName"])
                    checks.append((_TRANSACT_ACTIONS[kind], arn))
        return list(dict.fromkeys(checks))
    if action in ("BatchGetItem", "BatchWriteItem"):
        return [(action, _table_arn(response, name)) for name in body.get("RequestItems", {})]
    if "TableName" not in body:
        return None
    arn = _table_arn(response, body["TableName"])
    if body.get("IndexName"):
        arn = f"{arn}/index/{body['IndexName']}"
    return [(action, arn)]


def _stepfunctions(response: Any, action: str) -> _Checks | None:
    body = _body(response)
    for field in ("executionArn", "stateMachineArn"):
        if body.get(field):
            return [(action, body[field])]
    if body.get("taskToken"):
        machine = _machine_of_token(response, body["taskToken"])
        return [] if machine is None else [(action, machine)]
    return None


def _machine_of_token(response: Any, token: str) -> str | None:
    """The state machine of the execution that issued ``token`` (running or not)."""
    from moto.stepfunctions.responses import get_backend  # noqa: PLC0415

    backend = get_backend(response.current_account, response.region)
    for machine in getattr(backend, "state_machines", []):
        for execution in machine.executions:
            worker = getattr(execution, "exec_worker", None)
            pool = getattr(getattr(worker, "env", None), "callback_pool_manager", None)
            if pool is not None and pool.get(token) is not None:
                return str(machine.arn)
    return None


#: Lambda API operations whose IAM action has another name (Service Authorization
#: Reference, "Actions defined by AWS Lambda").
_LAMBDA_ACTIONS: Final = {"Invoke": "InvokeFunction", "InvokeWithResponseStream": "InvokeFunction"}


def _lambda(response: Any, action: str) -> _Checks | None:
    parts = [unquote(p) for p in urlparse(response.uri).path.strip("/").split("/")]
    region, account = response.region, response.current_account
    action = _LAMBDA_ACTIONS.get(action, action)
    if len(parts) >= 3 and parts[1] == "event-source-mappings":
        return [(action, f"arn:aws:lambda:{region}:{account}:event-source-mapping:{parts[2]}")]
    if len(parts) >= 3 and parts[1] == "functions":
        qualifier = parse_qs(urlparse(response.uri).query).get("Qualifier", [""])[0]
        return [(action, _function_arn(parts[2], qualifier, region, account))]
    return None


def _function_arn(name: str, qualifier: str, region: str, account: str) -> str:
    """The ARN a function is authorized on, from any form ``FunctionName`` takes (a name,
    ``name:alias``, ``account:function:name``, a full ARN), qualified as requested."""
    if name.startswith("arn:"):
        arn = name
    elif ":function:" in name:
        arn = f"arn:aws:lambda:{region}:{name}"
    else:
        arn = f"arn:aws:lambda:{region}:{account}:function:{name}"
    if qualifier and arn.count(":") == 6:
        arn = f"{arn}:{qualifier}"
    return arn


def _secretsmanager(response: Any, action: str) -> _Checks | None:
    from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

    secret_id = _body(response).get("SecretId")
    if not secret_id:
        return None
    store = secretsmanager_backends[response.current_account][response.region].secrets
    try:  # moto's store is a dict other requests change meanwhile
        if secret_id in store:
            return [(action, str(store[secret_id].arn))]
    except (KeyError, RuntimeError):
        pass
    return [
        (
            action,
            f"arn:aws:secretsmanager:{response.region}:{response.current_account}:secret:{secret_id}",
        )
    ]


def _sqs(response: Any, action: str) -> _Checks | None:
    if action == "GetQueueUrl":
        name = response._get_param("QueueName")
        arn = f"arn:aws:sqs:{response.region}:{response.current_account}:{name}"
        return [(action, arn)] if name else None
    if action in _SQS_BATCHES:
        # "The permissions for a batch action are those of the single one" (SQS API
        # reference, e.g. DeleteMessageBatch); moto asks for sqs:DeleteMessageBatch.
        return [(_SQS_BATCHES[action], response._determine_resource())]
    return None


_SQS_BATCHES: Final = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _xray(response: Any, action: str) -> _Checks | None:
    rule = (_body(response).get("SamplingRuleUpdate") or {}).get("RuleName")
    if action != "UpdateSamplingRule" or not rule:
        return None
    return [
        (action, f"arn:aws:xray:{response.region}:{response.current_account}:sampling-rule/{rule}")
    ]


def _ssm(response: Any, action: str) -> _Checks | None:
    body = _body(response)
    names = body.get("Names") or ([body["Name"]] if body.get("Name") else [])
    if action not in ("GetParameter", "GetParameters") or not names:
        return None
    prefix = f"arn:aws:ssm:{response.region}:{response.current_account}:parameter/"
    return [(action, n if n.startswith("arn:") else prefix + n.lstrip("/")) for n in names]


def _sns(response: Any, action: str) -> _Checks | None:
    # Publish is authorized on the topic it names (Service Authorization Reference, "Actions
    # defined by Amazon SNS": Publish, resource type topic); moto asked for "*".
    if action != "Publish":
        return None
    topic = response._get_param("TopicArn") or response._get_param("TargetArn")
    return [(action, topic)] if topic else None


_SERVICES: Final[dict[str, Callable[[Any, str], _Checks | None]]] = {
    "dynamodb": _dynamodb,
    "stepfunctions": _stepfunctions,
    "awslambda": _lambda,
    "secretsmanager": _secretsmanager,
    "sqs": _sqs,
    "xray": _xray,
    "ssm": _ssm,
    "sns": _sns,
}


def _authorizations(response: Any) -> _Checks | None:
    """(action, resource) pairs AWS authorizes the request on; ``None``: as moto does."""
    service = _SERVICES.get(getattr(response, "service_name", ""))
    return None if service is None else service(response, response._get_action())


def _authorize_as_aws(original: Callable[..., None]) -> Callable[..., None]:
    def authorize(self: Any, resource: str = "*") -> None:
        if not is_enforcing():
            original(self, resource)
            return
        received = self.raw_body
        # The signature covers the body as sent: a gzipped one before moto unzipped it.
        self.raw_body = getattr(self, _SENT_BODY, None) or received
        try:
            checks = _authorizations(self)
            if checks is None:
                original(self, resource)
            else:
                _check(self, checks)
        except (AccessDeniedError_, InvalidClientTokenIdError, SignatureDoesNotMatchError) as error:
            if not _json_protocol(self):
                raise
            raise _as_json(self, error) from None
        finally:
            self.raw_body = received

    return authorize


_SENT_BODY: Final = "_stepcrawl_sent_body"


def _sent_body_kept(original: Callable[..., None]) -> Callable[..., None]:
    """moto unzips a gzipped request body (botocore compresses ``PutMetricData`` over 10 KB)
    before anything else; the signature is over the zipped bytes, kept here for the check."""

    def decompress_request_body(self: Any, request: Any) -> None:
        if request.content_encoding == "gzip" and self.allow_request_decompression:
            sent = request.stream.read()
            request.stream = io.BytesIO(sent)
            setattr(self, _SENT_BODY, sent)
        original(self, request)

    return decompress_request_body


def _check(response: Any, checks: _Checks) -> None:
    """moto's check (signature, then policies), on each (action, resource) AWS checks."""
    if response.headers.get("X-Amz-Target") in ActionAuthenticatorMixin.PUBLIC_OPERATIONS:
        return
    parsed = urlparse(response.uri)
    path = response.raw_path + (f"?{parsed.query}" if parsed.query else "")
    signed = False
    for action, arn in checks or [(response._get_action(), "*")]:
        request = IAMRequest(
            account_id=response.current_account,
            method=response.method,
            path=path,
            data=response.data,
            body=response.raw_body,
            headers=response.headers,
            action=action,
        )
        if not signed:
            request.check_signature()
            signed = True
        if not checks:
            return  # a token of no known execution: the service answers InvalidToken
        try:
            request.check_action_permitted(arn)
        except AccessDeniedError_:
            raise _DeniedError(_denial(request, arn)) from None


def _denial(request: Any, resource: str) -> str:
    """AWS's message for a request no identity policy allows: it names the caller, the action
    and the resource (IAM user guide, "Access denied error messages")."""
    user, action = request._access_key.arn, request._action
    return (
        f"User: {user} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )


class _DeniedError(AccessDeniedError_):
    def __init__(self, message: str) -> None:
        _RESTError.__init__(self, "AccessDenied", message)


def _json_protocol(response: Any) -> bool:
    if getattr(response, "service_name", "") == "awslambda":
        return True  # REST-JSON, even a GET without a content type
    return "json" in str(response.headers.get("Content-Type", ""))


#: A JSON service's answer to each of moto's authorization errors (type, HTTP status): the
#: AWS JSON protocols answer in JSON, where moto renders its XML body.
_JSON_ERRORS: Final = {
    "AccessDenied": "AccessDeniedException",
    "InvalidClientTokenId": "UnrecognizedClientException",
    "SignatureDoesNotMatch": "InvalidSignatureException",
}


def _as_json(response: Any, error: _RESTError) -> JsonRESTError:
    translated = JsonRESTError(_JSON_ERRORS[error.error_type], error.message)
    # Lambda answers 403; DynamoDB, Step Functions, Secrets Manager and SQS answer 400.
    translated.code = 403 if getattr(response, "service_name", "") == "awslambda" else 400
    return translated


def _signed_payload(original: Callable[..., Any]) -> Callable[..., Any]:
    """SigV4 signs the hash of the request's payload, the empty string's for an empty one
    ("Create a canonical request", HashedPayload). moto hashed its parsed parameters in place
    of an empty body, so no GET of a REST API (Lambda's ``ListFunctions``...) verified."""

    def create_aws_request(self: Any) -> Any:
        request = original(self)
        # A form POST's body reaches moto parsed (its ``data``), which it rightly signs; any
        # other request without a body has an empty payload (its parameters are in the URL).
        content_type = str(self._headers.get("Content-Type", ""))
        if not self._body and "x-www-form-urlencoded" not in content_type:
            request.data = b""
        return request

    return create_aws_request


class _S3DeniedError(S3AccessDeniedError):
    def __init__(self, message: str) -> None:
        S3ClientError.__init__(self, "AccessDenied", message)


def _s3_denial_named(original: Callable[..., None]) -> Callable[..., None]:
    """S3 names the caller, action and resource of a denial by an identity policy of its own
    account ("Access denied error messages"); moto answered "Access Denied"."""

    def check_action_permitted(self: Any, resource: str) -> None:
        try:
            original(self, resource)
        except S3AccessDeniedError:
            raise _S3DeniedError(_denial(self, f'"{resource}"')) from None

    return check_action_permitted


#: Services whose signing name is not their IAM prefix ("Actions, resources, and condition
#: keys": CloudWatch signs as ``monitoring``, its actions are ``cloudwatch:*``).
_IAM_PREFIXES: Final = {"monitoring": "cloudwatch"}


def _iam_prefixed(original: Callable[..., None]) -> Callable[..., None]:
    """moto named an action by the request's signing name: ``monitoring:GetMetricStatistics``,
    which no policy grants."""

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        prefix, _, name = self._action.partition(":")
        if prefix in _IAM_PREFIXES:
            self._action = f"{_IAM_PREFIXES[prefix]}:{name}"

    return init


def _wildcard_match(pattern: str, value: str) -> re.Match[str] | None:
    """IAM's wildcards: ``*`` any run of characters, ``?`` any one ("IAM JSON policy
    elements: Resource"), the rest literal. moto turned ``*`` into ``.*`` and left the rest
    a regular expression: ``secret:name-??????`` (how CDK grants a secret, whose ARN ends in
    six random characters) raised ``re.error`` out of the request."""
    return _wildcard(pattern).fullmatch(value)


@functools.lru_cache(maxsize=4096)
def _wildcard(pattern: str) -> re.Pattern[str]:
    # Compiled once per pattern: every request matches each statement of the caller's
    # policies (tens of patterns), so building them per call cost more than the request.
    expression = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(expression, flags=re.DOTALL)


def request_patches() -> list[tuple[object, str, Any]]:
    """The mends above, as (owner, attribute, value)."""
    return [
        (
            ActionAuthenticatorMixin,
            "_authenticate_and_authorize_normal_action",
            _authorize_as_aws(ActionAuthenticatorMixin._authenticate_and_authorize_normal_action),
        ),
        (IAMPolicyStatement, "_match", staticmethod(_wildcard_match)),
        (IAMRequestBase, "__init__", _iam_prefixed(IAMRequestBase.__init__)),
        (
            BaseResponse,
            "decompress_request_body",
            _sent_body_kept(BaseResponse.decompress_request_body),
        ),
        (
            S3IAMRequest,
            "check_action_permitted",
            _s3_denial_named(S3IAMRequest.check_action_permitted),
        ),
        (
            IAMRequestBase,
            "_create_aws_request",
            _signed_payload(IAMRequestBase._create_aws_request),
        ),
    ]
