"""IAM enforced in the local cloud as on AWS: every request signed by its caller's own
credentials and allowed, action by action and resource by resource, by the caller's policies.

moto (5.2) can enforce IAM. Past ``settings.INITIAL_NO_AUTH_ACTION_COUNT`` requests it checks
each request's SigV4 signature against the keys it issued (IAM users' access keys, STS
sessions) and evaluates the caller's identity policies for the request's action. Local mode
uses that machinery as it is (:func:`enforcing`), with the identities AWS would use:

- the CLI, the runtime's own reads and the tests: an administrator (:func:`admin_identity`);
- each container of a function: its own session of the function's execution role, assumed
  as it starts (:func:`role_identity`, as Lambda gives each execution environment one); the
  function's event-source mapping polls with a session of the same role;
- the state machines' service integrations: a session of the state machine's role;
- the schedules: a session of each schedule's role (EventBridge Scheduler assumes it).

Where moto's check differs from AWS's for a call the stack makes, it is mended in one place
(:mod:`stepcrawl.emulator.moto_iam_requests`, assembled by :func:`iam_patches`), and Step
Functions' integrations, which call services with a fixed key moto issued to no one, sign
with a session of the execution's role. (A state's own ``Credentials`` role is assumed here
as ``states.amazonaws.com`` trusts it; on AWS the execution role assumes it, which needs its
trust of that role and ``sts:AssumeRole`` on it: not checked. The stack uses none.)

Not checked, and said so in docs/local.md: condition keys (moto evaluates only a few, for
``AssumeRole`` trust), resource-based policies (bucket, queue, key policies; Lambda's
``AddPermission``), permission boundaries and SCPs, and session expiry (moto never expires an
STS session; each container is given its own session as it starts, as on Lambda).
"""

from __future__ import annotations

import fnmatch
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from moto import settings
from moto.iam.models import iam_backends
from moto.sts.models import sts_backends

from stepcrawl.emulator.moto_iam_requests import enforcing, is_enforcing, request_patches

__all__ = [
    "ADMIN_USER",
    "AccessDeniedError",
    "Identity",
    "TrustError",
    "admin_identity",
    "enforcing",
    "iam_patches",
    "is_enforcing",
    "is_permitted",
    "role_identity",
]

ADMIN_USER: Final = "stepcrawl-local-admin"
_PARTITION: Final = "aws"
_ADMIN_POLICY: Final = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
)
#: How long a role session is asked for (Lambda's are refreshed; moto never expires them).
_SESSION_SECONDS: Final = 43_200


@dataclass(frozen=True)
class Identity:
    """Credentials moto issued: an IAM user's access key, or an STS session."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    arn: str = ""

    def environment(self) -> dict[str, str]:
        """The variables a process (a container, a shell) reads them from."""
        variables = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }
        if self.session_token:
            variables["AWS_SESSION_TOKEN"] = self.session_token
        return variables

    def client_arguments(self) -> dict[str, str]:
        """boto3 ``client(...)`` keyword arguments: the variables' names in lower case."""
        return {name.lower(): value for name, value in self.environment().items()}


def admin_identity(account: str) -> Identity:
    """An access key of the local administrator (``Action: *`` on ``*``), made if needed."""
    backend = iam_backends[account][_PARTITION]
    if ADMIN_USER not in backend.users:
        backend.create_user(region_name="us-east-1", user_name=ADMIN_USER)
        backend.put_user_policy(ADMIN_USER, "administrator", _ADMIN_POLICY)
    user = backend.users[ADMIN_USER]
    for old in list(user.access_keys)[:-1]:  # IAM allows two keys a user: keep the newest
        backend.delete_access_key(old.access_key_id, ADMIN_USER)
    key = backend.create_access_key(ADMIN_USER)
    return Identity(key.access_key_id, key.secret_access_key, None, user.arn)


class AccessDeniedError(Exception):
    """A delivery the caller's policies do not allow (AWS: ``AccessDeniedException``)."""


def is_permitted(account: str, identity: Identity, action: str, resource: str) -> bool:
    """Whether ``identity``'s policies allow ``action`` on ``resource``, by moto's own
    evaluation (an explicit deny wins; no allow, no access): for deliveries local mode makes
    without a request of its own, such as a schedule invoking a function."""
    from moto.iam.access_control import (  # noqa: PLC0415
        AssumedRoleAccessKey,
        IAMPolicy,
        IAMUserAccessKey,
        PermissionResult,
    )

    key: Any = (
        AssumedRoleAccessKey(
            account,
            _PARTITION,
            identity.access_key_id,
            {"X-Amz-Security-Token": identity.session_token},
        )
        if identity.session_token
        else IAMUserAccessKey(account, _PARTITION, identity.access_key_id, {})
    )
    results = [IAMPolicy(p).is_action_permitted(action, resource) for p in key.collect_policies()]
    return PermissionResult.DENIED not in results and PermissionResult.PERMITTED in results


