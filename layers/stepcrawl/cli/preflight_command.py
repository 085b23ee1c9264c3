"""``stepcrawl preflight``: checks an account (and this machine) before a deploy, and says
what to fix (:mod:`stepcrawl.preflight`; docs/deploy.md, "Preflight").

The stack's settings are the CDK app's own: cdk.json's context with the ``-c`` values given
here on top, validated by ``infra.config`` as ``cdk deploy`` would, so a check judges the
stack that deploy would create.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.table import Table

from stepcrawl.cli import OutputFormat, _or_exit, app, key_values, out
from stepcrawl.cli.stack_commands import print_table
from stepcrawl.errors import ConfigError

if TYPE_CHECKING:
    from stepcrawl.preflight import Preflight, StackSettings

__all__ = ["QUALIFIER_CONTEXT", "stack_settings"]

#: The context key of the bootstrap qualifier (the default synthesizer's, as infra/nag.py reads).
QUALIFIER_CONTEXT: Final = "@aws-cdk/core:bootstrapQualifier"
#: The functions no queue feeds, one execution each at a time (infra/functions.py).
_UNQUEUED: Final = ("sweeper", "scaler", "notify")
_COLOURS: Final = {"ok": "green", "warn": "yellow", "fail": "red"}


@app.command()
def preflight(
    profile: Annotated[
        str | None, typer.Option("--profile", help="The AWS profile (default: the usual chain).")
    ] = None,
    region: Annotated[
        str | None, typer.Option("--region", help="The region (default: the profile's).")
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            help="One endpoint for every service: an emulator (stepcrawl serve's), not AWS.",
        ),
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            "-c",
            metavar="KEY=VALUE",
            help="A CDK context value, as cdk deploy takes it (repeatable); cdk.json's apply "
            "underneath.",
        ),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="text for people, json for tools.")
    ] = OutputFormat.text,
) -> None:
    """Check an account before a deploy: bootstrap, Lambda concurrency, Scheduler and X-Ray,
    the alert secrets, the render image. Exit 1 if a check fails."""
    from stepcrawl.preflight import AwsAccount, probe_docker, run_preflight  # noqa: PLC0415

    settings = _or_exit(lambda: stack_settings(key_values(context or [], "--context", "KEY=VALUE")))
    account = _or_exit(
        lambda: AwsAccount.from_session(profile=profile, region=region, endpoint_url=endpoint_url)
    )
    report = run_preflight(account, settings, probe_docker() if settings.renders_pages else None)
    if output is OutputFormat.json:
        out.print_json(
            json.dumps(
                {
                    "account": report.target.account if report.target else None,
                    "region": account.region,
                    "failed": report.failed,
                    "checks": [r.as_dict() for r in report.results],
                }
            )
        )
    else:
        print_table(_table(report, account.region))
        counts = ", ".join(f"{n} {s}" for s, n in report.counts().items())
        verdict = "[red]fix the failed checks before deploying[/red]" if report.failed else ""
        out.print(f"{counts}{'. ' if verdict else ''}{verdict}")
    if report.failed:
        raise typer.Exit(1)


def stack_settings(overrides: Mapping[str, str]) -> StackSettings:
    """The settings of the stack ``cdk deploy -c ...`` would create, from the CDK app's own
    configuration (``infra.config``); :class:`ConfigError` for a bad value, as the synth."""
    from stepcrawl.pipeline import discover, load_pipeline  # noqa: PLC0415
    from stepcrawl.preflight import DEFAULT_QUALIFIER, QueueMapping, StackSettings  # noqa: PLC0415

    try:
        # The CDK app's settings (it needs aws-cdk-lib, the cdk extra): only a deploy needs it.
        from infra.config import ContextError, StackConfig, cdk_json_context  # noqa: PLC0415

        from stepcrawl.crawl.render import renders_any  # noqa: PLC0415
    except ImportError as missing:
        raise ConfigError(
            f"preflight reads the stack's settings with the CDK app (infra/), which needs the "
            f"CDK libraries: .venv/bin/pip install -e '.[cdk]' ({missing})"
        ) from None
    context: dict[str, Any] = {**cdk_json_context(), **overrides}
    try:
        config = StackConfig.from_context(context.get)
    except ContextError as invalid:
        raise ConfigError(str(invalid)) from None
    pipelines = [load_pipeline(path) for path in discover([config.pipelines_dir])]
    renders = any(renders_any(task) for pipeline in pipelines for task in pipeline.tasks)
    mappings = [
        QueueMapping("dispatch", "dispatch_max_concurrency", config.dispatch_max_concurrency),
        QueueMapping("fetch", "fetch_max_concurrency", config.fetch_max_concurrency, scaled=True),
        QueueMapping("parse", "parse_max_concurrency", config.parse_max_concurrency, scaled=True),
    ]
    if renders:  # the render function and its queue exist only then (infra/render.py)
        mappings.append(
            QueueMapping("render", "render_max_concurrency", config.render_max_concurrency)
        )
    return StackSettings(
        stage=config.stage,
        mappings=tuple(mappings),
        scaler_max_concurrency=config.scaler.max_concurrency,
        other_functions=_UNQUEUED + (("console",) if config.console.enabled else ()),
        alert_secrets=config.alert_webhook_secrets,
        renders_pages=renders,
        bootstrap_qualifier=str(context.get(QUALIFIER_CONTEXT) or DEFAULT_QUALIFIER),
    )


def _table(report: Preflight, region: str) -> Table:
    where = f"account {report.target.account}, {region}" if report.target else region
    table = Table(title=f"stepcrawl preflight ({where})")
    table.add_column("check")
    table.add_column("result")
    # Folded, never cut: a fix is a command to copy, an ARN or a parameter name whole.
    table.add_column("found", overflow="fold")
    table.add_column("to fix", overflow="fold")
    for result in report.results:
        colour = _COLOURS[result.status.value]
        table.add_row(
            result.name,
            f"[{colour}]{result.status.value}[/{colour}]",
            result.found,
            result.fix or "",
        )
    return table
