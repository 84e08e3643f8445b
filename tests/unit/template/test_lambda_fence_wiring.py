"""The template and both state machines wire the Lambdas' fence, alarms and permissions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def machines() -> dict[str, dict]:
    return {
        name: json.loads((REPO / "statemachine" / name).read_text())
        for name in ("pipeline.asl.json", "pipeline.emr-serverless.asl.json")
    }


@pytest.mark.parametrize("machine", sorted(machines()))
def test_the_acknowledge_gets_the_handed_out_version_and_the_execution_and_a_lost_lease_ends_in_lease_lost(
    machine,
):
    """The acknowledge retires only the manifest version the drain handed out, for the lease holder: both
    state machines pass them, never retry a refusal, and route LeaseLostError as the drain does."""
    states = machines()[machine]["States"]
    acknowledge = states["Acknowledge"]
    payload = acknowledge["Parameters"]["Payload"]
    assert payload["manifest_etag.$"] == "$.batch.value.manifest_etag"
    assert payload["execution_arn.$"] == "$$.Execution.Id"
    no_retry = [r for r in acknowledge["Retry"] if r["MaxAttempts"] == 0]
    assert {"LeaseLostError", "RunNotAppliedError", "ManifestNotPendingError"} <= set(
        no_retry[0]["ErrorEquals"]
    )
    lost = [c for c in acknowledge["Catch"] if c["ErrorEquals"] == ["LeaseLostError"]]
    assert lost and lost[0]["Next"] == states["DrainQueue"]["Catch"][0]["Next"] == "LeaseLost"
    assert acknowledge["Catch"].index(lost[0]) < len(acknowledge["Catch"]) - 1  # before States.ALL


def test_the_full_load_job_gets_the_reload_tables_as_the_reloads_function_writes_them(asl):
    """--tables is the reloads function's `tables_argument` (a JSON array)."""
    assert (
        asl["States"]["RunReload"]["Parameters"]["Arguments"]["--tables.$"]
        == "$.reload.value.tables_argument"
    )


ALARMS = {
    "ChangesIgnoredAsOlderAlarm": [("ChangesIgnoredAsOlder", "acknowledge")],
    "MovedAsideBatchAgingAlarm": [("OldestMovedAsideBatchAgeDays", "queue-drain")],
    "ReloadRequestsSetAsideAlarm": [
        ("ReloadRequestsSetAside", "reloads"),
        ("ReloadRequestsSetAside", "queue-drain"),
    ],
}


@pytest.mark.parametrize("name", sorted(ALARMS))
def test_the_new_lambda_metrics_are_alarmed_to_the_topic(template, name):
    alarm = template["Resources"][name]["Properties"]
    metrics = [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
    metrics = metrics or [alarm]
    watched = [(m["MetricName"], m["Dimensions"][0]["Value"]) for m in metrics]
    assert watched == ALARMS[name]
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_the_aging_alarm_fires_at_half_the_tombstone_retention(template):
    alarm = template["Resources"]["MovedAsideBatchAgingAlarm"]["Properties"]
    (share,) = [m for m in alarm["Metrics"] if m.get("ReturnData")]
    assert share["Expression"] == {"Fn::Sub": "FILL(age, 0) / ${TombstoneRetentionDays}"}
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0.5, "GreaterThanOrEqualToThreshold")


def _statements(template, function: str) -> list[dict]:
    return template["Resources"][function]["Properties"]["Policies"][0]["Statement"]


def _actions(statement: dict) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def test_the_drain_may_ask_the_raw_bucket_whether_an_object_exists_and_get_a_404(template):
    """HeadObject needs s3:GetObject; a missing key is a 404 (dead-lettered) only with s3:ListBucket."""
    statements = _statements(template, "QueueDrainFunction")
    head = [s for s in statements if s["Resource"] == {"Fn::Sub": "${RawBucket.Arn}/${RawPrefix}/*"}]
    assert head and _actions(head[0]) == ["s3:GetObject"]
    listing = [s for s in statements if s["Resource"] == {"Fn::GetAtt": ["RawBucket", "Arn"]}]
    assert listing and listing[0]["Condition"] == {"StringLike": {"s3:prefix": {"Fn::Sub": "${RawPrefix}/*"}}}


def test_the_acknowledge_reads_the_lease_and_gets_a_404_for_a_missing_one(template):
    statements = _statements(template, "AcknowledgeFunction")
    lease = {"Fn::Sub": "${ArtifactsBucket.Arn}/locks/pipeline-lease.json"}
    assert any(s["Resource"] == lease and "s3:GetObject" in _actions(s) for s in statements)
    assert any(
        s.get("Condition") == {"StringLike": {"s3:prefix": "locks/pipeline-lease.json"}} for s in statements
    )
    variables = template["Resources"]["AcknowledgeFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["LEASE_KEY"] == "locks/pipeline-lease.json"


def test_corrupt_reload_requests_can_be_set_aside_by_both_writers(template):
    aside = {"Fn::Sub": "${ArtifactsBucket.Arn}/manifests/reloads-failed/*"}
    for function in ("QueueDrainFunction", "ReloadsFunction"):
        statements = _statements(template, function)
        resources = [
            r
            for s in statements
            if "s3:PutObject" in _actions(s)
            for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        ]
        assert aside in resources, function