class TrustError(Exception):
    """A role whose trust policy does not let the service assume it."""


def role_identity(account: str, role_arn: str, service: str, session: str) -> Identity:
    """A session of ``role_arn`` as ``service`` (``lambda.amazonaws.com``...) assumes it.

    AWS refuses a function, state machine or schedule whose role does not trust its
    service; so does this (:class:`TrustError`)."""
    role = iam_backends[account][_PARTITION].get_role_by_arn(role_arn)
    if not _trusts(role.assume_role_policy_document, service):
        raise TrustError(f"role {role_arn} does not trust {service} to assume it (sts:AssumeRole)")
    assumed = sts_backends[account][_PARTITION].assume_role(
        region_name="us-east-1",
        role_session_name=session[:64],
        role_arn=role_arn,
        policy="",
        duration=_SESSION_SECONDS,
        external_id="",
    )
    return Identity(
        assumed.access_key_id, assumed.secret_access_key, assumed.session_token, assumed.arn
    )


def _trusts(document: Any, service: str) -> bool:
    """Whether the trust policy allows ``service`` ``sts:AssumeRole`` (IAM's wildcards on
    the action; a principal of ``*`` trusts every service)."""
    policy = json.loads(document) if isinstance(document, str) else document
    statements = policy.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        principal = statement.get("Principal", {})
        services = principal.get("Service", []) if isinstance(principal, dict) else principal
        services = [services] if isinstance(services, str) else services
        if (
            statement.get("Effect") == "Allow"
            and any(fnmatch.fnmatchcase("sts:AssumeRole", a) for a in actions)
            and (service in services or "*" in services)
        ):
            return True
    return False


def _signed_integrations(original: Callable[..., Any]) -> Callable[..., Any]:
    """moto's ``boto_client_for`` (the client a service integration calls with), signing with
    a session of the execution's role instead of moto's fixed key."""
    sessions: dict[str, Identity] = {}
    lock = threading.Lock()

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        role = getattr(state_credentials, "role_arn", None)
        if not role or not is_enforcing():
            return original(region, service, state_credentials)
        account = role.split(":")[4]
        with lock:
            identity = sessions.get(role)
            if identity is None or not _session_exists(account, identity):
                # A session of an emulator since reset is one STS no longer knows.
                identity = sessions[role] = role_identity(
                    account, role, "states.amazonaws.com", "stepcrawl-execution"
                )
        return _integration_client(region, service, identity)

    return boto_client_for


def _session_exists(account: str, identity: Identity) -> bool:
    backend = sts_backends[account][_PARTITION]
    return backend.get_assumed_role_from_access_key(identity.access_key_id) is not None


def _integration_client(region: str, service: str, identity: Identity) -> Any:
    """What moto's ``boto_client_for`` makes (same endpoint, retries and timeouts), signed by
    ``identity``."""
    import boto3  # noqa: PLC0415 - the emulator's side
    from botocore.config import Config  # noqa: PLC0415
    from moto.core.models import botocore_stubber  # noqa: PLC0415
    from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import (  # noqa: PLC0415
        TimeoutSeconds,
    )

    endpoint = (
        {}
        if botocore_stubber.enabled
        else {"endpoint_url": f"http://localhost:{settings.moto_server_port()}"}
    )
    return boto3.client(  # type: ignore[call-overload]
        service,
        region_name=region,
        config=Config(
            parameter_validation=False,
            retries={"max_attempts": 0, "total_max_attempts": 1},
            connect_timeout=TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS,
            read_timeout=TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS,
        ),
        **endpoint,
        **identity.client_arguments(),
    )


def iam_patches() -> list[tuple[object, str, Any]]:
    """Every IAM mend, as (owner, attribute, value) for :func:`apply_moto_patches`."""
    from moto.stepfunctions.parser.asl.utils import boto_client  # noqa: PLC0415

    original = boto_client.boto_client_for
    signed = _signed_integrations(original)
    patches: list[tuple[object, str, Any]] = [
        *request_patches(),
        (boto_client, "boto_client_for", signed),
    ]
    # A module imported after this binds the patched function; one imported before has its
    # own binding of moto's, replaced here.
    for module_name, module in list(sys.modules.items()):
        if (
            module_name.startswith("moto.stepfunctions.")
            and getattr(module, "boto_client_for", None) is original
        ):
            patches.append((module, "boto_client_for", signed))
    return patches
