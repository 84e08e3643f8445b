"""Fencing, the lease's side (moto S3 and Step Functions): every acquisition that changes the holder moves
the epoch on, and a new holder stops the job runs other executions left going before it starts its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext
from tools.emr_serverless_asl import load_template

ARTIFACTS = "dev-artifacts"
KEY = "locks/pipeline-lease.json"
JOBS = "dev-full-load,dev-cdc,dev-refine,dev-maintenance,dev-reconcile,dev-raw-audit"
CHECKS = "dev-reconcile,dev-raw-audit"
ASL = Path(__file__).resolve().parents[3] / "statemachine" / "pipeline.asl.json"


class GlueRuns:
    """The pipeline's Glue job runs as GetJobRuns/BatchStopJobRun answer (moto has no BatchStopJobRun): a
    stopped run is STOPPING until `settle()` (Glue takes a while to stop a run)."""

    def __init__(self) -> None:
        self.runs: dict[str, list[dict[str, Any]]] = {name: [] for name in JOBS.split(",")}
        self.stop_requests: list[tuple[str, list[str]]] = []

    def add(self, job: str, run_id: str, state: str, holder: str | None) -> None:
        arguments = {"--run_id": run_id} | ({"--lease_holder": holder} if holder else {})
        self.runs[job].insert(
            0,
            {
                "Id": run_id,
                "JobName": job,
                "JobRunState": state,
                "Arguments": arguments,
                "StartedOn": datetime.now(UTC),
            },
        )

    def get_job_runs(self, JobName: str, MaxResults: int = 100, NextToken: str | None = None) -> dict:
        start = int(NextToken or 0)
        runs = self.runs[JobName]
        page: dict[str, Any] = {"JobRuns": runs[start : start + MaxResults]}
        if start + MaxResults < len(runs):
            page["NextToken"] = str(start + MaxResults)
        return page

    def batch_stop_job_run(self, JobName: str, JobRunIds: list[str]) -> dict:
        self.stop_requests.append((JobName, list(JobRunIds)))
        for run in self.runs[JobName]:
            if run["Id"] in JobRunIds:
                run["JobRunState"] = "STOPPING"
        return {
            "SuccessfulSubmissions": [{"JobName": JobName, "JobRunId": i} for i in JobRunIds],
            "Errors": [],
        }

    def settle(self) -> None:
        for runs in self.runs.values():
            for run in runs:
                if run["JobRunState"] == "STOPPING":
                    run["JobRunState"] = "STOPPED"


@pytest.fixture
def machine(aws):
    boto3.client("s3").create_bucket(Bucket=ARTIFACTS)
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
    return boto3.client("stepfunctions").create_state_machine(
        name="dev-pipeline", definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]


@pytest.fixture
def glue() -> GlueRuns:
    return GlueRuns()


@pytest.fixture
def lease_app(machine, load_handler, glue):
    app = load_handler(
        "lease", ARTIFACTS_BUCKET=ARTIFACTS, LEASE_KEY=KEY, GLUE_JOB_NAMES=JOBS, CHECK_JOB_NAMES=CHECKS
    )
    app.glue = glue
    return app


def start(machine: str, name: str) -> str:
    return boto3.client("stepfunctions").start_execution(stateMachineArn=machine, name=name)["executionArn"]


def document() -> dict[str, Any]:
    return json.loads(boto3.client("s3").get_object(Bucket=ARTIFACTS, Key=KEY)["Body"].read())


def test_every_change_of_holder_moves_the_epoch_on_and_a_retried_acquire_keeps_it(machine, lease_app):
    """Given a free lease, When execution 1 takes it, retries, is stopped and execution 2 takes it over,
    then execution 2 retries, Then the epochs are 1, 1, 2, 2, in the lease document as in the answers."""
    first, second = start(machine, "first"), start(machine, "second")

    epochs = [lease_app.handler({"execution_arn": first}, FakeContext())["epoch"]]
    epochs.append(lease_app.handler({"execution_arn": first}, FakeContext())["epoch"])
    assert document()["epoch"] == 1
    boto3.client("stepfunctions").stop_execution(executionArn=first)
    epochs.append(lease_app.handler({"execution_arn": second}, FakeContext())["epoch"])
    epochs.append(lease_app.handler({"execution_arn": second}, FakeContext())["epoch"])

    assert epochs == [1, 1, 2, 2]
    assert (document()["holder"], document()["epoch"], document()["taken_from"]) == (second, 2, first)


def test_a_takeover_stops_the_old_holders_running_job_runs_and_waits_until_they_stopped(
    machine, lease_app, glue
):
    """Given execution 1 held the lease and was stopped while its CDC run and a reload (the full-load job)
    were RUNNING; an earlier run of it SUCCEEDED; a refine run started without lease arguments (by hand, or
    by the state machine's previous version) is RUNNING too,
    When execution 2 takes the lease over, Then the answer says old runs are still going and names the three
    active ones, and exactly those were asked to stop; asked again while they are STOPPING, it lists them
    without stopping them twice; once they stopped, nothing is left and the epoch stayed 2."""
    first, second = start(machine, "first"), start(machine, "second")
    lease_app.handler({"execution_arn": first}, FakeContext())
    glue.add("dev-cdc", "jr_done", "SUCCEEDED", first)
    glue.add("dev-cdc", "jr_cdc", "RUNNING", first)
    glue.add("dev-full-load", "jr_reload", "RUNNING", first)
    glue.add("dev-refine", "jr_manual", "RUNNING", None)
    boto3.client("stepfunctions").stop_execution(executionArn=first)

    taken = lease_app.handler({"execution_arn": second}, FakeContext())

    assert taken["acquired"] and taken["epoch"] == 2 and taken["old_runs_running"] is True
    assert sorted(r.split()[2] for r in taken["stopping_runs"]) == ["jr_cdc", "jr_manual", "jr_reload"]
    assert sorted(glue.stop_requests) == [
        ("dev-cdc", ["jr_cdc"]),
        ("dev-full-load", ["jr_reload"]),
        ("dev-refine", ["jr_manual"]),
    ]

    again = lease_app.handler({"execution_arn": second}, FakeContext())
    assert again["old_runs_running"] is True and len(again["stopping_runs"]) == 3
    assert len(glue.stop_requests) == 3  # STOPPING runs are not stopped again

    glue.settle()
    done = lease_app.handler({"execution_arn": second}, FakeContext())
    assert (done["acquired"], done["epoch"], done["old_runs_running"], done["stopping_runs"]) == (
        True,
        2,
        False,
        [],
    )


def test_the_holder_never_stops_its_own_runs_and_a_refused_execution_stops_nothing(machine, lease_app, glue):
    """Given execution 1 holds the lease and its CDC run is RUNNING, When execution 1 asks again (a retried
    acquire) and a second execution asks (refused: 1 is RUNNING), Then no run is stopped."""
    first, second = start(machine, "first"), start(machine, "second")
    lease_app.handler({"execution_arn": first}, FakeContext())
    glue.add("dev-cdc", "jr_cdc", "RUNNING", first)

    mine = lease_app.handler({"execution_arn": first}, FakeContext())
    refused = lease_app.handler({"execution_arn": second}, FakeContext())

    assert mine["acquired"] and mine["old_runs_running"] is False
    assert not refused["acquired"] and refused["stopping_runs"] == []
    assert glue.stop_requests == []


def test_a_check_started_by_hand_outlives_every_rollover_but_a_check_under_an_old_lease_is_stopped(
    machine, lease_app, glue
):
    """Given execution 1 holds the lease; an operator started a reconcile and a raw audit by hand (no lease
    arguments) and a refine by hand; execution 1's own reconcile (under its lease) is RUNNING too,
    When execution 2 takes the lease over, Then the reconcile under execution 1's lease and the hand-started
    refine are stopped (they could commit beside the holder), and the two hand-started checks go on: they
    never write the clean zone, and a history rollover every few minutes must not kill an operator's check."""
    first, second = start(machine, "first"), start(machine, "second")
    lease_app.handler({"execution_arn": first}, FakeContext())
    glue.add("dev-reconcile", "jr_by_hand", "RUNNING", None)
    glue.add("dev-raw-audit", "jr_audit_by_hand", "RUNNING", None)
    glue.add("dev-refine", "jr_refine_by_hand", "RUNNING", None)
    glue.add("dev-reconcile", "jr_loop_reconcile", "RUNNING", first)
    boto3.client("stepfunctions").stop_execution(executionArn=first)

    taken = lease_app.handler({"execution_arn": second}, FakeContext())

    assert sorted(r.split()[2] for r in taken["stopping_runs"]) == ["jr_loop_reconcile", "jr_refine_by_hand"]
    assert sorted(glue.stop_requests) == [
        ("dev-reconcile", ["jr_loop_reconcile"]),
        ("dev-refine", ["jr_refine_by_hand"]),
    ]
    states = {run["Id"]: run["JobRunState"] for runs in glue.runs.values() for run in runs}
    assert (states["jr_by_hand"], states["jr_audit_by_hand"]) == ("RUNNING", "RUNNING")


def test_the_state_machine_waits_for_the_old_runs_before_it_starts_anything_and_fences_every_job_run():
    """The lease answer `old_runs_running` loops the execution through a Wait back to AcquireLease; every
    Glue job run it starts carries the lease object, the holder (this execution) and the epoch."""
    states = json.loads(ASL.read_text())["States"]
    rule = states["LeaseAcquired?"]["Choices"][0]
    assert rule["Next"] == "WaitForOldRuns" and states["WaitForOldRuns"]["Next"] == "AcquireLease"
    assert {"Variable": "$.lease.value.old_runs_running", "BooleanEquals": True} in rule["And"]
    runs = {n: s for n, s in states.items() if s.get("Resource") == "arn:aws:states:::glue:startJobRun.sync"}
    assert len(runs) >= 6
    # every job the state machine runs is one the lease function stops for a new holder (GLUE_JOB_NAMES)
    template = load_template(ASL.parents[1] / "template.yaml")
    substitutions = template["Resources"]["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    stopped = template["Resources"]["LeaseFunction"]["Properties"]["Environment"]["Variables"][
        "GLUE_JOB_NAMES"
    ]
    checks = template["Resources"]["LeaseFunction"]["Properties"]["Environment"]["Variables"][
        "CHECK_JOB_NAMES"
    ]
    assert checks["Fn::Sub"].split(",") == ["${ReconcileJob}", "${RawAuditJob}"]
    for name, state in runs.items():
        job = substitutions[state["Parameters"]["JobName"].strip("${}")]["Ref"]
        assert f"${{{job}}}" in stopped["Fn::Sub"].split(","), name
    for name, state in runs.items():
        if name == "RunRawAudit":
            continue  # commits nothing (reads the raw zone and the ledger, re-enqueues lost file events)
        arguments = state["Parameters"]["Arguments"]
        assert arguments["--lease_uri"] == "s3://${ArtifactsBucket}/locks/pipeline-lease.json", name
        assert arguments["--lease_holder.$"] == "$$.Execution.Id", name
        assert arguments["--lease_epoch.$"] == "States.Format('{}', $.lease.value.epoch)", name


class EmrRuns:
    """An EMR Serverless application's job runs as ListJobRuns/GetJobRun/CancelJobRun answer."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.cancelled: list[str] = []

    def add(self, run_id: str, state: str, holder: str | None) -> None:
        arguments = ["--run_id", run_id] + (["--lease_holder", holder] if holder else [])
        self.runs[run_id] = {
            "applicationId": "app",
            "jobRunId": run_id,
            "name": "dev-cdc",
            "state": state,
            "jobDriver": {
                "sparkSubmit": {"entryPoint": "s3://a/cdc_job.py", "entryPointArguments": arguments}
            },
        }

    def list_job_runs(self, applicationId: str, states: list[str], maxResults: int = 50) -> dict:
        return {
            "jobRuns": [{"id": i, "state": r["state"]} for i, r in self.runs.items() if r["state"] in states]
        }

    def get_job_run(self, applicationId: str, jobRunId: str) -> dict:
        return {"jobRun": self.runs[jobRunId]}

    def cancel_job_run(self, applicationId: str, jobRunId: str) -> dict:
        self.cancelled.append(jobRunId)
        self.runs[jobRunId]["state"] = "CANCELLING"
        return {"applicationId": applicationId, "jobRunId": jobRunId}


def test_on_emr_serverless_a_takeover_cancels_the_old_holders_runs_too(machine, lease_app):
    """Given SparkEngine=emr-serverless, execution 1 stopped while its CDC run RUNS on the application, and a
    run of its that ended, When execution 2 takes the lease over, Then only the running one is cancelled and
    reported until it ended."""
    emr = EmrRuns()
    lease_app.emr, lease_app.EMR_APPLICATION_ID = emr, "app"
    first, second = start(machine, "first"), start(machine, "second")
    lease_app.handler({"execution_arn": first}, FakeContext())
    emr.add("00done", "SUCCESS", first)
    emr.add("00cdc", "RUNNING", first)
    boto3.client("stepfunctions").stop_execution(executionArn=first)

    taken = lease_app.handler({"execution_arn": second}, FakeContext())

    assert taken["old_runs_running"] is True and [r.split()[2] for r in taken["stopping_runs"]] == ["00cdc"]
    assert emr.cancelled == ["00cdc"]
    emr.runs["00cdc"]["state"] = "CANCELLED"
    assert lease_app.handler({"execution_arn": second}, FakeContext())["old_runs_running"] is False
    assert emr.cancelled == ["00cdc"]
