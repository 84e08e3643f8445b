"""DMS health during CDC and the full-load wait's history guard, as the template and the
state machine promise them. The Lambda's side is tested in tests/unit/functions/test_dms_task_health.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.template.test_template import _evaluate, _route
from tools.emr_serverless_asl import REPO

STEP_FUNCTIONS_HISTORY_LIMIT = 25_000
TASK_ARN = {"Fn::If": ["CreateDms", {"Ref": "DmsReplicationTask"}, {"Ref": "DmsReplicationTaskArn"}]}

# History events each state type adds (Step Functions' event types): a Lambda task enters, is scheduled,
# starts, succeeds and exits; a Choice or a Wait enters and exits.
EVENTS = {"Task": 5, "Choice": 2, "Wait": 2, "Pass": 2}


@pytest.fixture(scope="module")
def emr_asl() -> dict[str, Any]:
    return json.loads((REPO / "statemachine" / "pipeline.emr-serverless.asl.json").read_text())


# ---------------------------------------------------------------- the template
def test_a_stopped_or_failed_dms_task_is_an_event_to_the_alarm_topic(template):
    """Given the DMS task (created by the stack or named by DmsReplicationTaskArn) stops or fails, When DMS
    puts its state-change event on the default bus, Then the rule matches exactly that task's stop and
    failure and publishes the event to the alarm topic, which accepts it from this rule."""
    rule = template["Resources"]["DmsTaskStoppedRule"]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.dms"],
        "detail-type": ["DMS Replication Task State Change"],
        "resources": [TASK_ARN],
        "detail": {"eventType": ["REPLICATION_TASK_STOPPED", "REPLICATION_TASK_FAILED"]},
    }
    assert rule["Targets"] == [{"Id": "alarm-topic", "Arn": {"Ref": "AlarmTopic"}}]
    statements = template["Resources"]["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    allowed = [
        arn
        for s in statements
        if s["Principal"] == {"Service": "events.amazonaws.com"}
        for arn in s["Condition"]["ArnEquals"]["aws:SourceArn"]
    ]
    assert {"Fn::GetAtt": ["DmsTaskStoppedRule", "Arn"]} in allowed


def _select_split(expression: dict[str, Any], value: str) -> str:
    index, (separator, _) = expression["Fn::Select"][0], expression["Fn::Select"][1]["Fn::Split"]
    return value.split(separator)[int(index)]


@pytest.mark.parametrize("kind", ["Source", "Target"])
def test_cdc_latency_is_alarmed_on_the_tasks_own_metric(template, kind):
    """Given DMS publishes CDCLatencySource/CDCLatencyTarget (AWS/DMS) per replication instance and task,
    Then an alarm watches each for the task the pipeline reads (its resource ID, the last part of its ARN),
    above CdcLatencyAlarmMinutes for two 5-minute periods, to the topic; it exists when the instance's
    identifier is given (a dimension no ARN holds)."""
    alarm = template["Resources"][f"DmsCdcLatency{kind}Alarm"]
    assert alarm["Condition"] == "HasDmsInstanceIdentifier"
    assert template["Conditions"]["HasDmsInstanceIdentifier"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "DmsReplicationInstanceIdentifier"}, ""]}]
    }
    properties = alarm["Properties"]
    (stat,) = [m["MetricStat"] for m in properties["Metrics"] if "MetricStat" in m]
    (returned,) = [m for m in properties["Metrics"] if m.get("ReturnData")]
    assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"]) == ("AWS/DMS", f"CDCLatency{kind}")
    assert stat["Stat"] == "Maximum" and returned["Expression"] == "latency / 60"
    dimensions = {d["Name"]: d["Value"] for d in stat["Metric"]["Dimensions"]}
    assert dimensions["ReplicationInstanceIdentifier"] == {"Ref": "DmsReplicationInstanceIdentifier"}
    task = dimensions["ReplicationTaskIdentifier"]
    assert task["Fn::Select"][1]["Fn::Split"][1] == TASK_ARN
    assert _select_split(task, "arn:aws:dms:eu-west-1:123456789012:task:ABCDEFGHIJ") == "ABCDEFGHIJ"
    assert properties["Threshold"] == {"Ref": "CdcLatencyAlarmMinutes"}
    assert properties["ComparisonOperator"] == "GreaterThanThreshold"
    assert properties["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_the_dms_lambda_may_name_the_tables_a_full_load_errored_on(template):
    statements = template["Resources"]["DmsProgressFunction"]["Properties"]["Policies"][0]["Statement"]
    assert {"Effect": "Allow", "Action": "dms:DescribeTableStatistics", "Resource": TASK_ARN} in statements


# ---------------------------------------------------------------- the state machine
@pytest.mark.parametrize("definition", ["glue", "emr"])
def test_every_pass_checks_the_dms_task_and_a_stopped_one_fails_the_execution(asl, emr_asl, definition):
    """Given a pass ends without rollover, Then the next one first asks the DMS Lambda for the task's health;
    When the task is stopped or failed (DmsTaskStoppedError, never retried), Then the execution fails in
    DmsTaskStopped whose cause is the Lambda's message (DMS's reason); any other failure to read the status
    only skips the check: the pass drains on."""
    states = (asl if definition == "glue" else emr_asl)["States"]
    assert _route({"States": states}, "RollOver?", {"history": {"value": {"rollover": False}}})[-1] == (
        "CheckDmsTask"
    )
    check = states["CheckDmsTask"]
    assert check["Resource"] == "arn:aws:states:::lambda:invoke"
    assert check["Parameters"] == {
        "FunctionName": "${DmsProgressFunctionArn}",
        "Payload": {"action": "health"},
    }
    assert check["Next"] == "DrainQueue" and check["ResultPath"] is None
    assert check["Retry"][0] == {"ErrorEquals": ["DmsTaskStoppedError"], "MaxAttempts": 0}
    stopped, other = check["Catch"]
    assert stopped == {
        "ErrorEquals": ["DmsTaskStoppedError"],
        "ResultPath": "$.error",
        "Next": "DmsTaskStopped",
    }
    assert states["DmsTaskStopped"] == {
        "Type": "Fail",
        "Error": "DmsTaskStopped",
        "CausePath": "$.error.Cause",
        "Comment": states["DmsTaskStopped"]["Comment"],
    }
    assert other["ErrorEquals"] == ["States.ALL"] and other["Next"] == "DrainQueue"
    assert other["ResultPath"] not in ("$", "$.loop", "$.config", "$.lease", "$.batch")


def test_a_pass_costs_the_check_once_and_the_history_guard_still_sees_every_pass(asl):
    """The check runs once per pass (a pass is at least LoopWaitSeconds idle, or one CDC run): one Task,
    no Choice, so 5 history events more per pass; every way into the next pass still goes through
    CheckHistory first."""
    states = asl["States"]
    into_check = [n for n, s in states.items() if "CheckDmsTask" in {s.get("Next"), s.get("Default")}]
    assert into_check == ["RollOver?"]
    into_drain = sorted(
        n
        for n, s in states.items()
        if "DrainQueue" in {s.get("Next"), s.get("Default"), *(c["Next"] for c in s.get("Choices", []))}
    )
    # the loop's entries (fresh, rolled over, upgraded counters) and the checked pass
    assert into_drain == ["CheckDmsTask", "KeepLoopState", "StartLoop", "UpgradeLoopState"]


def test_the_full_load_wait_goes_through_the_history_guard_and_rolls_over(asl, template):
    """Given a full load that lasts days (9 events a poll: ~46 h at a 60 s poll reaches 25,000), When the
    wait polls, Then each poll passes the history guard; Given it says rollover, Then a successor is started
    (named as StartNextExecution names it, so the lease goes to it) with an input that waits for the full
    load again (no skip_full_load, no loop counters yet), and this execution succeeds."""
    states = asl["States"]
    assert states["WaitForFullLoad"]["Next"] == "CheckFullLoadHistory"
    guard = states["CheckFullLoadHistory"]
    assert guard["Parameters"] == states["CheckHistory"]["Parameters"]
    assert guard["ResultPath"] == "$.history" and guard["Next"] == "FullLoadRollOver?"
    assert {c["Next"] for c in guard["Catch"]} == {"HistoryGuardFailed"}
    assert _route(asl, "FullLoadRollOver?", {"history": {"value": {"rollover": False}}})[-1] == (
        "CheckFullLoadProgress"
    )
    assert _route(asl, "FullLoadRollOver?", {"history": {"value": {"rollover": True}}})[-1] == (
        "HandOverFullLoadWait"
    )
    hand = states["HandOverFullLoadWait"]
    assert hand["Resource"] == "arn:aws:states:::states:startExecution"
    assert hand["Parameters"]["Name.$"] == states["StartNextExecution"]["Parameters"]["Name.$"]
    assert hand["Parameters"]["StateMachineArn.$"] == "$$.StateMachine.Id"
    # what the waiting execution holds: config, lease, dms progress, history; no loop yet
    waiting = {
        "config": {"full_load_poll_seconds": 60},
        "lease": {"value": {"acquired": True}},
        "dms": {"value": {"full_load_complete": False}},
        "history": {"value": {"rollover": True}},
    }
    successor_input = _evaluate(hand["Parameters"]["Input"], waiting)
    assert set(successor_input) == {"previous_execution", "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID"}
    assert _route(asl, "ResumingAfterRollover", successor_input)[-1] == "CheckFullLoadProgress"
    assert states[hand["Next"]]["Type"] == "Succeed"
    already = [
        c for c in hand["Catch"] if c["ErrorEquals"] == ["StepFunctions.ExecutionAlreadyExistsException"]
    ]
    assert already and states[already[0]["Next"]]["Type"] == "Succeed"
    assert (
        states[next(c for c in hand["Catch"] if c["ErrorEquals"] == ["States.ALL"])["Next"]]["Type"] == "Fail"
    )


def test_between_two_history_checks_the_wait_stays_far_below_the_limit(asl, template):
    """Given the highest HistoryThreshold the template accepts, Then the events one full-load poll adds
    between two history checks (guard, choice, progress, choice, wait) still fit under 25,000."""
    states = asl["States"]
    cycle, name = [], "CheckFullLoadHistory"
    document = {"history": {"value": {"rollover": False}}, "dms": {"value": {"full_load_complete": False}}}
    while not cycle or name != "CheckFullLoadHistory":
        cycle.append(name)
        state = states[name]
        name = _route(asl, name, document)[-1] if state["Type"] == "Choice" else state["Next"]
    assert cycle == [
        "CheckFullLoadHistory",
        "FullLoadRollOver?",
        "CheckFullLoadProgress",
        "FullLoadFinished?",
        "WaitForFullLoad",
    ]
    per_poll = sum(EVENTS[states[n]["Type"]] for n in cycle)
    assert template["Parameters"]["HistoryThreshold"]["MaxValue"] + per_poll < STEP_FUNCTIONS_HISTORY_LIMIT
