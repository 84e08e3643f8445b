"""EMR Serverless job runs execute the entry point on the host; CloudFormation creates the application; Step
Functions' emr-serverless:startJobRun.sync (added by localaws_plugin) waits for the run and fails as AWS does."""

import io
import json
import time
import uuid
import zipfile

import pytest

pytestmark = pytest.mark.integration

ENTRY_POINT = b"""
import json
import sys

import helper  # from --py-files

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
print(json.dumps(args))
assert args["--mode"] == "run", args
assert args["--catalog_type"] == "hadoop" and args["--s3_endpoint_url"].startswith("http"), args
assert helper.VALUE == 42
"""

FAILING = b"""
import sys
print("about to fail", file=sys.stderr)
raise RuntimeError("table sales.customer is missing")
"""

SLEEPING = b"""
import time
time.sleep(60)
"""

ROLE = "arn:aws:iam::000000000000:role/emr-serverless-job"


def _library() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("helper.py", "VALUE = 42\n")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bucket(aws) -> str:
    name = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3 = aws("s3")
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="scripts/ok.py", Body=ENTRY_POINT)
    s3.put_object(Bucket=name, Key="scripts/fail.py", Body=FAILING)
    s3.put_object(Bucket=name, Key="scripts/sleep.py", Body=SLEEPING)
    s3.put_object(Bucket=name, Key="lib/helper.zip", Body=_library())
    return name


@pytest.fixture(scope="module")
def application(aws) -> str:
    emr = aws("emr-serverless")
    return emr.create_application(
        name=f"app-{uuid.uuid4().hex[:6]}", releaseLabel="emr-7.12.0", type="SPARK"
    )["applicationId"]


def driver(bucket: str, script: str, *arguments: str) -> dict:
    return {
        "sparkSubmit": {
            "entryPoint": f"s3://{bucket}/scripts/{script}",
            "entryPointArguments": list(arguments),
            "sparkSubmitParameters": f"--py-files s3://{bucket}/lib/helper.zip --conf spark.sql.x=y",
        }
    }


def wait_for_run(emr, application: str, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = emr.get_job_run(applicationId=application, jobRunId=run_id)["jobRun"]
        if run["state"] in ("SUCCESS", "FAILED", "CANCELLED"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"job run {run_id} did not finish")


def test_a_run_executes_the_entry_point_with_its_arguments_library_and_the_local_catalog(
    aws, bucket, application
):
    emr = aws("emr-serverless")
    started = emr.start_job_run(
        applicationId=application,
        executionRoleArn=ROLE,
        name="dev-cdc",
        jobDriver=driver(bucket, "ok.py", "--mode", "run", "--catalog_type", "glue"),
    )
    run = wait_for_run(emr, application, started["jobRunId"])
    assert run["state"] == "SUCCESS", run["stateDetails"]
    assert run["name"] == "dev-cdc" and run["executionRole"] == ROLE and run["releaseLabel"] == "emr-7.12.0"
    assert "startedAt" in run and "endedAt" in run
    listed = emr.list_job_runs(applicationId=application)["jobRuns"]
    assert started["jobRunId"] in {r["id"] for r in listed}


def test_a_failed_run_says_why(aws, bucket, application):
    emr = aws("emr-serverless")
    run_id = emr.start_job_run(
        applicationId=application, executionRoleArn=ROLE, jobDriver=driver(bucket, "fail.py")
    )["jobRunId"]
    run = wait_for_run(emr, application, run_id)
    assert run["state"] == "FAILED"
    assert "RuntimeError: table sales.customer is missing" in run["stateDetails"]


def test_a_cancelled_run_is_stopped(aws, bucket, application):
    emr = aws("emr-serverless")
    run_id = emr.start_job_run(
        applicationId=application, executionRoleArn=ROLE, jobDriver=driver(bucket, "sleep.py")
    )["jobRunId"]
    time.sleep(1.0)
    emr.cancel_job_run(applicationId=application, jobRunId=run_id)
    assert wait_for_run(emr, application, run_id, timeout=20)["state"] == "CANCELLED"


def test_cloudformation_creates_and_deletes_the_application(aws):
    suffix = uuid.uuid4().hex[:6]
    template = {
        "Resources": {
            "App": {
                "Type": "AWS::EMRServerless::Application",
                "Properties": {
                    "Name": f"lake-{suffix}",
                    "Type": "SPARK",
                    "ReleaseLabel": "emr-7.12.0",
                    "AutoStartConfiguration": {"Enabled": True},
                    "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": 15},
                    "SchedulerConfiguration": {"MaxConcurrentRuns": 1, "QueueTimeoutMinutes": 720},
                },
            }
        },
        "Outputs": {
            "Id": {"Value": {"Ref": "App"}},
            "IdAttribute": {"Value": {"Fn::GetAtt": ["App", "ApplicationId"]}},
            "Arn": {"Value": {"Fn::GetAtt": ["App", "Arn"]}},
        },
    }
    cfn = aws("cloudformation")
    stack = f"emr-{suffix}"
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps(template))
    cfn.get_waiter("stack_create_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    outputs = {
        o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]
    }
    assert outputs["Id"] == outputs["IdAttribute"]
    assert outputs["Arn"].endswith(f":/applications/{outputs['Id']}")
    emr = aws("emr-serverless")
    assert emr.get_application(applicationId=outputs["Id"])["application"]["name"] == f"lake-{suffix}"
    cfn.delete_stack(StackName=stack)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    assert emr.get_application(applicationId=outputs["Id"])["application"]["state"] == "TERMINATED"


