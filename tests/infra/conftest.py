"""Shared fixtures of the CDK tests: one synthesized default app per session, and helpers.

Bundling is skipped (``aws:cdk:bundling-stacks: []``): CDK computes the same asset hashes
without building the layers. ``test_cli_synth.py`` builds them for real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO = Path(__file__).resolve().parents[2]

from aws_cdk.assertions import Template  # noqa: E402 - after the Node warning switch
from infra.app import build_app  # noqa: E402
from infra.config import cdk_json_context  # noqa: E402
from infra.stack import StepcrawlStack  # noqa: E402

SKIP_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


@dataclass
class Synth:
    """A synthesized app: the stack, its template (assertions and plain JSON), the outdir."""

    stack: StepcrawlStack
    template: Template
    outdir: Path

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.template.to_json())
        return data

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        """Resources of ``kind``; their ``Tags`` are left out (test_stack checks them once)."""
        found = {}
        for logical, resource in self.json["Resources"].items():
            if resource["Type"] == kind:
                properties = dict(resource.get("Properties", {}))
                properties.pop("Tags", None)
                found[logical] = {**resource, "Properties": properties}
        return found

    def one(self, kind: str, path_part: str) -> tuple[str, dict[str, Any]]:
        """The resource of ``kind`` whose logical id contains ``path_part``."""
        found = [(k, v) for k, v in self.resources(kind).items() if path_part in k]
        assert len(found) == 1, (kind, path_part, [k for k, _ in found])
        return found[0]

    def logical_id(self, construct: Any) -> str:
        resource = construct.node.default_child
        value: str = self.stack.resolve(self.stack.get_logical_id(resource))
        return value


def synth(tmp: Path, **overrides: Any) -> Synth:
    context = {**cdk_json_context(), **SKIP_BUNDLING, **overrides}
    _app, stack = build_app(context, outdir=str(tmp))
    template = Template.from_stack(stack)  # synthesizes the app, cdk-nag included
    return Synth(stack=stack, template=template, outdir=tmp)


@pytest.fixture
def cdk_context() -> dict[str, Any]:
    """The context of cdk.json (what `cdk synth` starts from)."""
    return cdk_json_context()


@pytest.fixture(scope="session")
def default(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app exactly as `cdk synth` builds it from cdk.json (layers not bundled)."""
    return synth(tmp_path_factory.mktemp("cdk-default"))


@pytest.fixture(scope="session")
def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synth]:
    """Synthesize a variant: ``synthesize(stage="prod", ...)`` (context overrides)."""

    def make(**overrides: Any) -> Synth:
        return synth(tmp_path_factory.mktemp("cdk-variant"), **overrides)

    return make
