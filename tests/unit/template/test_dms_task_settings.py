"""The DMS task the stack creates (CreateDmsTask=true, the default): its settings are parameters with safe
defaults, and the default table mappings leave DMS's own tables out."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from localaws_plugin.dms_format import TableMapping

from deploy import preflight_checks, stack_names


def _task_settings(template: dict[str, Any], **values: str) -> dict[str, Any]:
    """The task's ReplicationTaskSettings as CloudFormation resolves them for these parameter values."""
    parameters = {n: str(p.get("Default", "")) for n, p in template["Parameters"].items()} | values
    text, variables = template["Resources"]["DmsReplicationTask"]["Properties"]["ReplicationTaskSettings"][
        "Fn::Sub"
    ]
    condition = template["Conditions"][variables["Lobs"]["Fn::If"][0]]["Fn::Equals"]
    limited = parameters[condition[0]["Ref"]] == condition[1]
    local = {"Lobs": variables["Lobs"]["Fn::If"][1 if limited else 2]}
    return json.loads(re.sub(r"\$\{(\w+)\}", lambda m: (local | parameters)[m[1]], text))


def test_the_task_logs_to_cloudwatch_and_keeps_lobs_up_to_a_megabyte_by_default(template):
    """Given the defaults, Then the task logs to CloudWatch (the DMS alarms point at that log) and writes LOBs
    in limited mode up to 1024 KB (DMS's own default, 32 KB, cuts any longer JSON or text)."""
    assert _task_settings(template) == {
        "Logging": {"EnableLogging": True},
        "TargetMetadata": {
            "SupportLobs": True,
            "LimitedSizeLobMode": True,
            "FullLobMode": False,
            "LobMaxSize": 1024,
        },
    }
    for kind in ("Source", "Target"):
        description = template["Resources"][f"DmsCdcLatency{kind}Alarm"]["Properties"]["AlarmDescription"]
        assert (
            "log group dms-tasks-<replication instance name>" in description
            and "DmsTaskLogging" in description
        )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"DmsTaskLogging": "false"}, {"EnableLogging": False}),
        ({"DmsLobMode": "none"}, {"SupportLobs": False, "LimitedSizeLobMode": False}),
        ({"DmsLobMaxSizeKb": "64"}, {"LobMaxSize": 64}),
    ],
)
def test_each_task_setting_follows_its_parameter(template, values, expected):
    settings = _task_settings(template, **values)
    flat = settings["Logging"] | settings["TargetMetadata"]
    assert {k: flat[k] for k in expected} == expected
    assert flat["FullLobMode"] is False  # the S3 target has none


def test_the_file_cadence_is_a_parameter_with_dms_defaults(template):
    settings = template["Resources"]["DmsTargetEndpoint"]["Properties"]["S3Settings"]
    assert settings["CdcMaxBatchInterval"] == {"Ref": "DmsCdcMaxBatchIntervalSeconds"}
    assert settings["CdcMinFileSize"] == {"Ref": "DmsCdcMinFileSizeKb"}
    parameters = template["Parameters"]
    assert (
        parameters["DmsCdcMaxBatchIntervalSeconds"]["Default"],
        parameters["DmsCdcMinFileSizeKb"]["Default"],
    ) == (
        60,
        32000,
    )


def test_the_default_mappings_take_every_table_but_dms_own(template):
    """Given the default DmsTableMappings read as the local DMS reads them (DMS's wildcards), Then the source's
    tables are selected and DMS's own objects are not: the awsdms schema, and awsdms_… tables in any schema
    (the DDL audit table and the heartbeat of a PostgreSQL source); the change-sequence column and the
    pk-only before-image rule stay."""
    mapping = TableMapping.parse(template["Parameters"]["DmsTableMappings"]["Default"])
    tables = [
        ("public", "orders"),
        ("sales", "awsdms"),
        ("public", "awsdms_ddl_audit"),
        ("public", "awsdms_heartbeat"),
        ("awsdms", "heartbeat"),
        ("AWSDMS", "x"),
    ]
    assert [mapping.selects(s, t) for s, t in tables] == [True, True, False, False, False, False]
    assert [c.name for c in mapping.added_columns_for("public", "orders")] == ["AR_H_CHANGE_SEQ"]
    assert mapping.before_image_prefix == "BI_" and mapping.before_image_pk_only


def test_a_file_cadence_slower_than_the_settle_time_is_refused_before_the_deploy():
    """Given DmsCdcMaxBatchIntervalSeconds at or above DmsSettleSeconds, Then the preflight says which to change;
    the defaults (60 s and 300 s) pass."""
    defaults = stack_names.parameter_defaults()

    def target(**values: str) -> preflight_checks.Target:
        return preflight_checks.Target(
            "lake", defaults | values, None, "123456789012", "eu-west-1", "arn:aws:iam::1:user/a"
        )

    assert preflight_checks.cadence_problems(target()) == []
    (problem,) = preflight_checks.cadence_problems(target(DmsCdcMaxBatchIntervalSeconds="600"))
    assert "DmsCdcMaxBatchIntervalSeconds=600 but DmsSettleSeconds=300" in problem
