"""The pipeline lease (moto S3 conditional writes, moto Step Functions): one execution at a time."""

from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, event

ARTIFACTS = "dev-artifacts"
KEY = "locks/pipeline-lease.json"


@pytest.fixture
def machine(aws):
    boto3.client("s3").create_bucket(Bucket=ARTIFACTS)
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    sfn = boto3.client("stepfunctions")
    return sfn.create_state_machine(name="dev-pipeline", definition=json.dumps(definition), roleArn=role)[
        "stateMachineArn"
    ]


@pytest.fixture
def lease_app(machine, load_handler):
    return load_handler("lease", ARTIFACTS_BUCKET=ARTIFACTS, LEASE_KEY=KEY)


def start(machine: str, name: str) -> str:
    return boto3.client("stepfunctions").start_execution(stateMachineArn=machine, name=name)["executionArn"]


class AtomicS3:
    """moto's S3 checks a write's condition and stores it in two steps; S3 does both at once. This proxy
    makes each conditional write atomic, as S3's, so the races below test the lease, not moto."""

    def __init__(self, client) -> None:
        self.client = client
        self.lock = threading.Lock()

    def put_object(self, **request):
        with self.lock:
            return self.client.put_object(**request)

    def get_object(self, **request):
        with self.lock:
            return self.client.get_object(**request)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def rollover_name(predecessor: str) -> str:
    """The name the state machine gives the successor it starts on rollover:
    States.Format('rollover-{}', States.Hash($$.Execution.Id, 'MD5')), a lower-case hex digest."""
    return "rollover-" + hashlib.md5(predecessor.encode()).hexdigest()


def holder() -> str:
    return json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=KEY)["Body"].read())["holder"]


def test_a_second_execution_started_by_hand_is_refused_with_the_reason(machine, lease_app):
    """Given a RUNNING execution holding the lease, When a second execution asks for it,
    Then it is refused, told which execution holds it; a retried acquire of the holder succeeds."""
    first, second = start(machine, "first"), start(machine, "second")

    assert lease_app.handler({"execution_arn": first}, FakeContext())["acquired"] is True
    refused = lease_app.handler({"execution_arn": second}, FakeContext())

    assert refused == {
        "acquired": False,
        "holder": first,
        "reason": f"execution {first} is RUNNING and holds the pipeline lease",
        "epoch": 1,
        "old_runs_running": False,
        "stopping_runs": [],
    }
    assert lease_app.handler({"execution_arn": first}, FakeContext())["acquired"] is True
    assert holder() == first


def test_the_lease_of_a_stopped_execution_is_taken_over(machine, lease_app):
    """Given the holder was stopped (or failed), When a new execution asks, Then it takes the lease over."""
    first, second = start(machine, "first"), start(machine, "second")
    lease_app.handler({"execution_arn": first}, FakeContext())
    boto3.client("stepfunctions").stop_execution(executionArn=first)

    taken = lease_app.handler({"execution_arn": second}, FakeContext())

    assert taken["acquired"] and "ABORTED" in taken["reason"] and holder() == second


def test_rollover_hands_the_lease_to_the_successor_while_the_predecessor_still_runs(machine, lease_app):
    """Given a RUNNING holder that starts its successor (rollover), When the successor asks with
    previous_execution = the holder, Then it gets the lease at once; anyone else is still refused."""
    first = start(machine, "first")
    successor, intruder = start(machine, rollover_name(first)), start(machine, "intruder")
    lease_app.handler({"execution_arn": first}, FakeContext())

    rolled_over_input = {"skip_full_load": True, "loop": {"batches": 3}, "previous_execution": first}
    handed = lease_app.handler(
        {"execution_arn": successor, "execution_input": rolled_over_input}, FakeContext()
    )
    refused = lease_app.handler({"execution_arn": intruder, "previous_execution": first}, FakeContext())

    assert handed["acquired"] and handed["reason"] == f"handed over by {first}"
    assert not refused["acquired"] and holder() == successor


