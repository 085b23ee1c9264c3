"""The CDK app: ``python -m infra.app`` (cdk.json). One stack per stage, checked by cdk-nag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import StackConfig
from infra.nag import suppress_reviewed_findings
from infra.stack import StepcrawlStack

__all__ = ["build_app", "main"]


def build_app(context: Mapping[str, Any] | None = None) -> tuple[App, StepcrawlStack]:
    """The app and its stack; ``context`` adds to (or replaces) cdk.json's context."""
    app = App(context=dict(context or {}))
    config = StackConfig.from_context(app.node.try_get_context)
    stack = StepcrawlStack(
        app,
        config.prefix,
        config=config,
        description=f"stepcrawl serverless crawler and ETL pipelines, stage {config.stage}",
    )
    suppress_reviewed_findings(stack)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack


def main() -> None:
    app, _ = build_app()
    app.synth()


if __name__ == "__main__":
    main()
