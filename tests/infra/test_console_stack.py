"""The console on AWS (context ``console``): off by default, and when on: the page behind
CloudFront with OAC, every API route behind the Cognito JWT authorizer, least privilege."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import infra.console as console_module
import pytest
from aws_cdk import Stack
from aws_cdk import aws_cloudfront as cloudfront
from infra.app import build_app
from infra.config import REPO_ROOT, ConsoleSettings, ContextError, StackConfig
from infra.console import (
    API_PATH,
    CONFIG_FILE,
    SCOPES,
    ConsoleAssetsMissingError,
)
from infra.layers import PIPELINES_MOUNT
from tests.infra.test_nag import acknowledgments, report
from tests.infra.test_stack import allowed, render, role_of

from stepcrawl.names import (
    ENV_PIPELINES_DIR,
    ENV_STAGE,
    ENV_TABLE,
    OUTPUT_CONSOLE_URL,
    OUTPUT_CONSOLE_USER_POOL_ID,
)

EXTRA_CALLBACK = "https://console.example.com/"
#: Resource types only the console brings.
CONSOLE_TYPES = (
    "AWS::CloudFront::",
    "AWS::Cognito::",
    "AWS::ApiGatewayV2::",
    "Custom::CDKBucketDeployment",
    "Custom::S3AutoDeleteObjects",
)


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stand-in for the built page (``make console``), whatever the checkout holds."""
    directory = tmp_path_factory.mktemp("console-static")
    (directory / "index.html").write_text("<!doctype html><title>stepcrawl console</title>\n")
    (directory / "assets").mkdir()
    (directory / "assets" / "app.js").write_text("console.log('stand-in');\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(console_module, "STATIC_DIR", directory)
        yield directory


@pytest.fixture(scope="module")
def on(synthesize, static_dir: Path):
    """The default app with the console (and one extra callback URL): synthesized once."""
    return synthesize(console={"enabled": True, "callback_urls": [EXTRA_CALLBACK]})


def _console_ids(synth) -> set[str]:
    return {
        logical
        for logical, resource in synth.json["Resources"].items()
        if resource["Type"].startswith(CONSOLE_TYPES) or logical.startswith("Console")
    }


def _distribution(synth) -> dict[str, Any]:
    ((_, distribution),) = synth.resources("AWS::CloudFront::Distribution").items()
    config: dict[str, Any] = distribution["Properties"]["DistributionConfig"]
    return config


def _url(synth) -> dict[str, Any]:
    distribution = synth.logical_id(synth.stack.console.distribution)
    return {"Fn::Join": ["", ["https://", {"Fn::GetAtt": [distribution, "DomainName"]}, "/"]]}


# ------------------------------------------------------------------------------ the flag


def test_off_by_default_without_any_console_resource(default) -> None:
    assert default.stack.config.console == ConsoleSettings()
    assert default.stack.console is None
    assert _console_ids(default) == set()
    assert not {k for k in default.json["Outputs"] if k.startswith("Console")}
    assert len(default.resources("AWS::S3::Bucket")) == 1  # the data bucket only


def test_disabled_settings_leave_the_template_exactly_as_before(default, synthesize) -> None:
    off = synthesize(console={"enabled": False, "callback_urls": [EXTRA_CALLBACK]})
    assert off.json == default.json


def test_cdk_json_leaves_the_console_off(cdk_context: dict[str, Any]) -> None:
    # Local mode (`stepcrawl serve`/`run`) synthesizes from cdk.json: the console, which moto
    # cannot host, must not come with it.
    assert not StackConfig.from_context(cdk_context.get).console.enabled


def test_context_string_is_parsed() -> None:
    raw = json.dumps({"enabled": True, "callback_urls": [EXTRA_CALLBACK], "domain_prefix": "acme"})
    settings = StackConfig.from_context({"console": raw}.get).console
    assert settings == ConsoleSettings(True, (EXTRA_CALLBACK,), "acme")
    local = StackConfig.from_context({"console": {"callback_urls": ["http://localhost:5173/"]}}.get)
    assert local.console.callback_urls == ("http://localhost:5173/",)


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ({"enabled": "yes"}, "console.enabled", "true or false"),
        ({"callback_urls": "https://a.example/"}, "console.callback_urls", "list of URLs"),
        ({"callback_urls": ["http://a.example/"]}, "console.callback_urls", "https://"),
        ({"callback_urls": [42]}, "console.callback_urls", "https://"),
        ({"domain_prefix": "Stepcrawl_Console"}, "console.domain_prefix", "lower-case"),
        ({"domain_prefix": "my-aws-console"}, "console.domain_prefix", "without aws"),
        ({"domain_prefix": "x" * 64}, "console.domain_prefix", "1-63"),
        ({"enabled": True, "users": ["a@example.com"]}, "console.users", "unknown field"),
        ("{not json", "console", "is not JSON"),
        ([True], "console", "must be an object"),
    ],
)
def test_invalid_console_context_names_the_field(value: Any, field: str, message: str) -> None:
    with pytest.raises(ContextError, match=re.escape(f"context {field}")) as error:
        StackConfig.from_context({"console": value}.get)
    assert message in str(error.value)


