"""moto patched: an AWS::KMS::Key with Tags deploys through CloudFormation, as on AWS."""

from __future__ import annotations

import json

import pytest
from moto.kms.models import Key
from tests.integration.conftest import Moto

from stepcrawl.emulator.moto_patches import apply_moto_patches

TEMPLATE = {
    "Resources": {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "Description": "alerts",
                "EnableKeyRotation": True,
                "KeyPolicy": {"Version": "2012-10-17", "Statement": []},
                # CloudFormation's tag format for every resource, KMS keys included.
                "Tags": [{"Key": "project", "Value": "stepcrawl"}],
            },
        }
    }
}


def test_a_tagged_key_deploys_and_keeps_its_tags(moto: Moto) -> None:
    apply_moto_patches()  # the fixture applies them too: idempotent
    cfn = moto.client("cloudformation")
    cfn.create_stack(StackName="keys", TemplateBody=json.dumps(TEMPLATE))
    (resource,) = cfn.describe_stack_resources(StackName="keys")["StackResources"]
    key_id = resource["PhysicalResourceId"]
    tags = moto.client("kms").list_resource_tags(KeyId=key_id)["Tags"]
    assert tags == [{"TagKey": "project", "TagValue": "stepcrawl"}]
    assert moto.client("kms").get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"]


def test_unpatched_moto_fails_on_the_documented_tag_format(
    moto: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Key.create_from_cloudformation_json.__func__.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(Key, "create_from_cloudformation_json", classmethod(original))
    with pytest.raises(Exception):  # noqa: B017, PT011 - moto's 500 surfaces as a parse error
        moto.client("cloudformation").create_stack(
            StackName="keys", TemplateBody=json.dumps(TEMPLATE)
        )
