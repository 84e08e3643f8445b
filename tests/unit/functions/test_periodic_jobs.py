"""The history guard's answer about the loop's periodic jobs (functions/history_guard/periodic.py): is the
reconcile or the raw zone audit due, from the jobs' own run history."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.unit.functions.conftest import FakeContext, event

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def periodic(monkeypatch):
    from tests.unit.functions.conftest import FUNCTIONS

    monkeypatch.syspath_prepend(str(FUNCTIONS / "history_guard"))
    sys.modules.pop("periodic", None)
    import periodic

    yield periodic
    sys.modules.pop("periodic", None)  # its cached clients belong to this test's moto


def jobs(periodic, reconcile: float = 60, raw_audit: float = 30):
    return periodic.periodic_jobs(
        {
            "RECONCILE_JOB_NAME": "dev-reconcile",
            "RECONCILE_EVERY_MINUTES": str(reconcile),
            "RAW_AUDIT_JOB_NAME": "dev-raw-audit",
            "RAW_AUDIT_EVERY_MINUTES": str(raw_audit),
        }
    )


@pytest.mark.parametrize(
    ("last_run_ago", "due", "overdue"),
    [
        (timedelta(minutes=59), False, False),
        (timedelta(minutes=60), True, False),
        (timedelta(minutes=119), True, False),
        (timedelta(minutes=120), True, True),
    ],
)
def test_a_job_is_due_a_period_after_its_newest_run_started_and_overdue_two(
    periodic, last_run_ago, due, overdue
):
    """Given the reconcile every 60 minutes whose newest run started `last_run_ago`, and the raw audit every
    30 minutes that ran 10 minutes ago, Then the reconcile is due after one period and overdue after two,
    the audit is neither."""
    last = {"dev-reconcile": NOW - last_run_ago, "dev-raw-audit": NOW - timedelta(minutes=10)}

    answer = periodic.schedule(jobs(periodic), last.get, NOW, since=lambda: NOW - 10 * HOUR)

    assert answer == {
        "due": {"reconcile": due, "raw_audit": False},
        "overdue": {"reconcile": overdue, "raw_audit": False},
    }


@pytest.mark.parametrize(
    ("last_run_ago", "due", "overdue"),
    [
        (timedelta(seconds=29), False, False),
        (timedelta(seconds=30), True, False),
        (timedelta(seconds=59), True, False),
        (timedelta(seconds=60), True, True),
    ],
)
def test_a_period_of_a_fraction_of_a_minute_is_kept_to_the_second(periodic, last_run_ago, due, overdue):
    """Given the template's text "0.5" for the reconcile (a tight check of a small source) and "0.25" for the
    raw audit, whose newest runs started `last_run_ago` and 10 s ago, Then the reconcile is due 30 s after
    its run started and overdue at 60 s, the audit not before 15 s: no rounding to whole minutes."""
    configured = periodic.periodic_jobs(
        {
            "RECONCILE_JOB_NAME": "dev-reconcile",
            "RECONCILE_EVERY_MINUTES": "0.5",
            "RAW_AUDIT_JOB_NAME": "dev-raw-audit",
            "RAW_AUDIT_EVERY_MINUTES": "0.25",
        }
    )
    last = {"dev-reconcile": NOW - last_run_ago, "dev-raw-audit": NOW - timedelta(seconds=10)}

    answer = periodic.schedule(configured, last.get, NOW, since=lambda: NOW - HOUR)

    assert [(job.key, job.every_minutes) for job in configured] == [("reconcile", 0.5), ("raw_audit", 0.25)]
    assert answer == {
        "due": {"reconcile": due, "raw_audit": False},
        "overdue": {"reconcile": overdue, "raw_audit": False},
    }


def test_a_job_that_never_ran_counts_from_the_executions_start(periodic):
    """Given neither job ever ran, Then each counts from the execution's start: 40 minutes in, the 30-minute
    audit is due and the 60-minute reconcile is not (a new pipeline does not reconcile at once)."""
    answer = periodic.schedule(jobs(periodic), lambda _: None, NOW, since=lambda: NOW - timedelta(minutes=40))

    assert answer["due"] == {"reconcile": False, "raw_audit": True}
    assert answer["overdue"] == {"reconcile": False, "raw_audit": False}


def test_a_job_switched_off_or_unconfigured_is_never_due_and_its_runs_are_not_read(periodic):
    """Given ReconcileEveryMinutes 0 (or no source: the template passes 0) and no raw audit job name, Then
    neither is due however long ago they ran, and the run history is not even asked."""
    configured = periodic.periodic_jobs(
        {
            "RECONCILE_JOB_NAME": "dev-reconcile",
            "RECONCILE_EVERY_MINUTES": "0",
            "RAW_AUDIT_EVERY_MINUTES": "5",
        }
    )

    def never_asked(job: str):
        raise AssertionError(f"read the runs of {job}")

    assert configured == []
    assert periodic.schedule(configured, never_asked, NOW) == {
        "due": {"reconcile": False, "raw_audit": False},
        "overdue": {"reconcile": False, "raw_audit": False},
    }
    with pytest.raises(ValueError, match="RECONCILE_EVERY_MINUTES"):
        periodic.periodic_jobs({"RECONCILE_JOB_NAME": "x", "RECONCILE_EVERY_MINUTES": "-5"})


def test_a_run_history_that_cannot_be_read_makes_the_job_not_due_and_never_fails_the_guard(periodic):
    """Given Glue throttles the reconcile's GetJobRuns, Then the reconcile is not due this pass (the guard
    must not fail the execution for it) and the audit's answer is unaffected."""

    def last_started(job: str):
        if job == "dev-reconcile":
            raise RuntimeError("ThrottlingException")
        return NOW - HOUR

    answer = periodic.schedule(jobs(periodic), last_started, NOW)

    assert answer["due"] == {"reconcile": False, "raw_audit": True}