def other_machine() -> str:
    role = boto3.client("iam").create_role(RoleName="other", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    return boto3.client("stepfunctions").create_state_machine(
        name="other-pipeline", definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]


@pytest.mark.parametrize("intruder_kind", ["hand_started", "named_like_the_successor_elsewhere"])
def test_an_execution_naming_the_holder_as_its_predecessor_cannot_steal_the_lease(
    machine, lease_app, intruder_kind
):
    """Given a RUNNING holder, When an execution not started by its rollover (started by hand, or named
    like the successor but of another state machine) passes previous_execution = the holder,
    Then it is refused with the reason and the holder keeps the lease; the genuine successor still
    gets it."""
    first = start(machine, "first")
    lease_app.handler({"execution_arn": first}, FakeContext())
    if intruder_kind == "hand_started":
        intruder = start(machine, "by-hand")
    else:
        intruder = start(other_machine(), rollover_name(first))
    claim = {"skip_full_load": True, "previous_execution": first}

    refused = lease_app.handler({"execution_arn": intruder, "execution_input": claim}, FakeContext())

    assert refused["acquired"] is False and refused["holder"] == first
    assert "is not its rollover successor" in refused["reason"] and holder() == first

    successor = start(machine, rollover_name(first))
    handed = lease_app.handler({"execution_arn": successor, "execution_input": claim}, FakeContext())
    assert handed == {
        "acquired": True,
        "holder": successor,
        "reason": f"handed over by {first}",
        "epoch": 2,
        "old_runs_running": False,
        "stopping_runs": [],
    }
    assert holder() == successor


def test_of_two_executions_racing_for_a_free_lease_exactly_one_wins(machine, load_handler):
    """Given no lease, When eight executions acquire at the same moment, Then exactly one holds it."""
    app = load_handler("lease", ARTIFACTS_BUCKET=ARTIFACTS, LEASE_KEY=KEY)
    app.s3 = AtomicS3(app.s3)
    arns = [start(machine, f"racer{n}") for n in range(8)]
    with ThreadPoolExecutor(8) as pool:
        decisions = list(pool.map(lambda arn: app.handler({"execution_arn": arn}, FakeContext()), arns))

    assert sum(d["acquired"] for d in decisions) == 1
    assert holder() == next(d["holder"] for d in decisions if d["acquired"])


def test_of_two_executions_taking_over_a_dead_holder_exactly_one_wins(machine, load_handler):
    """Given the holder's execution is gone, When two executions take over at once (compare-and-swap on
    the lease's ETag), Then exactly one wins.

    The race is the lease's own (`acquire`), run on six threads: Lambda never runs two invocations in one
    process, and the handler's Powertools Metrics is one per process (six handlers on threads would flush
    each other's metric set, a failure no deployment can have)."""
    app = load_handler("lease", ARTIFACTS_BUCKET=ARTIFACTS, LEASE_KEY=KEY)
    app.s3 = AtomicS3(app.s3)
    dead = start(machine, "dead")
    app.handler({"execution_arn": dead}, FakeContext())
    boto3.client("stepfunctions").stop_execution(executionArn=dead)
    arns = [start(machine, f"heir{n}") for n in range(6)]

    def take_over(arn: str):
        return app.acquire(app.s3, app.sfn, ARTIFACTS, KEY, arn, None)

    with ThreadPoolExecutor(6) as pool:
        decisions = list(pool.map(take_over, arns))

    winners = [arn for arn, d in zip(arns, decisions, strict=True) if d.acquired]
    assert len(winners) == 1
    assert {d.holder for d in decisions} == set(winners)  # the losers name the winner
    assert json.loads(app.s3.get_object(Bucket=ARTIFACTS, Key=KEY)["Body"].read())["holder"] == winners[0]


def test_the_event_file_is_a_valid_request(machine, lease_app):
    """events/lease.json names an execution Step Functions does not know: the lease is free, so taken."""
    assert lease_app.handler(event("lease.json"), FakeContext())["acquired"] is True


def test_a_malformed_execution_arn_is_refused_before_any_work(machine, lease_app):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        lease_app.handler({"execution_arn": "not an arn"}, FakeContext())
    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=ARTIFACTS)


def test_the_state_machine_names_its_successor_as_the_lease_expects():
    """Given the lease recognises a successor by its name, When the state machine starts one on rollover,
    Then it names it rollover-<MD5 of its own execution ARN> and passes that ARN as previous_execution."""
    from tests.unit.functions.conftest import REPO

    states = json.loads((REPO / "statemachine" / "pipeline.asl.json").read_text())["States"]
    parameters = states["StartNextExecution"]["Parameters"]

    assert parameters["StateMachineArn.$"] == "$$.StateMachine.Id"
    assert parameters["Name.$"] == "States.Format('rollover-{}', States.Hash($$.Execution.Id, 'MD5'))"
    assert parameters["Input"]["previous_execution.$"] == "$$.Execution.Id"


@pytest.mark.parametrize("body", [b"", b"{not json", b"[1, 2]", b'{"epoch": 3}', b'{"holder": 7}'])
def test_a_corrupt_lease_object_is_an_error_naming_it_and_is_never_taken_over(machine, lease_app, body):
    """Given a lease object that is not a lease document (empty, not JSON, not an object, no holder),
    When an execution asks for the lease, Then it fails with an error naming the object and what to do
    (never a bare JSON error), and the object is left as it was: nobody is admitted on a guess."""
    boto3.client("s3").put_object(Bucket=ARTIFACTS, Key=KEY, Body=body)
    execution = start(machine, "after-corruption")

    with pytest.raises(Exception) as raised:
        lease_app.handler({"execution_arn": execution}, FakeContext())

    assert type(raised.value).__name__ == "CorruptLeaseError"
    assert f"s3://{ARTIFACTS}/{KEY} is corrupt" in str(raised.value) and "delete the object" in str(
        raised.value
    )
    assert boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=KEY)["Body"].read() == body
