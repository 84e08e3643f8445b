"""Alarms on what an operator is otherwise not told: a table whose full load was left pending, and (below)
the refined zone's age."""

from __future__ import annotations

import json
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


REFINED_REPORT = "manifests/reports/refine-latest.json"


def _watchdog_statements(template) -> list[dict]:
    (policy,) = template["Resources"]["WatchdogFunction"]["Properties"]["Policies"]
    return policy["Statement"]


def test_the_refined_zone_left_behind_is_alarmed_from_the_watchdogs_lag(template):
    """Given the watchdog (every 5 minutes) publishes RefinedLagSeconds on a stack with refined models, When a
    stack is deployed, Then an alarm takes its maximum in minutes above RefinedLagAlarmMinutes (default an
    hour: about three times the default RefineEveryMinutes and a run), to the alarm topic; missing data is not
    breaching (a stack without models publishes none and must not alarm; a dead watchdog is not-running's,
    which breaches), and the watchdog measures only when models are deployed (the condition the loop's
    refine uses)."""
    alarm = template["Resources"]["RefinedLagAlarm"]["Properties"]
    watched = [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert watched == [
        {
            "Namespace": "DmsIcebergLake",
            "MetricName": "RefinedLagSeconds",
            "Dimensions": [{"Name": "service", "Value": "watchdog"}],
        }
    ]
    assert [m["MetricStat"]["Stat"] for m in alarm["Metrics"] if "MetricStat" in m] == ["Maximum"]
    (shown,) = [m for m in alarm["Metrics"] if m.get("ReturnData")]
    assert shown["Expression"] == "lag / 60"
    assert alarm["Threshold"] == {"Ref": "RefinedLagAlarmMinutes"}
    assert alarm["TreatMissingData"] == "notBreaching"
    assert template["Resources"]["NoExecutionRunningAlarm"]["Properties"]["TreatMissingData"] == "breaching"
    assert {"Ref": "AlarmTopic"} in alarm["AlarmActions"] and {"Ref": "AlarmTopic"} in alarm["OKActions"]
    parameter = template["Parameters"]["RefinedLagAlarmMinutes"]
    refine_every = int(template["Parameters"]["RefineEveryMinutes"]["Default"])
    assert parameter["Default"] >= 3 * refine_every
    watchdog = template["Resources"]["WatchdogFunction"]["Properties"]
    environment = watchdog["Environment"]["Variables"]
    assert environment["MEASURE_REFINED_LAG"] == {"Fn::If": ["RefineModelsDeployed", "true", "false"]}
    assert environment["ARTIFACTS_BUCKET"] == {"Ref": "ArtifactsBucket"}
    assert environment["MANIFEST_PREFIX"] == "manifests"
    published = (REPO / "functions" / "watchdog" / "app.py").read_text()
    assert 'add_metric(name="RefinedLagSeconds"' in published
    settings = "`RefinedLagAlarmMinutes`"
    assert "`RefinedLagSeconds`" in _deploy_row(settings) and "RefinedLagSeconds" in _deploy_row(
        "`refined-stale`"
    )


def test_the_watchdog_reads_the_refine_report_and_lists_retired_batches_and_nothing_else(template):
    """Given the watchdog's new reads, Then its S3 rights are s3:GetObject on the refine report's one key and
    s3:ListBucket limited to the done manifests' folder and that key (a missing report reads as 404): no
    write, no other object; the refine job's roles may already write the key (the run reports' folder)."""
    s3_statements = [s for s in _watchdog_statements(template) if str(s["Action"]).startswith("s3:")]
    assert s3_statements == [
        {
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": {"Fn::Sub": "${ArtifactsBucket.Arn}/" + REFINED_REPORT},
        },
        {
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": {"Fn::GetAtt": ["ArtifactsBucket", "Arn"]},
            "Condition": {"StringLike": {"s3:prefix": ["manifests/done/", REFINED_REPORT]}},
        },
    ]
    from lake_contracts.layout import ArtifactsLayout

    layout = ArtifactsLayout("manifests")
    assert layout.refined_report_key == REFINED_REPORT and layout.done_prefix == "manifests/done/"
    reports = {"Fn::Sub": "${ArtifactsBucket.Arn}/manifests/reports/*"}
    for role in ("GlueJobRole", "EmrJobRole"):
        statements = template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        writers = [
            s for s in statements if "s3:PutObject" in s.get("Action", ()) and reports in s["Resource"]
        ]
        assert writers, role


def test_every_refine_the_loop_starts_writes_the_refreshed_report_to_the_watchdogs_key(asl):
    """Given the loop's two refine steps (after batches, and on an idle queue) on either engine, Then each
    passes --refreshed_report_uri s3://<artifacts>/manifests/reports/refine-latest.json (before, none did:
    nothing recorded when the refined zone last caught up)."""
    uri = "s3://${ArtifactsBucket}/" + REFINED_REPORT
    for step in ("RunRefine", "RunIdleRefine"):
        assert asl["States"][step]["Parameters"]["Arguments"]["--refreshed_report_uri"] == uri, step
    emr = json.loads((REPO / "statemachine" / "pipeline.emr-serverless.asl.json").read_text())
    for step in ("RunRefine", "RunIdleRefine"):
        arguments = emr["States"][step]["Parameters"]["JobDriver"]["SparkSubmit"]["EntryPointArguments.$"]
        assert f"'--refreshed_report_uri', '{uri}'" in arguments, step
