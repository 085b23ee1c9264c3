"""CloudFormation's intrinsic functions, resolved locally: the one reader of template values.

Local mode plays what moto's CloudFormation does not (alarms, schedules, a state machine's
``DefinitionSubstitutions``, the code assets' bucket), so it reads property values that are
intrinsic functions. :class:`TemplateResolver` resolves them as CloudFormation would, against
what the emulator deployed (logical id -> physical id, from ``DescribeStackResources``):

* ``Ref``: a resource's physical id; for a resource local mode plays itself (alarms,
  schedules and their groups, which moto never creates) the name its template gives it, the
  logical id standing in for a name CloudFormation would generate; a parameter's
  ``Default``; the pseudo parameters ``AWS::AccountId``, ``AWS::Region``, ``AWS::Partition``,
  ``AWS::URLSuffix`` and ``AWS::StackName``.
* ``Fn::GetAtt`` (``[id, attribute]`` or ``"id.attribute"``): ``Arn`` (the physical id when it
  is an ARN, else built from it for the types whose ``Ref`` is a name or URL), a queue's
  ``QueueName``/``QueueUrl``, a topic's ``TopicArn``/``TopicName``, a state machine's
  ``Name``.
* ``Fn::Join`` and ``Fn::Sub`` (a string, or ``[string, variables]``; ``${!x}`` is the
  literal ``${x}``).

Anything else raises :class:`UnresolvableError`, naming the value, rather than guessing. And
:func:`referent` / :func:`references` say which resources a value points at without
resolving it (what a dropped resource leaves dangling, what a schedule targets).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from stepcrawl.errors import ConfigError

__all__ = ["PLAYED_LOCALLY", "TemplateResolver", "UnresolvableError", "references", "referent"]

#: Types moto never creates, that local mode plays from the template, with the property
#: holding the name their ``Ref`` returns.
PLAYED_LOCALLY: Final[Mapping[str, str]] = {
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::CompositeAlarm": "AlarmName",
    "AWS::Scheduler::Schedule": "Name",
    "AWS::Scheduler::ScheduleGroup": "Name",
}
#: Types whose ``Ref`` is a name (or, for a queue, a URL ending in it), with the ARN built
#: from that name: (service, resource part; ``{}`` is the name). Per each type's
#: "Return values" in the CloudFormation resource reference.
_ARNS: Final[Mapping[str, tuple[str, str]]] = {
    "AWS::Lambda::Function": ("lambda", "function:{}"),
    "AWS::SQS::Queue": ("sqs", "{}"),
    "AWS::DynamoDB::Table": ("dynamodb", "table/{}"),
    "AWS::Logs::LogGroup": ("logs", "log-group:{}:*"),
    "AWS::KMS::Key": ("kms", "key/{}"),
    "AWS::Events::Rule": ("events", "rule/{}"),
    "AWS::Scheduler::ScheduleGroup": ("scheduler", "schedule-group/{}"),
    "AWS::CloudWatch::Alarm": ("cloudwatch", "alarm:{}"),
    "AWS::CloudWatch::CompositeAlarm": ("cloudwatch", "alarm:{}"),
}
#: Global services: no region (IAM, S3: no account either).
_GLOBAL_ARNS: Final[Mapping[str, str]] = {
    "AWS::IAM::Role": "arn:aws:iam::{account}:role/{name}",
    "AWS::S3::Bucket": "arn:aws:s3:::{name}",
}
#: Attributes that are the last segment of the physical id (a URL's or an ARN's).
_LAST_SEGMENT: Final[Mapping[str, str]] = {
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::StepFunctions::StateMachine": "Name",
}
#: Attributes that are the physical id itself.
_PHYSICAL: Final[Mapping[str, str]] = {
    "AWS::SQS::Queue": "QueueUrl",
    "AWS::SNS::Topic": "TopicArn",
}
_SUB_VARIABLE: Final = re.compile(r"\$\{([^}]*)\}")


class UnresolvableError(ConfigError, ValueError):
    """A template value local mode cannot resolve; the message says which, and why."""


def _is_intrinsic(value: Any) -> bool:
    """CloudFormation's rule: an intrinsic function is an object of exactly one key, ``Ref``
    or ``Fn::...``."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return False
    (key,) = value
    return key == "Ref" or (isinstance(key, str) and key.startswith("Fn::"))


