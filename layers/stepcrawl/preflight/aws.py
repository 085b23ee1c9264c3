"""The checks' one way to AWS (an adapter, in the layering test's allowlist).

:class:`AwsAccount` holds a session's clients; :meth:`AwsAccount.ask` returns a call's
response, or a :class:`~stepcrawl.preflight.model.Refusal` saying why there was none and
which IAM action the call needed (read from the service's model, so it is the exact name a
policy takes). No botocore exception leaves this module: a check reads the refusal's kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOError,
    StubResponseError,
    TokenRetrievalError,
    UnknownEndpointError,
)

from stepcrawl.errors import ConfigError
from stepcrawl.preflight.model import Refusal, RefusalKind

__all__ = ["AwsAccount", "Reply", "refusal_of"]

Reply = dict[str, Any]

#: A preflight should answer in seconds: one retry, short timeouts (a region without the
#: service fails its DNS lookup at once anyway).
_CONFIG: Final = Config(
    retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=5, read_timeout=20
)
_DENIED: Final = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}
)
#: Codes of credentials AWS does not accept (unknown, expired): no call will work.
_BAD_CREDENTIALS: Final = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
    }
)
_MISSING: Final = frozenset(
    {"ParameterNotFound", "ResourceNotFoundException", "RepositoryNotFoundException"}
)
#: What an endpoint answers to an operation it does not implement (moto answers a bare 404).
_UNSUPPORTED: Final = frozenset(
    {"404", "UnknownOperationException", "InvalidAction", "NotImplemented"}
)
_CREDENTIAL_ERRORS: Final = (
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
    SSOError,  # an expired or missing SSO login
    TokenRetrievalError,
)


def permission_of(client: Any, method: str) -> str:
    """The IAM action of ``client.method`` (``ssm:GetParameter``)."""
    service = client.meta.service_model.signing_name
    return f"{service}:{client.meta.method_to_api_mapping.get(method, method)}"


def refusal_of(error: ClientError, permission: str) -> Refusal:
    """What an AWS error answer means to a check."""
    details = error.response.get("Error", {})
    code = str(details.get("Code", ""))
    message = str(details.get("Message", "")).strip()
    if code in _DENIED:
        kind = RefusalKind.denied
    elif code in _BAD_CREDENTIALS:
        kind = RefusalKind.credentials
    elif code in _MISSING or (code == "ValidationError" and "does not exist" in message):
        kind = RefusalKind.missing  # CloudFormation says "Stack with id X does not exist"
    elif code in _UNSUPPORTED:
        kind = RefusalKind.unsupported
        message = "not implemented by this endpoint"  # moto's 404 body is an HTML page
    else:
        kind = RefusalKind.failed
    return Refusal(kind, permission, code, message)


class AwsAccount:
    """The clients of one session (one account and region), made when first asked for."""

    def __init__(self, region: str, make_client: Callable[[str], Any]) -> None:
        self.region = region
        self._make_client = make_client
        self._clients: dict[str, Any] = {}

    @classmethod
    def from_session(
        cls, *, profile: str | None, region: str | None, endpoint_url: str | None
    ) -> AwsAccount:
        """The account of ``profile`` (or the default credentials) in ``region`` (or the
        profile's); :class:`ConfigError` for an unknown profile or no region at all."""
        try:
            session = boto3.Session(profile_name=profile, region_name=region)
        except ProfileNotFound as unknown:
            raise ConfigError(f"{unknown} (see aws configure list-profiles)") from None
        if not session.region_name:
            raise ConfigError(
                "no region: pass --region, or set one for the profile (aws configure) or in "
                "AWS_REGION"
            )

        def make_client(service: str) -> Any:
            return session.client(  # type: ignore[call-overload]
                service, endpoint_url=endpoint_url, config=_CONFIG
            )

        return cls(session.region_name, make_client)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._make_client(service)
        return self._clients[service]

    def ask(self, service: str, method: str, /, **request: Any) -> Reply | Refusal:
        """``service.method(**request)``'s response, or why there is none."""
        client = self.client(service)
        permission = permission_of(client, method)
        try:
            reply: Reply = getattr(client, method)(**request)
        except ClientError as error:
            return refusal_of(error, permission)
        except (EndpointConnectionError, UnknownEndpointError) as error:
            return Refusal(RefusalKind.unreachable, permission, "", str(error))
        except _CREDENTIAL_ERRORS as error:
            return Refusal(RefusalKind.credentials, permission, "", str(error))
        except BotoCoreError as error:
            # A test's stub without an answer, or a malformed request, is a bug: let it show.
            if isinstance(error, StubResponseError | ParamValidationError):
                raise
            return Refusal(RefusalKind.failed, permission, type(error).__name__, str(error))
        return reply
