"""The console on AWS (context ``console``, off by default; docs/deploy.md, "Console on AWS").

One CloudFront distribution serves both halves of the console from one origin, so the page
needs no CORS and no second host name:

- ``/*``: the built page (``layers/stepcrawl/console/static``, ``make console``) from a private
  bucket through Origin Access Control, plus a ``config.json`` written at deploy time (the
  Cognito hosted UI domain, app client id and redirect URI the page signs in with);
- ``/api/*``: an HTTP API (caching disabled, every viewer header but Host forwarded, so the
  ``Authorization`` bearer token reaches it) whose every route has a JWT authorizer on the
  console's Cognito user pool, in front of one Lambda function (``functions/console``) that
  answers the routes of docs/console-api.md with :mod:`stepcrawl.console.aws`.

Sign-in: a user pool without self sign-up (an administrator creates users), a strong password
policy, TOTP MFA required and threat protection (the Plus feature plan); a public app client
(no secret) with the authorization code grant, which the page uses with PKCE.

The function is a :class:`~infra.functions.StepcrawlFunction` (the workers' runtime, layers,
tracing, JSON logs, retention and own role) with the workers' environment plus the stage: its
:class:`~stepcrawl.deployment.Deployment` reads the stack's outputs. Its grants, through
``grant_*`` wherever the construct has one, are what the API's routes call on AWS and no more
(the table in :meth:`Console._grant`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import jsii
from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.access import LOG_SPILLS, PROFILES, VIEWS
from infra.config import StackConfig
from infra.functions import StepcrawlFunction, WorkerSpec
from infra.layers import LIBRARY_DIR
from infra.pipelines import state_machine_name
from infra.queues import WorkQueues
from infra.retention import retention_days
from infra.storage import Storage
from stepcrawl.environment import ConsoleEnvironment
from stepcrawl.names import (
    ENV_BUCKET,
    ENV_CONTROL_QUEUE_URL,
    ENV_FETCH_QUEUE_URL,
    ENV_PARSE_QUEUE_URL,
    ENV_PIPELINES_DIR,
    ENV_STAGE,
    ENV_TABLE,
)

__all__ = [
    "API_PATH",
    "CONFIG_FILE",
    "CONSOLE",
    "SCOPES",
    "STATIC_DIR",
    "THROTTLE",
    "Console",
    "ConsoleAssetsMissingError",
]

#: The built page (committed by ``make console``); the library layer ships the same files.
STATIC_DIR: Final = LIBRARY_DIR / "console" / "static"
#: Generated at deploy time next to ``index.html``: what the page signs in with.
CONFIG_FILE: Final = "config.json"
#: The API's path on the distribution (the page's ``api``), and its CloudFront behaviour.
API_PATH: Final = "/api"
SCOPES: Final = ("openid", "email")
#: Requests per second (and burst) of the whole API: a few people with the topology open.
THROTTLE: Final = apigwv2.ThrottleSettings(rate_limit=50, burst_limit=100)
#: The function: 25 s, under the HTTP API's 29 s integration timeout, so a slow call ends
#: (and is logged) in the function rather than at the gateway.
#: (Not in ``FUNCTION_MEMORY_MB``: the cost model prices the crawl's functions per page.)
CONSOLE: Final = WorkerSpec("console", Duration.seconds(25), 512)

#: One JSON line per API request: who (the token's subject and e-mail) did what, and how it
#: ended (authorizer and integration errors included).
ACCESS_LOG_FIELDS: Final = {
    "requestId": "$context.requestId",
    "time": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
    "method": "$context.httpMethod",
    "path": "$context.path",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "latencyMs": "$context.responseLatency",
    "user": "$context.authorizer.claims.sub",
    "email": "$context.authorizer.claims.email",
    "authorizerError": "$context.authorizer.error",
    "integrationError": "$context.integrationErrorMessage",
}


class ConsoleAssetsMissingError(FileNotFoundError):
    """The console is enabled but its built page is not there."""


def _static_dir(directory: Path) -> Path:
    if not (directory / "index.html").is_file():
        raise ConsoleAssetsMissingError(
            f"context console.enabled: the console's built page is missing "
            f"({directory / 'index.html'}); run `make console` to build it, or deploy with "
            "the console disabled"
        )
    return directory


class Console(Construct):
    """``bucket`` + ``distribution`` (the page), ``user_pool``/``client``/``domain`` (sign-in),
    ``api`` + ``function`` (the console API); ``url`` is ``https://<distribution domain>/``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        storage: Storage,
        queues: WorkQueues,
        machines: Mapping[str, sfn.IStateMachine],
        layers: Sequence[lambda_.ILayerVersion],
        pipelines_dir: str,
        static_dir: Path | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        assets = _static_dir(static_dir if static_dir is not None else STATIC_DIR)
        retention = retention_days(config.log_retention_days)
        # The parts in the order they have always been created: the template lists the
        # resources in creation order, and a reordering would show up as a template change.
        self.function = self._function(config, storage, queues, layers, pipelines_dir)
        function = self.function.function
        self._grant(config, function, storage, queues, machines)
        self.bucket = self._bucket()
        self.api, self.access_logs, self.stage = self._api(config, retention)
        api_domain = f"{self.api.api_id}.execute-api.{stack.region}.{stack.url_suffix}"
        self.distribution = self._distribution(config, api_domain)
        self.url = f"https://{self.distribution.distribution_domain_name}/"
        self.user_pool = self._user_pool(config)
        self.domain, self.client = self._page_client(config)
        self.domain_host = f"{self.domain.domain_name}.auth.{stack.region}.amazoncognito.com"
        self.authorizer, self.routes = self._routes(function)
        self.config_json = {
            "mode": "aws",
            "api": API_PATH,
            "auth": {
                "domain": self.domain_host,
                "client_id": self.client.user_pool_client_id,
                "redirect_uri": self.url,
                "scopes": list(SCOPES),
            },
        }
        self.deploy_role, self.deployment = self._deploy_page(assets, retention)

    def _function(
        self,
        config: StackConfig,
        storage: Storage,
        queues: WorkQueues,
        layers: Sequence[lambda_.ILayerVersion],
        pipelines_dir: str,
    ) -> StepcrawlFunction:
        """The API's function."""
        return StepcrawlFunction(
            self,
            "Function",
            spec=CONSOLE,
            config=config,
            # The workers' environment (stepcrawl.runtime), the same engine settings (a
            # re-drive shards the frontier as the functions do), and the stage, whose
            # Deployment the API reads (stack outputs); through the console's model.
            environment=ConsoleEnvironment.model_validate(
                {
                    ENV_TABLE: storage.table.table_name,
                    ENV_BUCKET: storage.bucket.bucket_name,
                    ENV_FETCH_QUEUE_URL: queues.fetch.queue.queue_url,
                    ENV_PARSE_QUEUE_URL: queues.parse.queue.queue_url,
                    ENV_CONTROL_QUEUE_URL: queues.control.queue.queue_url,
                    ENV_PIPELINES_DIR: pipelines_dir,
                    ENV_STAGE: config.stage,
                    **config.engine.to_env(),
                }
            ).variables(),
            layers=list(layers),
        )

    def _bucket(self) -> s3.Bucket:
        """The page's bucket: built files only (the deployment puts them back), so it is
        destroyed with the stack."""
        return s3.Bucket(
            self,
            "Assets",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.DESTROY,
            auto_delete_objects=True,
        )

    def _api(
        self, config: StackConfig, retention: logs.RetentionDays
    ) -> tuple[apigwv2.HttpApi, logs.LogGroup, apigwv2.HttpStage]:
        """The HTTP API, its access log group and its one throttled stage."""
        api = apigwv2.HttpApi(
            self,
            "Api",
            api_name=f"{config.prefix}-console",
            description=f"stepcrawl console API ({config.stage})",
            create_default_stage=False,
        )
        access_logs = logs.LogGroup(
            self, "ApiAccessLogs", retention=retention, removal_policy=RemovalPolicy.DESTROY
        )
        stage = apigwv2.HttpStage(
            self,
            "ApiStage",
            http_api=api,
            auto_deploy=True,
            throttle=THROTTLE,
            access_log_settings=_AccessLogs(access_logs),
        )
        return api, access_logs, stage

    def _distribution(self, config: StackConfig, api_domain: str) -> cloudfront.Distribution:
        """One distribution for both halves: the page from the bucket, ``/api/*`` from the
        API (``api_domain``)."""
        return cloudfront.Distribution(
            self,
            "Distribution",
            comment=f"{config.prefix} console",
            default_root_object="index.html",
            price_class=cloudfront.PriceClass.PRICE_CLASS_100,
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            default_behavior=cloudfront.BehaviorOptions(
                origin=origins.S3BucketOrigin.with_origin_access_control(self.bucket),
                viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
                cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
                response_headers_policy=cloudfront.ResponseHeadersPolicy.SECURITY_HEADERS,
                allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
            ),
            additional_behaviors={
                f"{API_PATH}/*": cloudfront.BehaviorOptions(
                    origin=origins.HttpOrigin(
                        api_domain,
                        protocol_policy=cloudfront.OriginProtocolPolicy.HTTPS_ONLY,
                        origin_ssl_protocols=[cloudfront.OriginSslPolicy.TLS_V1_2],
                    ),
                    # A redirect would turn a POST into a GET: plain HTTP is refused instead.
                    viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.HTTPS_ONLY,
                    allowed_methods=cloudfront.AllowedMethods.ALLOW_ALL,
                    # With caching disabled, the all-viewer policy forwards Authorization too;
                    # Host stays the API's own (API Gateway routes by it).
                    cache_policy=cloudfront.CachePolicy.CACHING_DISABLED,
                    origin_request_policy=(
                        cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER
                    ),
                    response_headers_policy=cloudfront.ResponseHeadersPolicy.SECURITY_HEADERS,
                )
            },
        )

    def _user_pool(self, config: StackConfig) -> cognito.UserPool:
        """Sign-in: users created by an administrator, a strong password, TOTP MFA required
        and threat protection; the invitation links the page (``url``)."""
        return cognito.UserPool(
            self,
            "Users",
            user_pool_name=f"{config.prefix}-console",
            self_sign_up_enabled=False,
            sign_in_aliases=cognito.SignInAliases(email=True),
            sign_in_case_sensitive=False,
            auto_verify=cognito.AutoVerifiedAttrs(email=True),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            password_policy=cognito.PasswordPolicy(
                min_length=14,
                require_lowercase=True,
                require_uppercase=True,
                require_digits=True,
                require_symbols=True,
                temp_password_validity=Duration.days(3),
            ),
            mfa=cognito.Mfa.REQUIRED,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            feature_plan=cognito.FeaturePlan.PLUS,
            standard_threat_protection_mode=cognito.StandardThreatProtectionMode.FULL_FUNCTION,
            user_invitation=cognito.UserInvitationConfig(
                email_subject=f"Your {config.prefix} console account",
                email_body=(
                    "Sign in to the stepcrawl console with {username} and the temporary "
                    "password {####} within 3 days; you will choose a password and set up "
                    f"an authenticator app. {self.url}"
                ),
            ),
            # Console sign-ins only (recreated with one command): nothing worth retaining.
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _page_client(
        self, config: StackConfig
    ) -> tuple[cognito.UserPoolDomain, cognito.UserPoolClient]:
        """The hosted UI's domain and the page's public app client (code grant with PKCE)."""
        prefix = config.console.domain_prefix or f"{config.prefix}-{Aws.ACCOUNT_ID}"
        domain = self.user_pool.add_domain(
            "Domain", cognito_domain=cognito.CognitoDomainOptions(domain_prefix=prefix)
        )
        urls = [self.url, *config.console.callback_urls]
        client = self.user_pool.add_client(
            "Page",
            user_pool_client_name="console",
            generate_secret=False,  # a browser cannot keep one: code grant with PKCE
            auth_flows=cognito.AuthFlow(user_srp=True),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(authorization_code_grant=True),
                scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL],
                callback_urls=urls,
                logout_urls=urls,
            ),
            supported_identity_providers=[cognito.UserPoolClientIdentityProvider.COGNITO],
            prevent_user_existence_errors=True,
            enable_token_revocation=True,
            id_token_validity=Duration.hours(1),
            access_token_validity=Duration.hours(1),
            refresh_token_validity=Duration.hours(12),
        )
        return domain, client

    def _routes(
        self, function: lambda_.Function
    ) -> tuple[authorizers.HttpJwtAuthorizer, list[apigwv2.HttpRoute]]:
        """Every route of ``/api/*`` to the function, behind the JWT authorizer."""
        authorizer = authorizers.HttpJwtAuthorizer(
            "Cognito",
            f"https://{self.user_pool.user_pool_provider_url}",
            jwt_audience=[self.client.user_pool_client_id],
            authorizer_name="cognito",
        )
        routes = self.api.add_routes(
            path=f"{API_PATH}/{{proxy+}}",
            methods=[apigwv2.HttpMethod.ANY],
            integration=integrations.HttpLambdaIntegration("Function", function),
            authorizer=authorizer,
        )
        return authorizer, routes

    def _deploy_page(
        self, assets: Path, retention: logs.RetentionDays
    ) -> tuple[iam.Role, s3deploy.BucketDeployment]:
        """The page and its ``config.json``, copied into the bucket at deploy time."""
        # The deployment's own role and log group (the stack's rule: no
        # AWSLambdaBasicExecutionRole); the deployment grants it the buckets and invalidation.
        deployer = iam.Role(
            self,
            "DeployRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="stepcrawl console: copies the page into its bucket",
        )
        deploy_logs = logs.LogGroup(
            self, "DeployLogs", retention=retention, removal_policy=RemovalPolicy.DESTROY
        )
        deploy_logs.grant_write(deployer)
        deployment = s3deploy.BucketDeployment(
            self,
            "Page",
            destination_bucket=self.bucket,
            sources=[
                s3deploy.Source.asset(str(assets)),
                s3deploy.Source.json_data(CONFIG_FILE, self.config_json),
            ],
            distribution=self.distribution,
            distribution_paths=["/*"],
            role=deployer,
            log_group=deploy_logs,
            memory_limit=256,
        )
        return deployer, deployment

    def _grant(
        self,
        config: StackConfig,
        function: lambda_.Function,
        storage: Storage,
        queues: WorkQueues,
        machines: Mapping[str, sfn.IStateMachine],
    ) -> None:
        """What the API's routes do on AWS (:mod:`stepcrawl.console`), granted through
        ``grant_*`` where the construct has one.

        | route(s)                   | calls                                                  |
        |----------------------------|--------------------------------------------------------|
        | all (Deployment)           | cloudformation:DescribeStacks on this stack            |
        | runs, start, cancel,       | per machine: StartExecution, ListExecutions,           |
        | topology                   | DescribeStateMachine; per execution: DescribeExecution,|
        |                            | DescribeStateMachineForExecution, GetExecutionHistory, |
        |                            | StopExecution                                          |
        | topology, redrive          | the table: read (task records, breakers, failures);    |
        |                            | redrive writes (re-opens failed URLs)                  |
        | topology                   | the bucket: read ``profiles/`` (data profiles)         |
        | redrive                    | the bucket: the log's spills (read, write) and its     |
        |                            | checkpoints ``views/`` (read, write, delete)           |
        | topology probes            | GetQueueAttributes on the three queues and their DLQs; |
        |                            | ListEventSourceMappings (a mapping's concurrency)      |
        | redrive                    | send to the fetch queue (feed)                         |
        """
        stack = Stack.of(self)
        storage.table.grant_read_write_data(function)
        _grant_objects(function, storage)
        for queue in (queues.control, queues.fetch, queues.parse):
            for each in (queue.queue, queue.dead_letters):
                each.grant(function, "sqs:GetQueueAttributes")
        queues.fetch.queue.grant_send_messages(function)
        for number, (name, machine) in enumerate(sorted(machines.items())):
            machine.grant_start_execution(function)
            machine.grant(function, "states:DescribeStateMachine", "states:ListExecutions")
            # Executions by the machine's fixed name (as the run lock's grant does): a clean
            # ARN, execution:<name>:*, instead of one split out of the machine's ARN.
            named = sfn.StateMachine.from_state_machine_name(
                self, f"Executions{number}", state_machine_name(config, name)
            )
            named.grant_execution(
                function,
                "states:DescribeExecution",
                "states:DescribeStateMachineForExecution",
                "states:GetExecutionHistory",
                "states:StopExecution",
            )
        # CloudFormation has no grant_* method for it: the Deployment finds everything by
        # this stack's outputs. The engine's settings come from the function's environment.
        iam.Grant.add_to_principal(
            grantee=function,
            actions=["cloudformation:DescribeStacks"],
            resource_arns=[stack.stack_id],
        )
        # A queue's consumer concurrency, read through its mapping (by the queue's ARN);
        # ListEventSourceMappings takes no resource (nag.py).
        iam.Grant.add_to_principal(
            grantee=function, actions=["lambda:ListEventSourceMappings"], resource_arns=["*"]
        )


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    """``IAccessLogSettings``: the API's access log group, one JSON object per request."""

    def __init__(self, group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(group)
        self._format = apigateway.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS))

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigateway.AccessLogFormat:
        return self._format


def _grant_objects(function: lambda_.Function, storage: Storage) -> None:
    """The bucket's objects the console's routes touch: one action list per prefix
    (grant_read's Get*/List* groups are wider than the routes need; the bucket is S3-managed
    encrypted, so no key grant)."""
    by_prefix = {
        # A finished task's data profile, where it is too big for its record (quality/).
        PROFILES: ["s3:GetObject"],
        # A re-drive appends to the task's log like any commit: it reads and writes entries
        # too big for an item; it reads the view from its checkpoint (without it, a cold
        # console reads the whole log: 40,000 requests at 100M URLs), and its append may write
        # the next checkpoint and delete the one two back (crawl/checkpoints.py).
        LOG_SPILLS: ["s3:GetObject", "s3:PutObject"],
        VIEWS: ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
    }
    for prefix, actions in by_prefix.items():
        iam.Grant.add_to_principal(
            grantee=function,
            actions=actions,
            resource_arns=[storage.bucket.arn_for_objects(prefix)],
        )
