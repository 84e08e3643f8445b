"""Alarms on what an operator is otherwise not told: a table whose full load was left pending, and (below)
the refined zone's age."""

from __future__ import annotations

import re

from tests.unit.template.test_template import REPO

DEPLOY = REPO / "docs" / "DEPLOY.md"


def _deploy_row(first_cell: str) -> str:
    rows = [line for line in DEPLOY.read_text().splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, first_cell
    return rows[0]


def test_a_full_load_pending_on_any_table_past_a_threshold_is_alarmed(template):
    """Given the acknowledge publishes FullLoadPendingSeconds once per table (dimension `table`, service
    acknowledge) from each CDC run's report, When a stack is deployed, Then one alarm takes the largest of
    them over every table (a Metrics Insights query: tables are not known when the stack is) and fires above
    FullLoadPendingAlarmSeconds (an hour by default) to the alarm topic; silence (no table pending) is not
    breaching; the dashboard shows it, and DEPLOY's settings and alarms tables say what it means and what to
    run."""
    published = (REPO / "functions" / "acknowledge" / "app.py").read_text()
    assert re.search(r'_publish_per_table\("FullLoadPendingSeconds"', published)
    assert 'add_dimension(name="table"' in published
    alarm = template["Resources"]["FullLoadPendingAlarm"]["Properties"]
    (query,) = alarm["Metrics"]
    assert query["ReturnData"] is True and query["Period"] == 300
    expression = " ".join(query["Expression"].split())
    assert expression == (
        'SELECT MAX(FullLoadPendingSeconds) FROM SCHEMA(DmsIcebergLake, service, "table") '
        "WHERE service = 'acknowledge'"
    )
    namespace = template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    assert namespace == "DmsIcebergLake"
    assert alarm["Threshold"] == {"Ref": "FullLoadPendingAlarmSeconds"}
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    assert {"Ref": "AlarmTopic"} in alarm["AlarmActions"] and {"Ref": "AlarmTopic"} in alarm["OKActions"]
    assert alarm["AlarmName"] == {"Fn::Sub": "${EnvironmentName}-pipeline-full-load-pending"}
    parameter = template["Parameters"]["FullLoadPendingAlarmSeconds"]
    assert parameter["Default"] == 3600 and parameter["MinValue"] >= 300
    grouped = [g for g in template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]]
    assert any("FullLoadPendingAlarmSeconds" in g["Parameters"] for g in grouped)
    assert "`FullLoadPendingSeconds`" in _deploy_row("`FullLoadPendingAlarmSeconds`")
    what_to_do = _deploy_row("`full-load-pending`")
    assert "lakectl --stack-name <stack> status" in what_to_do and "reload <schema>.<table>" in what_to_do
