"""Glue job runs execute the script on the host; CloudFormation creates Glue jobs and databases."""

import json
import time
import uuid

import pytest

pytestmark = pytest.mark.integration

OK_SCRIPT = b"""
import json
import sys

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
print(json.dumps(args))
assert args["--mode"] == "run", args
"""

# Still running when the test's next call comes: a warm worker runs OK_SCRIPT in milliseconds, so a run of it
# could end before a second start was asked for, and the limit went unseen.
SLOW_SCRIPT = b"""
import time
time.sleep(5)
"""

FAILING_SCRIPT = b"""
import sys
print("about to fail", file=sys.stderr)
raise RuntimeError("table sales.customer is missing")
"""


def wait_for_run(glue, job_name: str, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = glue.get_job_run(JobName=job_name, RunId=run_id)["JobRun"]
        if run["JobRunState"] in ("SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"job run {run_id} did not finish")


@pytest.fixture(scope="module")
def scripts_bucket(aws) -> str:
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3 = aws("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="glue/scripts/ok.py", Body=OK_SCRIPT)
    s3.put_object(Bucket=bucket, Key="glue/scripts/fail.py", Body=FAILING_SCRIPT)
    s3.put_object(Bucket=bucket, Key="glue/scripts/slow.py", Body=SLOW_SCRIPT)
    return bucket


def create_job(glue, bucket: str, script: str, **extra) -> str:
    name = f"job-{uuid.uuid4().hex[:8]}"
    glue.create_job(
        Name=name,
        Role="arn:aws:iam::000000000000:role/glue",
        GlueVersion="5.0",
        Command={
            "Name": "glueetl",
            "ScriptLocation": f"s3://{bucket}/glue/scripts/{script}",
            "PythonVersion": "3",
        },
        DefaultArguments={"--mode": "default", "--datalake-formats": "iceberg", "--enable-metrics": "true"},
        **extra,
    )
    return name


def test_job_run_succeeds_with_merged_arguments_and_local_overrides(aws, scripts_bucket: str) -> None:
    glue = aws("glue")
    name = create_job(glue, scripts_bucket, "ok.py")
    run_id = glue.start_job_run(JobName=name, Arguments={"--mode": "run"})["JobRunId"]
    run = wait_for_run(glue, name, run_id)
    assert run["JobRunState"] == "SUCCEEDED", run.get("ErrorMessage")
    assert run["Arguments"] == {"--mode": "run"}
    assert "ExecutionTime" in run and "CompletedOn" in run
    assert [r["Id"] for r in glue.get_job_runs(JobName=name)["JobRuns"]] == [run_id]


def test_job_run_failure_reports_the_error(aws, scripts_bucket: str) -> None:
    glue = aws("glue")
    name = create_job(glue, scripts_bucket, "fail.py")
    run_id = glue.start_job_run(JobName=name)["JobRunId"]
    run = wait_for_run(glue, name, run_id)
    assert run["JobRunState"] == "FAILED"
    assert "RuntimeError: table sales.customer is missing" in run["ErrorMessage"]


def test_concurrent_runs_are_limited_by_max_concurrent_runs(aws, scripts_bucket: str) -> None:
    glue = aws("glue")
    name = create_job(glue, scripts_bucket, "slow.py", ExecutionProperty={"MaxConcurrentRuns": 1})
    first = glue.start_job_run(JobName=name)["JobRunId"]
    with pytest.raises(glue.exceptions.ConcurrentRunsExceededException):
        glue.start_job_run(JobName=name)
    assert wait_for_run(glue, name, first)["JobRunState"] == "SUCCEEDED"


def test_cloudformation_creates_glue_database_and_job(aws, scripts_bucket: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    template = {
        "Resources": {
            "CleanDatabase": {
                "Type": "AWS::Glue::Database",
                "Properties": {
                    "CatalogId": {"Ref": "AWS::AccountId"},
                    "DatabaseInput": {"Name": f"clean_{suffix}"},
                },
            },
            "CdcJob": {
                "Type": "AWS::Glue::Job",
                "Properties": {
                    "Name": f"cdc-{suffix}",
                    "Role": "arn:aws:iam::000000000000:role/glue",
                    "GlueVersion": "5.0",
                    "Command": {
                        "Name": "glueetl",
                        "ScriptLocation": f"s3://{scripts_bucket}/glue/scripts/ok.py",
                    },
                    "DefaultArguments": {"--mode": "run", "--clean_database": {"Ref": "CleanDatabase"}},
                    "ExecutionProperty": {"MaxConcurrentRuns": 2},
                    "WorkerType": "G.1X",
                    "NumberOfWorkers": 2,
                    "Timeout": 30,
                },
            },
        },
        "Outputs": {"JobName": {"Value": {"Ref": "CdcJob"}}, "Database": {"Value": {"Ref": "CleanDatabase"}}},
    }
    cfn = aws("cloudformation")
    stack = f"glue-{suffix}"
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps(template))
    cfn.get_waiter("stack_create_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    outputs = {
        o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]
    }
    assert outputs == {"JobName": f"cdc-{suffix}", "Database": f"clean_{suffix}"}
    glue = aws("glue")
    job = glue.get_job(JobName=f"cdc-{suffix}")["Job"]
    assert job["DefaultArguments"]["--clean_database"] == f"clean_{suffix}"
    assert job["ExecutionProperty"]["MaxConcurrentRuns"] == 2
    assert glue.get_database(Name=f"clean_{suffix}")["Database"]["Name"] == f"clean_{suffix}"
    run_id = glue.start_job_run(JobName=f"cdc-{suffix}")["JobRunId"]
    assert wait_for_run(glue, f"cdc-{suffix}", run_id)["JobRunState"] == "SUCCEEDED"
    cfn.delete_stack(StackName=stack)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_job(JobName=f"cdc-{suffix}")


def test_step_functions_glue_start_job_run_sync(aws, scripts_bucket: str) -> None:
    glue, sfn = aws("glue"), aws("stepfunctions")
    ok_job = create_job(glue, scripts_bucket, "ok.py")
    failing_job = create_job(glue, scripts_bucket, "fail.py")
    definition = {
        "StartAt": "Run",
        "States": {
            "Run": {
                "Type": "Task",
                "Resource": "arn:aws:states:::glue:startJobRun.sync",
                "Parameters": {"JobName.$": "$.job", "Arguments": {"--mode": "run"}},
                "End": True,
            }
        },
    }
    machine = sfn.create_state_machine(
        name=f"glue-sync-{uuid.uuid4().hex[:6]}",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::000000000000:role/sfn",
    )["stateMachineArn"]

    def execute(job: str) -> dict:
        arn = sfn.start_execution(stateMachineArn=machine, input=json.dumps({"job": job}))["executionArn"]
        deadline = time.monotonic() + 60
        while (execution := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "execution did not finish"
            time.sleep(0.3)
        return execution

    succeeded = execute(ok_job)
    assert succeeded["status"] == "SUCCEEDED"
    assert json.loads(succeeded["output"])["JobRunState"] == "SUCCEEDED"
    failed = execute(failing_job)
    assert failed["status"] == "FAILED"
    assert "table sales.customer is missing" in failed["cause"]
