"""The history guard: the event count in one call, and when to roll over."""

from __future__ import annotations

import json

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, event


class FakeStepFunctions:
    def __init__(self, newest_event_id: int) -> None:
        self.newest_event_id = newest_event_id
        self.calls: list[dict] = []

    def get_execution_history(self, **request: object) -> dict:
        self.calls.append(request)
        return {"events": [{"id": self.newest_event_id, "type": "TaskStateExited"}]}


# no reconcile or raw audit configured (their job names and periods unset): neither is ever due, and no
# minimum interval holds a refine back (periodic.py)
NO_PERIODIC_JOB = {
    "due": {"reconcile": False, "raw_audit": False},
    "overdue": {"reconcile": False, "raw_audit": False},
    "refine_interval_passed": True,
}


@pytest.mark.parametrize(("events", "rollover"), [(19_999, False), (20_000, True), (24_500, True)])
def test_rolls_over_at_the_threshold_reading_only_the_newest_event(aws, load_handler, events, rollover):
    """Given an execution with N events, When the guard runs with threshold 20,000,
    Then it asks for one event, newest first, and says whether to roll over."""
    app = load_handler("history_guard", HISTORY_THRESHOLD="20000")
    fake = FakeStepFunctions(events)
    app.sfn = fake

    result = app.handler(event("history_guard.json"), FakeContext())

    assert result == {"event_count": events, "threshold": 20_000, "rollover": rollover} | NO_PERIODIC_JOB
    assert fake.calls == [
        {"executionArn": event("history_guard.json")["execution_arn"], "reverseOrder": True, "maxResults": 1}
    ]


def test_a_threshold_at_or_above_the_service_limit_is_refused(aws, load_handler):
    load_handler("history_guard")
    import guard

    with pytest.raises(ValueError, match="threshold"):
        guard.should_roll_over(10, 25_000)


def test_counts_the_events_of_a_real_execution(aws, load_handler):
    """Given an execution of a state machine (moto: four events), When the guard runs with
    events/history_guard.json naming it and a threshold of 20, Then it counts 4 and does not roll over;
    with a threshold of 4 it rolls over."""
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    sfn = boto3.client("stepfunctions")
    definition = {"StartAt": "Work", "States": {"Work": {"Type": "Pass", "End": True}}}
    machine = sfn.create_state_machine(name="dev-pipeline", definition=json.dumps(definition), roleArn=role)
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"])["executionArn"]
    app = load_handler("history_guard", HISTORY_THRESHOLD="20")
    request = event("history_guard.json") | {"execution_arn": execution, "threshold": None}

    assert (
        app.handler(request, FakeContext())
        == {
            "event_count": 4,
            "threshold": 20,
            "rollover": False,
        }
        | NO_PERIODIC_JOB
    )
    assert app.handler(request | {"threshold": 4}, FakeContext())["rollover"] is True