def test_step_functions_emr_serverless_start_job_run_sync(aws, bucket, application):
    """Given a Task state on emr-serverless:startJobRun.sync, Then a successful run is the task's result, a
    failed run fails the task with States.TaskFailed and the run's details, and an API error is named
    EMRServerless.<code> (what a Retry or Catch matches)."""
    sfn = aws("stepfunctions")
    definition = {
        "StartAt": "Run",
        "States": {
            "Run": {
                "Type": "Task",
                "Resource": "arn:aws:states:::emr-serverless:startJobRun.sync",
                "Parameters": {
                    "ApplicationId.$": "$.application",
                    "ExecutionRoleArn": ROLE,
                    "Name": "from-step-functions",
                    "JobDriver": {
                        "SparkSubmit": {
                            "EntryPoint.$": "$.entry_point",
                            "EntryPointArguments.$": "States.Array('--mode', 'run', '--run_id', $$.Execution.Name)",
                            "SparkSubmitParameters": f"--py-files s3://{bucket}/lib/helper.zip",
                        }
                    },
                    "ExecutionTimeoutMinutes.$": "States.StringToJson('30')",
                },
                "Catch": [
                    {
                        "ErrorEquals": ["EMRServerless.ResourceNotFoundException"],
                        "ResultPath": "$.error",
                        "Next": "NoSuchApplication",
                    }
                ],
                "End": True,
            },
            "NoSuchApplication": {"Type": "Pass", "End": True},
        },
    }
    machine = sfn.create_state_machine(
        name=f"emr-sync-{uuid.uuid4().hex[:6]}",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::000000000000:role/sfn",
    )["stateMachineArn"]

    def execute(application_id: str, script: str) -> dict:
        document = {"application": application_id, "entry_point": f"s3://{bucket}/scripts/{script}"}
        arn = sfn.start_execution(stateMachineArn=machine, input=json.dumps(document))["executionArn"]
        deadline = time.monotonic() + 90
        while (execution := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "execution did not finish"
            time.sleep(0.3)
        return execution

    succeeded = execute(application, "ok.py")
    assert succeeded["status"] == "SUCCEEDED", succeeded
    result = json.loads(succeeded["output"])
    assert result["State"] == "SUCCESS" and result["Name"] == "from-step-functions"
    assert result["ApplicationId"] == application

    failed = execute(application, "fail.py")
    assert failed["status"] == "FAILED"
    assert failed["error"] == "States.TaskFailed"
    assert "table sales.customer is missing" in failed["cause"]
    assert json.loads(failed["cause"])["State"] == "FAILED"

    missing = execute("00nosuchapplication", "ok.py")
    assert missing["status"] == "SUCCEEDED", missing
    assert json.loads(missing["output"])["error"]["Error"] == "EMRServerless.ResourceNotFoundException"
