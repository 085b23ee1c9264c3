"""The CDK app: ``python -m infra.app`` (cdk.json). One stack per stage, checked by cdk-nag."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from infra import package_size
from infra.config import StackConfig
from infra.nag import acknowledge_reviewed_findings
from infra.stack import StepcrawlStack

__all__ = ["build_app", "main"]


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | None = None
) -> tuple[App, StepcrawlStack]:
    """The app and its stack. Under the CDK CLI the context comes from cdk.json and ``-c``;
    ``context`` adds to it (tests pass cdk.json's context themselves)."""
    app = App(context=dict(context or {}), outdir=outdir)
    config = StackConfig.from_context(app.node.try_get_context)
    stack = StepcrawlStack(
        app,
        config.prefix,
        config=config,
        description=f"stepcrawl serverless crawler and ETL pipelines, stage {config.stage}",
    )
    # Cost allocation and ownership: every taggable resource says what and which stage.
    Tags.of(stack).add("project", "stepcrawl")
    Tags.of(stack).add("stepcrawl:stage", config.stage)
    acknowledge_reviewed_findings(stack)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack


def main() -> None:
    app, stack = build_app()
    assembly = app.synth()
    # Lambda refuses a package over its unzipped limit only at deploy: say it now.
    package_size.report(Path(assembly.directory), stack.artifact_id)


if __name__ == "__main__":
    main()