def _get_att_parts(value: Any) -> tuple[str, str] | None:
    """``Fn::GetAtt``'s (logical id, attribute), from either of its forms."""
    if isinstance(value, str) and "." in value:
        logical, _, attribute = value.partition(".")
        return logical, attribute
    if isinstance(value, list) and len(value) == 2 and all(isinstance(p, str) for p in value):
        return str(value[0]), str(value[1])
    return None


def referent(value: Any) -> tuple[str, str | None] | None:
    """What a ``Ref`` or ``Fn::GetAtt`` points at, unresolved: (logical id, attribute; ``None``
    for a ``Ref``); ``None`` for any other value."""
    if not _is_intrinsic(value):
        return None
    if isinstance(value.get("Ref"), str):
        return str(value["Ref"]), None
    return _get_att_parts(value.get("Fn::GetAtt"))


def references(value: Any) -> set[str]:
    """Every logical id ``value`` refers to, anywhere inside it: by ``Ref``, ``Fn::GetAtt`` or
    a ``Fn::Sub`` variable (pseudo parameters and a ``Fn::Sub``'s own variables excepted)."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        target = referent(value)
        if target is not None:
            found.add(target[0])
        sub = value.get("Fn::Sub") if _is_intrinsic(value) else None
        if sub is not None:
            text, variables = (
                (sub[0], sub[1]) if isinstance(sub, list) and len(sub) == 2 else (sub, {})
            )
            if isinstance(text, str):
                for name in _SUB_VARIABLE.findall(text):
                    if not name.startswith("!") and name not in variables:
                        found.add(name.partition(".")[0])
        for item in value.values():
            found |= references(item)
    elif isinstance(value, list):
        for item in value:
            found |= references(item)
    return {name for name in found if not name.startswith("AWS::")}


class TemplateResolver:
    """Template values resolved against a deployed stack (see the module's docstring).

    ``physical`` maps logical ids to what the emulator created (empty before the stack is
    deployed: then only pseudo parameters, parameters and the resources played locally
    resolve). ``account`` and ``region`` are the emulator's, for ARNs and pseudo parameters.
    """

    def __init__(
        self,
        template: Mapping[str, Any],
        physical: Mapping[str, str] | None = None,
        *,
        account: str | None = None,
        region: str | None = None,
        stack_name: str | None = None,
    ) -> None:
        self.resources: Mapping[str, Any] = template.get("Resources", {})
        self.parameters: Mapping[str, Any] = template.get("Parameters", {})
        self.physical: Mapping[str, str] = physical or {}
        self.account, self.region, self.stack_name = account, region, stack_name

    # -- reading the template ------------------------------------------------------------------

    def type_of(self, logical: str) -> str:
        """The resource's ``Type`` ("" for no such resource)."""
        return str(self.resources.get(logical, {}).get("Type", ""))

    def properties(self, logical: str) -> Mapping[str, Any]:
        props: Mapping[str, Any] = self.resources.get(logical, {}).get("Properties", {})
        return props

    # -- resolving -------------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function inside it resolved (to a string); anything
        else as it is."""
        if _is_intrinsic(value):
            return self._intrinsic(value)
        if isinstance(value, Mapping):
            return {key: self.resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        return value

    def text(self, value: Any) -> str:
        """One value as a string: a literal as CloudFormation passes a scalar to a string
        property (``str``), an intrinsic function resolved."""
        if isinstance(value, str | int | float):
            return str(value)
        if _is_intrinsic(value):
            return self._intrinsic(value)
        raise UnresolvableError(f"cannot resolve {value!r} locally: it is not a single value")

    def _intrinsic(self, value: Mapping[str, Any]) -> str:
        ((function, argument),) = value.items()
        if function == "Ref" and isinstance(argument, str):
            return self.ref(argument)
        if function == "Fn::GetAtt" and (parts := _get_att_parts(argument)) is not None:
            return self.get_att(*parts)
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            separator, parts_list = argument
            if isinstance(separator, str) and isinstance(parts_list, list):
                return separator.join(self.text(part) for part in parts_list)
        if function == "Fn::Sub":
            return self._sub(argument)
        raise UnresolvableError(
            f"cannot resolve {dict(value)!r} locally: local mode resolves Ref, Fn::GetAtt, "
            "Fn::Join and Fn::Sub"
        )

    def ref(self, logical: str) -> str:
        """``Ref``: see the module's docstring."""
        if logical in self.physical:
            return self.physical[logical]
        pseudo = self._pseudo(logical)
        if pseudo is not None:
            return pseudo
        kind = self.type_of(logical)
        if kind in PLAYED_LOCALLY:
            name = self.properties(logical).get(PLAYED_LOCALLY[kind])
            return logical if name is None else self.text(name)
        parameter = self.parameters.get(logical)
        # An SSM parameter's default is the parameter's name, not its value.
        if (
            isinstance(parameter, Mapping)
            and "Default" in parameter
            and not str(parameter.get("Type", "")).startswith("AWS::SSM::")
        ):
            return self.text(parameter["Default"])
        if logical in self.parameters or logical.startswith("AWS::"):
            raise UnresolvableError(
                f"cannot resolve {{'Ref': {logical!r}}} locally: local mode passes no parameter "
                "values (a parameter resolves to its plain Default) and knows only the pseudo "
                "parameters AWS::AccountId, AWS::Region, AWS::Partition, AWS::URLSuffix and "
                "AWS::StackName"
            )
        raise UnresolvableError(
            f"cannot resolve {{'Ref': {logical!r}}} locally: {logical} was not created in the "
            "local cloud"
        )

    def _pseudo(self, name: str) -> str | None:
        known = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name not in known:
            return None
        found = known[name]
        if found is None:
            raise UnresolvableError(f"cannot resolve {{'Ref': {name!r}}}: not given to this reader")
        return found

    def get_att(self, logical: str, attribute: str) -> str:
        """``Fn::GetAtt``: see the module's docstring."""
        kind = self.type_of(logical)
        if kind == "" and logical not in self.physical:
            raise UnresolvableError(
                f"cannot resolve {logical}.{attribute} locally: the template has no {logical}"
            )
        physical = self.ref(logical)
        if _PHYSICAL.get(kind) == attribute:
            return physical
        if _LAST_SEGMENT.get(kind) == attribute:
            return physical.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        if attribute == "Arn":
            if physical.startswith("arn:"):
                return physical
            if kind in _ARNS:
                return self._arn(kind, physical)
            if kind in _GLOBAL_ARNS and self.account is not None:
                return _GLOBAL_ARNS[kind].format(account=self.account, name=physical)
        raise UnresolvableError(f"cannot resolve {logical}.{attribute} ({kind}) locally")

    def _arn(self, kind: str, physical: str) -> str:
        service, resource = _ARNS[kind]
        # A queue's physical id is its URL: its name is the last segment.
        name = physical.rstrip("/").rsplit("/", 1)[-1] if kind == "AWS::SQS::Queue" else physical
        return self.arn(service, resource.format(name))

    def arn(self, service: str, resource: str) -> str:
        """An ARN of the emulator's account and region."""
        if self.account is None or self.region is None:
            raise UnresolvableError(f"cannot build the {service} ARN of {resource} here")
        return f"arn:aws:{service}:{self.region}:{self.account}:{resource}"

    def _sub(self, argument: Any) -> str:
        if isinstance(argument, list) and len(argument) == 2 and isinstance(argument[1], Mapping):
            text, variables = argument[0], argument[1]
        else:
            text, variables = argument, {}
        if not isinstance(text, str):
            raise UnresolvableError(f"cannot resolve {{'Fn::Sub': {argument!r}}} locally")

        def variable(found: re.Match[str]) -> str:
            name = found.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # ${!Literal} is the text ${Literal}
            if name in variables:
                return self.text(variables[name])
            if "." in name and not name.startswith("AWS::"):
                logical, _, attribute = name.partition(".")
                return self.get_att(logical, attribute)
            return self.ref(name)

        return _SUB_VARIABLE.sub(variable, text)