def test_missing_built_page_fails_the_synth_with_what_to_do(
    cdk_context: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_module, "STATIC_DIR", tmp_path / "static")
    context = {**cdk_context, "aws:cdk:bundling-stacks": [], "console": {"enabled": True}}
    with pytest.raises(ConsoleAssetsMissingError, match="make console"):
        build_app(context, outdir=str(tmp_path / "out"))


# ------------------------------------------------------------------------------ the page


def test_the_page_bucket_is_private_encrypted_tls_only_and_destroyed(on) -> None:
    bucket_id = on.logical_id(on.stack.console.bucket)
    bucket = on.resources("AWS::S3::Bucket")[bucket_id]
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ["BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"],
        True,
    )
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert bucket["DeletionPolicy"] == "Delete"  # built files, put back by every deploy
    assert on.resources("Custom::S3AutoDeleteObjects")
    (policy,) = (
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in on.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    )
    (deny,) = (s for s in policy if s["Effect"] == "Deny")
    assert (deny["Action"], deny["Condition"]) == (
        "s3:*",
        {"Bool": {"aws:SecureTransport": "false"}},
    )
    # Only CloudFront reads objects, and only for this distribution (OAC's SourceArn).
    readers = [s for s in policy if s["Effect"] == "Allow" and "Service" in s["Principal"]]
    assert len(readers) == 1
    (reader,) = readers
    assert reader["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert reader["Action"] == "s3:GetObject"
    source = render(reader["Condition"]["StringEquals"]["AWS:SourceArn"])
    assert source.endswith(f":distribution/<{on.logical_id(on.stack.console.distribution)}>")
    assert not any(s.get("Principal") == {"AWS": "*"} for s in policy if s["Effect"] == "Allow")


def test_the_distribution_serves_the_bucket_through_oac_over_https(on) -> None:
    config = _distribution(on)
    assert config["DefaultRootObject"] == "index.html"
    default = config["DefaultCacheBehavior"]
    assert default["ViewerProtocolPolicy"] == "redirect-to-https"
    assert default["AllowedMethods"] == ["GET", "HEAD"]
    security = Stack.of(on.stack).resolve(
        cloudfront.ResponseHeadersPolicy.SECURITY_HEADERS.response_headers_policy_id
    )
    assert default["ResponseHeadersPolicyId"] == security
    origins = {o["Id"]: o for o in config["Origins"]}
    page = origins[default["TargetOriginId"]]
    bucket_id = on.logical_id(on.stack.console.bucket)
    assert page["DomainName"] == {"Fn::GetAtt": [bucket_id, "RegionalDomainName"]}
    assert page["S3OriginConfig"] == {"OriginAccessIdentity": ""}  # no legacy OAI
    ((oac_id, oac),) = on.resources("AWS::CloudFront::OriginAccessControl").items()
    assert page["OriginAccessControlId"] == {"Fn::GetAtt": [oac_id, "Id"]}
    assert oac["Properties"]["OriginAccessControlConfig"]["SigningBehavior"] == "always"
    assert oac["Properties"]["OriginAccessControlConfig"]["OriginAccessControlOriginType"] == "s3"


def test_the_api_behaviour_forwards_authorization_and_caches_nothing(on) -> None:
    config = _distribution(on)
    (api,) = config["CacheBehaviors"]  # exactly two behaviours: the page and /api/*
    assert api["PathPattern"] == f"{API_PATH}/*"
    resolve = Stack.of(on.stack).resolve
    assert api["CachePolicyId"] == resolve(cloudfront.CachePolicy.CACHING_DISABLED.cache_policy_id)
    assert api["OriginRequestPolicyId"] == resolve(
        cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER.origin_request_policy_id
    )
    assert set(api["AllowedMethods"]) == {
        "GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"
    }  # fmt: skip
    assert api["ViewerProtocolPolicy"] == "https-only"  # a redirect would turn POST into GET
    origin = next(o for o in config["Origins"] if o["Id"] == api["TargetOriginId"])
    api_id = on.logical_id(on.stack.console.api)
    assert render(origin["DomainName"]) == (
        f"<{api_id}>.execute-api.<AWS::Region>.<AWS::URLSuffix>"
    )
    assert origin["CustomOriginConfig"] == {
        "OriginProtocolPolicy": "https-only",
        "OriginSSLProtocols": ["TLSv1.2"],
    }


def test_config_json_carries_the_client_domain_and_redirect(on) -> None:
    ((_, deployment),) = on.resources("Custom::CDKBucketDeployment").items()
    props = deployment["Properties"]
    assert props["DistributionPaths"] == ["/*"]  # the new config.json is not served stale
    assert props["DestinationBucketName"] == {"Ref": on.logical_id(on.stack.console.bucket)}
    page_zip, config_zip = props["SourceObjectKeys"]
    staged = {p.name: p for p in on.outdir.glob("asset.*")}
    page = staged[f"asset.{page_zip.removesuffix('.zip')}"]
    assert (page / "index.html").is_file()  # the built page (here: the stand-in)
    text = (staged[f"asset.{config_zip.removesuffix('.zip')}"] / CONFIG_FILE).read_text()
    # Deploy-time values are markers that the deployment replaces by their JSON (quoted).
    for marker, value in props["SourceMarkers"][1].items():
        text = text.replace(marker, render(value))
    written = json.loads(text)
    assert written["mode"] == "aws"
    assert written["api"] == API_PATH
    auth = written["auth"]
    assert auth["scopes"] == list(SCOPES) == ["openid", "email"]
    console = on.stack.console
    assert auth["client_id"] == f"<{on.logical_id(console.client)}>"
    domain = on.logical_id(console.domain)
    assert auth["domain"] == f"<{domain}>.auth.<AWS::Region>.amazoncognito.com"
    assert auth["redirect_uri"] == render(_url(on))


# ------------------------------------------------------------------------------ sign-in


def test_users_are_admin_created_with_strong_passwords_mfa_and_threat_protection(on) -> None:
    ((_, pool),) = on.resources("AWS::Cognito::UserPool").items()
    props = pool["Properties"]
    assert props["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    policy = props["Policies"]["PasswordPolicy"]
    assert policy["MinimumLength"] >= 12
    assert all(policy[k] for k in ("RequireLowercase", "RequireUppercase", "RequireNumbers",
                                   "RequireSymbols"))  # fmt: skip
    assert props["MfaConfiguration"] == "ON"
    assert props["EnabledMfas"] == ["SOFTWARE_TOKEN_MFA"]
    assert props["UserPoolTier"] == "PLUS"
    assert props["UserPoolAddOns"] == {"AdvancedSecurityMode": "ENFORCED"}


def test_the_app_client_is_public_with_the_code_grant_and_the_console_urls(on) -> None:
    ((_, client),) = on.resources("AWS::Cognito::UserPoolClient").items()
    props = client["Properties"]
    assert props["GenerateSecret"] is False
    assert props["AllowedOAuthFlows"] == ["code"]
    assert props["AllowedOAuthFlowsUserPoolClient"] is True
    assert props["AllowedOAuthScopes"] == ["openid", "email"]
    assert props["SupportedIdentityProviders"] == ["COGNITO"]
    assert props["CallbackURLs"] == [_url(on), EXTRA_CALLBACK]
    assert props["LogoutURLs"] == [_url(on), EXTRA_CALLBACK]


def test_the_hosted_ui_domain_prefix_is_derived_from_the_stack_and_account(on) -> None:
    ((_, domain),) = on.resources("AWS::Cognito::UserPoolDomain").items()
    assert render(domain["Properties"]["Domain"]) == "stepcrawl-dev-<AWS::AccountId>"


# ------------------------------------------------------------------------------ the API


def test_every_route_requires_the_jwt_authorizer(on) -> None:
    routes = on.resources("AWS::ApiGatewayV2::Route")
    assert routes
    ((authorizer_id, _),) = on.resources("AWS::ApiGatewayV2::Authorizer").items()
    for route in routes.values():
        props = route["Properties"]
        assert props["AuthorizationType"] == "JWT", props["RouteKey"]
        assert props["AuthorizerId"] == {"Ref": authorizer_id}
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == {f"ANY {API_PATH}/{{proxy+}}"}


def test_the_authorizer_trusts_the_pool_for_the_console_client_only(on) -> None:
    ((_, authorizer),) = on.resources("AWS::ApiGatewayV2::Authorizer").items()
    props = authorizer["Properties"]
    pool = on.logical_id(on.stack.console.user_pool)
    client = on.logical_id(on.stack.console.client)
    assert props["AuthorizerType"] == "JWT"
    assert props["IdentitySource"] == ["$request.header.Authorization"]
    assert props["JwtConfiguration"] == {
        "Audience": [{"Ref": client}],
        "Issuer": {"Fn::Join": ["", ["https://", {"Fn::GetAtt": [pool, "ProviderURL"]}]]},
    }


def test_the_stage_logs_every_request_and_is_throttled(on) -> None:
    ((_, stage),) = on.resources("AWS::ApiGatewayV2::Stage").items()
    props = stage["Properties"]
    assert props["StageName"] == "$default"
    logs_id = on.logical_id(on.stack.console.access_logs)
    assert props["AccessLogSettings"]["DestinationArn"] == {"Fn::GetAtt": [logs_id, "Arn"]}
    fields = json.loads(props["AccessLogSettings"]["Format"])
    assert {"requestId", "status", "routeKey", "user", "authorizerError"} <= fields.keys()
    assert props["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0
    assert props["DefaultRouteSettings"]["ThrottlingBurstLimit"] > 0
    log_group = on.resources("AWS::Logs::LogGroup")[logs_id]
    assert log_group["Properties"]["RetentionInDays"] == 14


def test_the_function_shares_the_workers_defaults_layers_and_environment(on) -> None:
    function = on.stack.console.function.function
    props = on.resources("AWS::Lambda::Function")[on.logical_id(function)]["Properties"]
    dispatch = on.resources("AWS::Lambda::Function")[on.logical_id(on.stack.workers.dispatch)]
    worker = dispatch["Properties"]
    for key in ("Runtime", "Architectures", "Handler", "Layers", "TracingConfig"):
        assert props[key] == worker[key], key
    assert props["Layers"] == [
        {"Ref": on.logical_id(on.stack.library.layer)},
        {"Ref": on.logical_id(on.stack.pipelines_layer.layer)},
    ]
    env = props["Environment"]["Variables"]
    assert env[ENV_PIPELINES_DIR] == PIPELINES_MOUNT
    assert env[ENV_STAGE] == "dev"
    # The workers' whole environment (table, bucket, queues, engine settings) as well.
    for key, shared in worker["Environment"]["Variables"].items():
        # (a feeder's, a finisher's)
        if key not in (
            "POWERTOOLS_SERVICE_NAME",
            "STEPCRAWL_RENDER_QUEUE_URL",
            "STEPCRAWL_ALERT_TOPIC_ARN",
        ):
            assert env[key] == shared, key
    assert env[ENV_TABLE] == {"Ref": on.logical_id(on.stack.storage.table)}
    assert env["POWERTOOLS_SERVICE_NAME"] == "console"
    assert props["LoggingConfig"]["LogFormat"] == "JSON"
    handler = REPO_ROOT / "functions" / "console" / "handler.py"
    text = handler.read_text()
    assert "from stepcrawl.console.aws import api_from_env, handle" in text
    assert len(text.splitlines()) <= 30


def test_the_function_has_least_privilege(on) -> None:
    console, stack = on.stack.console, on.stack
    grants = allowed(on, role_of(on, console.function.function))
    actions = {a for a, _ in grants}
    assert not {a for a in actions if a == "*" or a.endswith(("*", ":*"))}  # no action wildcard
    assert {a.split(":")[0] for a in actions} == {
        "logs", "xray", "dynamodb", "sqs", "states", "lambda", "cloudformation", "s3"
    }  # fmt: skip
    # Resource '*' only for actions that take no resource.
    assert {a for a, r in grants if r == "*"} == {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "lambda:ListEventSourceMappings",
    }
    # The table: the stack's own only; the bucket: GetObject of data profiles (a task's
    # profile too big for its record, which the topology shows), and the log's objects.
    table = on.logical_id(stack.storage.table)
    assert {r for a, r in grants if a.startswith("dynamodb:")} == {f"<{table}.Arn>"}
    bucket = on.logical_id(stack.storage.bucket)
    assert {(a, r) for a, r in grants if a.startswith("s3:")} == {
        ("s3:GetObject", f"<{bucket}.Arn>/profiles/*"),
        # a re-drive appends to the log: its spills, and its checkpoints (read, next, prune)
        ("s3:GetObject", f"<{bucket}.Arn>/log/*"),
        ("s3:PutObject", f"<{bucket}.Arn>/log/*"),
        ("s3:GetObject", f"<{bucket}.Arn>/views/*"),
        ("s3:PutObject", f"<{bucket}.Arn>/views/*"),
        ("s3:DeleteObject", f"<{bucket}.Arn>/views/*"),
    }
    # Queues: depths of all six; sending to the fetch queue only (re-drive feeds it).
    fetch = on.logical_id(stack.queues.fetch.queue)
    assert {r for a, r in grants if a == "sqs:SendMessage"} == {f"<{fetch}.Arn>"}
    queues = [stack.queues.control, stack.queues.fetch, stack.queues.parse]
    assert {r for a, r in grants if a == "sqs:GetQueueAttributes"} == {
        f"<{on.logical_id(q)}.Arn>" for w in queues for q in (w.queue, w.dead_letters)
    }
    # State machines: the stage's own; start/list on the machines, the rest on executions.
    machines = {f"<{on.logical_id(m.state_machine)}>" for m in stack.pipelines.machines.values()}
    for action in ("states:StartExecution", "states:ListExecutions", "states:DescribeStateMachine"):
        assert {r for a, r in grants if a == action} == machines, action
    executions = {
        f"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:stepcrawl-dev-{n}:*"
        for n in stack.pipelines.machines
    }
    for action in (
        "states:DescribeExecution",
        "states:DescribeStateMachineForExecution",
        "states:GetExecutionHistory",
        "states:StopExecution",
    ):
        assert {r for a, r in grants if a == action} == executions, action
    assert len({a for a in actions if a.startswith("states:")}) == 7
    # CloudFormation: this stack's outputs only; the engine's settings are in the
    # function's environment (no reading of other functions' configuration).
    assert {(a, r) for a, r in grants if a.startswith("cloudformation:")} == {
        ("cloudformation:DescribeStacks", "<AWS::StackId>"),
    }
    assert {a for a in actions if a.startswith("lambda:")} == {"lambda:ListEventSourceMappings"}


def test_the_page_deployment_has_its_own_role_and_log_group(on) -> None:
    role_id = on.logical_id(on.stack.console.deploy_role)
    assert "ManagedPolicyArns" not in on.json["Resources"][role_id]["Properties"]
    statements = [
        statement
        for policy in on.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    logs_id = on.logical_id(on.stack.console.deployment.node.scope.node.find_child("DeployLogs"))
    assert {
        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [logs_id, "Arn"]},
    } in statements
    anywhere = [s for s in statements if s["Resource"] == "*"]
    assert anywhere == [
        {
            "Action": ["cloudfront:CreateInvalidation", "cloudfront:GetInvalidation"],
            "Effect": "Allow",
            "Resource": "*",
        }
    ]
    bucket = on.logical_id(on.stack.console.bucket)
    (writes,) = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert {render(r) for r in writes["Resource"]} == {f"<{bucket}.Arn>", f"<{bucket}.Arn>/*"}


def test_outputs_name_the_console_url_and_user_pool(on) -> None:
    outputs = on.json["Outputs"]
    assert outputs[OUTPUT_CONSOLE_URL]["Value"] == _url(on)
    assert outputs[OUTPUT_CONSOLE_USER_POOL_ID]["Value"] == {
        "Ref": on.logical_id(on.stack.console.user_pool)
    }


# ------------------------------------------------------------------------------ cdk-nag


def test_cdk_nag_passes_with_a_reason_for_every_accepted_finding(on) -> None:
    (plugin,) = report(on.outdir)["pluginReports"]
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    made = acknowledgments(on.stack)
    used = {(v["acknowledgedAt"], v["acknowledgedId"]) for v in plugin["suppressedViolations"]}
    assert set(made) == used  # none stale
    ours = {
        (p, r): reason
        for (p, r), reason in made.items()
        if "/Console" in p or "BucketDeployment" in p
    }
    assert ours
    for (path, rule), reason in ours.items():
        assert len(reason) > 40, (path, rule)
    rules = {rule.split("::")[1].split("[")[0] for _, rule in ours}
    assert rules == {
        "AwsSolutions-S1", "AwsSolutions-L1", "AwsSolutions-IAM5",
        "AwsSolutions-CFR1", "AwsSolutions-CFR2", "AwsSolutions-CFR3", "AwsSolutions-CFR4",
    }  # fmt: skip
