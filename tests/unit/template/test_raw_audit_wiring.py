"""The deployed raw audit knows the deployment's tombstone retention and alarms on the lost files it will not
re-send (a re-sent file older than the tombstones could bring deleted rows back)."""

from __future__ import annotations

from typing import Any


def test_the_raw_audit_gets_the_tombstone_retention_and_its_refusals_reach_the_alarm_topic(
    template: dict[str, Any],
) -> None:
    """Given the template, Then the raw audit job runs with `--tombstone_retention_days` set from
    TombstoneRetentionDays (the maintenance job's own setting), and FilesBeyondTombstoneRetention (service
    raw-audit) alarms on the topic at the first file."""
    resources = template["Resources"]
    arguments = resources["RawAuditJob"]["Properties"]["DefaultArguments"]
    maintenance = resources["MaintenanceJob"]["Properties"]["DefaultArguments"]
    assert arguments["--tombstone_retention_days"] == {"Fn::Sub": "${TombstoneRetentionDays}"}
    assert arguments["--tombstone_retention_days"] == maintenance["--tombstone_retention_days"]
    alarm = resources["FilesBeyondTombstoneRetentionAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("DmsIcebergLake", "FilesBeyondTombstoneRetention")
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "raw-audit"}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]