def test_on_emr_serverless_the_runs_of_the_application_are_read_by_name(periodic):
    """Given SparkEngine=emr-serverless (runs named after the Glue jobs), Then the newest run of that name
    counts, other jobs' runs do not."""

    class Paginator:
        def paginate(self, applicationId: str):
            assert applicationId == "app-1"
            yield {
                "jobRuns": [
                    {"name": "dev-cdc", "createdAt": NOW - timedelta(minutes=1)},
                    {"name": "dev-reconcile", "createdAt": NOW - timedelta(minutes=70)},
                ]
            }
            yield {"jobRuns": [{"name": "dev-reconcile", "createdAt": NOW - timedelta(minutes=200)}]}

    class Emr:
        def get_paginator(self, name: str):
            assert name == "list_job_runs"
            return Paginator()

    reader = periodic.emr_last_started(Emr(), "app-1")

    assert reader("dev-reconcile") == NOW - timedelta(minutes=70)
    assert reader("dev-raw-audit") is None


@pytest.mark.parametrize(
    ("last_run_ago", "passed"),
    [(timedelta(minutes=14), False), (timedelta(minutes=15), True), (None, True)],
)
def test_a_refine_may_start_once_its_newest_run_started_its_minimum_interval_ago(
    periodic, last_run_ago, passed
):
    """Given RefineEveryMinutes 15 and a refine job whose newest run started `last_run_ago` (None: never
    ran), Then the loop may start a refine only once 15 minutes have passed since that start."""
    floor = periodic.refine_floor({"REFINE_JOB_NAME": "dev-refine", "REFINE_EVERY_MINUTES": "15"})
    last = {} if last_run_ago is None else {"dev-refine": NOW - last_run_ago}

    assert periodic.refine_interval_passed(floor, last.get, NOW) is passed


def test_a_refine_floor_of_zero_or_unreadable_runs_never_holds_a_refine_back(periodic):
    """Given RefineEveryMinutes 0, Then there is no floor and the refine's runs are not even read; Given
    runs that cannot be read, Then the refine may start (a stale refined zone is worse than a billed minute);
    Given a negative interval, Then the setting is refused."""

    def never_asked(job: str):
        raise AssertionError(f"read the runs of {job}")

    def throttled(job: str):
        raise RuntimeError("ThrottlingException")

    no_floor = periodic.refine_floor({"REFINE_JOB_NAME": "dev-refine", "REFINE_EVERY_MINUTES": "0"})
    floor = periodic.refine_floor({"REFINE_JOB_NAME": "dev-refine", "REFINE_EVERY_MINUTES": "15"})

    assert no_floor is None
    assert periodic.refine_interval_passed(no_floor, never_asked, NOW) is True
    assert periodic.refine_interval_passed(floor, throttled, NOW) is True
    with pytest.raises(ValueError, match="REFINE_EVERY_MINUTES"):
        periodic.refine_floor({"REFINE_JOB_NAME": "dev-refine", "REFINE_EVERY_MINUTES": "-1"})


def test_the_guard_answers_from_the_glue_jobs_runs(aws, load_handler):
    """Given the deployed environment (job names and periods) and, on moto, a raw audit job and a refine job
    that just ran and a reconcile job that never ran in an execution started now, When the guard runs, Then
    neither is due and no refine may start: the audit and the refine ran less than a period ago, the
    reconcile's clock started with the execution. An hour later all three are open."""
    role = boto3.client("iam").create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    sfn = boto3.client("stepfunctions")
    definition = {"StartAt": "Work", "States": {"Work": {"Type": "Pass", "End": True}}}
    machine = sfn.create_state_machine(name="dev-pipeline", definition=json.dumps(definition), roleArn=role)
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"])["executionArn"]
    glue = boto3.client("glue")
    for name in ("dev-reconcile", "dev-raw-audit", "dev-refine"):
        glue.create_job(Name=name, Role=role, Command={"Name": "glueetl", "ScriptLocation": "s3://a/b.py"})
    glue.start_job_run(JobName="dev-raw-audit")
    glue.start_job_run(JobName="dev-refine")
    sys.modules.pop("periodic", None)
    app = load_handler(
        "history_guard",
        HISTORY_THRESHOLD="20",
        RECONCILE_JOB_NAME="dev-reconcile",
        RECONCILE_EVERY_MINUTES="60",
        RAW_AUDIT_JOB_NAME="dev-raw-audit",
        RAW_AUDIT_EVERY_MINUTES="60",
        REFINE_JOB_NAME="dev-refine",
        REFINE_EVERY_MINUTES="15",
        EMR_APPLICATION_ID="",
    )
    try:
        result = app.handler(event("history_guard.json") | {"execution_arn": execution}, FakeContext())
        assert result["due"] == {"reconcile": False, "raw_audit": False}
        assert result["overdue"] == {"reconcile": False, "raw_audit": False}
        assert result["refine_interval_passed"] is False
        assert result["rollover"] is False

        # a period later (the clock moved by an hour): both due, neither overdue
        import periodic

        later = periodic.answer(execution, now=datetime.now(UTC) + 61 * timedelta(minutes=1))
        assert later == {
            "due": {"reconcile": True, "raw_audit": True},
            "overdue": {"reconcile": False, "raw_audit": False},
            "refine_interval_passed": True,
        }
    finally:
        sys.modules.pop("periodic", None)
