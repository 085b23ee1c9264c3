"""What local mode deploys into moto: the template minus what moto cannot create."""

from __future__ import annotations

from typing import Any

from stepcrawl.emulator.server import moto_ready_template

GROUP_ARN: Any = {"Fn::GetAtt": ["Schedules", "Arn"]}


def _template() -> dict[str, Any]:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"aws:SourceArn": GROUP_ARN}},
            }
        ],
    }
    return {
        "Resources": {
            "Schedules": {"Type": "AWS::Scheduler::ScheduleGroup", "Properties": {}},
            "Schedule": {
                "Type": "AWS::Scheduler::Schedule",
                "Properties": {"GroupName": {"Ref": "Schedules"}},
            },
            "ScheduleRole": {
                "Type": "AWS::IAM::Role",
                "Properties": {"AssumeRolePolicyDocument": trust},
            },
            "Dashboard": {
                "Type": "AWS::CloudWatch::Dashboard",
                "Properties": {"DashboardBody": {"Fn::Join": ["", [GROUP_ARN]]}},
            },
        }
    }


def test_a_schedule_role_stays_without_its_condition_on_the_dropped_group() -> None:
    """The role is what the local scheduler delivers with; its trust condition names the
    schedule group moto cannot create (and would not evaluate)."""
    ready = moto_ready_template(_template())["Resources"]
    assert set(ready) == {"ScheduleRole"}  # the group, the schedule and what names them go
    (statement,) = ready["ScheduleRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert "Condition" not in statement
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}


def test_the_original_template_is_not_changed() -> None:
    template = _template()
    moto_ready_template(template)
    statement = template["Resources"]["ScheduleRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert "Condition" in statement["Statement"][0]
