"""lakectl, the operator's command, against a stack in moto (no network): every resource found through the
stack's outputs and parameters, each command's effect on the stack's objects."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import yaml
from lake_contracts.dms_files import cdc_file_name

from lakectl import cli, runs
from tests.offline_aws import offline_aws

STACK = "lake-test"
ARTIFACTS, RAW = "test-artifacts", "test-raw"
TASK_ARN = "arn:aws:dms:us-east-1:123456789012:task:ABCDEFG"
RUN_ID = "20261124T101500000000Z-1a2b3c4d"


def stack_template(queue_url: str, state_machine_arn: str) -> str:
    """Only what lakectl reads of the pipeline's stack: its outputs (literal here) and parameters."""
    outputs = {
        "ArtifactsBucketName": ARTIFACTS,
        "RawBucketName": RAW,
        "QueueUrl": queue_url,
        "StateMachineArn": state_machine_arn,
        "ReconcileJobName": "test-reconcile",
        "ReapplyJobName": "test-reapply",
    }
    return yaml.safe_dump(
        {
            "Parameters": {
                "TombstoneRetentionDays": {"Type": "Number", "Default": 35},
                "RepairMode": {"Type": "String", "Default": "reload"},
                "DmsReplicationTaskArn": {"Type": "String", "Default": TASK_ARN},
            },
            "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
    )


class Aws:
    def __init__(self) -> None:
        self.s3 = boto3.client("s3")
        self.sqs = boto3.client("sqs")
        self.sfn = boto3.client("stepfunctions")
        self.glue = boto3.client("glue")
        for bucket in (ARTIFACTS, RAW):
            self.s3.create_bucket(Bucket=bucket)
        self.queue_url = self.sqs.create_queue(QueueName="test-files.fifo", Attributes={"FifoQueue": "true"})[
            "QueueUrl"
        ]
        role = "arn:aws:iam::123456789012:role/test"
        self.state_machine = self.sfn.create_state_machine(
            name="test-pipeline",
            definition=json.dumps({"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}}),
            roleArn=role,
        )["stateMachineArn"]
        for job in ("test-reconcile", "test-reapply"):
            self.glue.create_job(
                Name=job, Role=role, Command={"Name": "glueetl", "ScriptLocation": "s3://x/y.py"}
            )
        boto3.client("cloudformation").create_stack(
            StackName=STACK, TemplateBody=stack_template(self.queue_url, self.state_machine)
        )

    def put(self, bucket: str, key: str, document: Any) -> None:
        self.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(document).encode())

    def keys(self, prefix: str) -> list[str]:
        return [
            o["Key"] for o in self.s3.list_objects_v2(Bucket=ARTIFACTS, Prefix=prefix).get("Contents", [])
        ]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    with offline_aws(monkeypatch):
        yield Aws()


def lakectl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Runs the command with --json; (exit code, the JSON document it printed, or stderr when it failed)."""
    code = cli.main([*argv, "--stack-name", STACK, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else err


def manifest(run_id: str, uris: list[str], attempts: int) -> dict[str, Any]:
    return {
        "version": 1,
        "run_id": run_id,
        "created_at": "x",
        "attempts": attempts,
        "files": [{"uri": u} for u in uris],
    }


def test_start_chooses_the_full_load_from_its_marker_and_never_starts_a_second_execution(aws, capsys) -> None:
    """Given no full-load marker, When the operator starts the pipeline, Then its input is {} (the full load
    runs); Given one running, a second start starts nothing; Given the marker (and none running), Then the
    input is {"skip_full_load": true}."""
    code, first = lakectl(capsys, "start")
    code_again, again = lakectl(capsys, "start")
    aws.sfn.stop_execution(executionArn=first["execution_arn"])
    # the state machine writes the marker with States.JsonToString: its body may be a JSON string; it exists
    aws.put(ARTIFACTS, "manifests/full-load.json", json.dumps({"started_at": "2026-11-24T10:00:00Z"}))
    _, resumed = lakectl(capsys, "start")

    assert (code, first["started"], first["input"]) == (0, True, {})
    assert (code_again, again) == (
        0,
        {"started": False, "execution_arn": first["execution_arn"], "reason": "already running"},
    )
    assert resumed["input"] == {"skip_full_load": True}
    inputs = [
        json.loads(aws.sfn.describe_execution(executionArn=e["executionArn"])["input"])
        for e in sorted(
            aws.sfn.list_executions(stateMachineArn=aws.state_machine)["executions"],
            key=lambda e: e["startDate"],
        )
    ]
    assert inputs == [{}, {"skip_full_load": True}]


def test_status_gathers_lease_execution_queue_batches_last_run_and_divergence(aws, capsys) -> None:
    """Given a lease held by a running execution, a message on the queue, a pending and a failed batch, a CDC
    run report with freshness and a reconcile report with one diverged table, When the operator asks the
    status, Then the JSON names each of them, and the human output says them in lines."""
    holder = aws.sfn.start_execution(stateMachineArn=aws.state_machine, name="run-1", input="{}")[
        "executionArn"
    ]
    aws.put(
        ARTIFACTS,
        "locks/pipeline-lease.json",
        {"holder": holder, "epoch": 3, "acquired_at": "2026-11-24T10:00:00Z"},
    )
    aws.sqs.send_message(
        QueueUrl=aws.queue_url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="1"
    )
    aws.put(ARTIFACTS, f"manifests/pending/{RUN_ID}.json", manifest(RUN_ID, ["s3://raw/a.csv"], 1))
    aws.put(
        ARTIFACTS,
        "manifests/failed/20261124T090000000000Z-0000beef.json",
        manifest("20261124T090000000000Z-0000beef", ["s3://raw/b.csv", "s3://raw/c.csv"], 3),
    )
    freshness = {
        "tables": [
            {
                "source_table": "sales.orders",
                "newest_source_commit_ts": "2026-11-24T10:14:00",
                "applied_through_ts": "2026-11-24T10:13:00",
                "last_batch_id": RUN_ID,
            }
        ]
    }
    aws.put(
        ARTIFACTS,
        f"manifests/reports/{RUN_ID}.json",
        {
            "run_id": RUN_ID,
            "job": "cdc",
            "tables": [],
            "totals": {"inserted_or_updated": 4},
            "freshness": freshness,
        },
    )
    aws.put(
        ARTIFACTS,
        "manifests/reports/reconcile-2026-11-24T10:20:00Z.json",
        {
            "run_id": "reconcile-1",
            "tables": [
                {"table": "sales.orders", "missing": 0, "extra": 0, "differing": 0},
                {
                    "table": "sales.customer",
                    "missing": 2,
                    "extra": 0,
                    "differing": 1,
                    "in_flight": 0,
                    "repaired": True,
                },
            ],
        },
    )

    # the reconcile job's state between runs, written after its report under the same prefix (the template's
    # --state_uri): not a report
    aws.put(
        ARTIFACTS, "manifests/reports/reconcile-rotation.json", {"start_after": "sales.orders", "pending": {}}
    )

    code, status = lakectl(capsys, "status")
    cli.main(["status", "--stack-name", STACK])
    text = capsys.readouterr().out

    assert code == 0
    assert status["lease"] == {"holder": holder, "epoch": 3, "acquired_at": "2026-11-24T10:00:00Z"}
    assert status["execution"]["arn"] == holder
    assert (status["queue"]["waiting"], status["full_load_recorded"]) == (1, False)
    assert [(b["run_id"], b["files"], b["reason"]) for b in status["pending_batches"]] == [
        (RUN_ID, 1, "1 attempt(s) so far")
    ]
    assert [(b["run_id"], b["files"]) for b in status["failed_batches"]] == [
        ("20261124T090000000000Z-0000beef", 2)
    ]
    assert status["last_run"]["run_id"] == RUN_ID
    assert status["last_run"]["freshness"] == [
        {
            "table": "sales.orders",
            "newest_source_change": "2026-11-24T10:14:00",
            "applied_through": "2026-11-24T10:13:00",
            "last_batch": RUN_ID,
        }
    ]
    assert status["last_reconcile"]["run_id"] == "reconcile-1"
    assert status["last_reconcile"]["diverged"] == [
        {
            "table": "sales.customer",
            "missing": 2,
            "extra": 0,
            "differing": 1,
            "in_flight": 0,
            "repaired": True,
        }
    ]
    assert f"lease       {holder} (epoch 3" in text
    assert "  sales.customer: 2 missing, 0 extra, 1 differing" in text


def test_status_names_each_table_whose_full_load_was_left_pending_and_for_how_long(aws, capsys) -> None:
    """Given a full-load run report naming a table whose load committed its rows and never its facts an hour
    ago (and an entry of another shape), When the operator asks the status, Then the JSON names the table,
    since when and how long it has been pending now, and the human output says it is not loaded."""
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    aws.put(
        ARTIFACTS,
        f"manifests/reports/{RUN_ID}.json",
        {
            "run_id": RUN_ID,
            "job": "full-load",
            "tables": [{"table": "crm.contact", "error": "RuntimeError: the driver died"}],
            "pending_loads": [
                {
                    "table": "crm.contact",
                    "pending_since": since,
                    "pending_seconds": 5,
                    "rows_changed_since": False,
                },
                "not an entry",
            ],
        },
    )

    code, status = lakectl(capsys, "status")
    cli.main(["status", "--stack-name", STACK])
    text = capsys.readouterr().out

    assert code == 0
    [pending] = status["last_run"]["pending_loads"]
    assert (pending["table"], pending["pending_since"]) == ("crm.contact", since)
    assert 3600 <= pending["pending_seconds"] < 3600 + 600
    assert f"  crm.contact: full load pending since {since} (" in text
    assert "not loaded until the full load runs again" in text


def test_requeue_lists_pending_and_failed_batches_and_puts_failed_ones_back_in_line(aws, capsys) -> None:
    """Given a pending and a failed batch, When the operator lists, Then both are named; When they requeue
    all, Then the failed one is pending with its attempts reset and failed/ is empty."""
    recent = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    uri = f"s3://{RAW}/dms/sales/orders/{cdc_file_name(recent)}"
    failed_id = "20261124T090000000000Z-0000beef"
    aws.put(ARTIFACTS, f"manifests/pending/{RUN_ID}.json", manifest(RUN_ID, [uri], 0))
    aws.put(ARTIFACTS, f"manifests/failed/{failed_id}.json", manifest(failed_id, [uri], 3))

    _, listed = lakectl(capsys, "requeue")
    code, requeued = lakectl(capsys, "requeue", "--all")

    assert [b["run_id"] for b in listed["pending"]] == [RUN_ID]
    assert [b["run_id"] for b in listed["failed"]] == [failed_id]
    assert (code, requeued) == (
        0,
        {"requeued": [{"run_id": failed_id, "key": f"manifests/pending/{failed_id}.json"}], "refused": []},
    )
    assert aws.keys("manifests/failed/") == []
    moved = json.loads(
        aws.s3.get_object(Bucket=ARTIFACTS, Key=f"manifests/pending/{failed_id}.json")["Body"].read()
    )
    assert moved == manifest(failed_id, [uri], 0)


def test_redrive_queues_a_raw_file_as_its_s3_event_and_refuses_one_past_the_tombstones(aws, capsys) -> None:
    """Given a raw file written an hour ago and one written 40 days ago (TombstoneRetentionDays 35), When the
    operator re-drives both, Then the queue holds the first one's Object Created event and the second is
    refused (its changes would bring rows deleted since back)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    young, old = (
        f"dms/sales/orders/{cdc_file_name(now - age)}" for age in (timedelta(hours=1), timedelta(days=40))
    )
    for key in (young, old):
        aws.s3.put_object(Bucket=RAW, Key=key, Body=b"I,1\n")

    code, result = lakectl(capsys, "redrive", young, f"s3://{RAW}/{old}")

    assert code == 1
    assert result["sent"] == [young]
    assert [r["key"] for r in result["refused"]] == [old]
    (message,) = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    event = json.loads(message["Body"])
    assert (
        event["detail-type"],
        event["detail"]["bucket"]["name"],
        event["detail"]["object"]["key"],
        event["detail"]["object"]["size"],
    ) == ("Object Created", RAW, young, 4)


def test_reconcile_runs_under_the_lease_holder_and_refuses_without_one(aws, capsys) -> None:
    """Given no lease, When the operator asks for a reconcile, Then it is refused naming `lakectl start`;
    Given the lease held at epoch 4, Then the reconcile job runs with the holder, the epoch, the stack's
    RepairMode and DMS task, and a report under manifests/reports/reconcile-*."""
    refused_code, refused = lakectl(capsys, "reconcile")
    holder = "arn:aws:states:us-east-1:123456789012:execution:test-pipeline:run-1"
    aws.put(ARTIFACTS, "locks/pipeline-lease.json", {"holder": holder, "epoch": 4})

    code, result = lakectl(capsys, "reconcile")

    assert refused_code == 2 and "lakectl start" in refused
    assert code == 0
    arguments = aws.glue.get_job_run(JobName="test-reconcile", RunId=result["job_run_id"])["JobRun"][
        "Arguments"
    ]
    assert {k: v for k, v in arguments.items() if k not in ("--run_id", "--report_uri")} == {
        "--lease_uri": f"s3://{ARTIFACTS}/locks/pipeline-lease.json",
        "--lease_holder": holder,
        "--lease_epoch": "4",
        "--repair_mode": "reload",
        "--dms_task_arn": TASK_ARN,
        "--fail_on_divergence": "false",
    }
    assert arguments["--report_uri"] == f"s3://{ARTIFACTS}/manifests/reports/{result['run_id']}.json"


def test_reapply_runs_the_fixed_files_as_a_glue_run_under_the_lease_holder_and_refuses_without_one(
    aws, capsys
) -> None:
    """Given no lease, When the operator asks to reapply a file, Then it is refused naming `lakectl start`
    (exit 2) and no run starts; Given the lease held at epoch 7, When they reapply two fixed files (a dry
    run), and then a CDC run's quarantined files, Then the reapply job runs with the holder, the epoch, the
    files as one JSON array (or the run id), the dry run, and a report under manifests/reapply/."""
    files = [
        f"s3://{RAW}/dms/sales/orders/{cdc_file_name(datetime(2026, 11, 24, 10, i, tzinfo=UTC))}"
        for i in (1, 2)
    ]
    refused_code, refused = lakectl(capsys, "reapply", "--file", files[0])
    no_runs = aws.glue.get_job_runs(JobName="test-reapply")["JobRuns"]
    holder = "arn:aws:states:us-east-1:123456789012:execution:test-pipeline:run-2"
    aws.put(ARTIFACTS, "locks/pipeline-lease.json", {"holder": holder, "epoch": 7})

    code, by_files = lakectl(capsys, "reapply", "--file", *files, "--dry-run")
    batch_code, by_batch = lakectl(capsys, "reapply", "--run-id", RUN_ID)

    assert refused_code == 2 and "lakectl start" in refused and no_runs == []
    assert code == batch_code == 0

    def arguments(result: dict[str, Any]) -> dict[str, str]:
        run = aws.glue.get_job_run(JobName="test-reapply", RunId=result["job_run_id"])["JobRun"]
        return run["Arguments"]

    lease = {
        "--lease_uri": f"s3://{ARTIFACTS}/locks/pipeline-lease.json",
        "--lease_holder": holder,
        "--lease_epoch": "7",
    }
    report = f"s3://{ARTIFACTS}/manifests/reapply/{by_files['run_id']}.json"
    assert arguments(by_files) == lease | {
        "--files_json": json.dumps(files),
        "--dry_run": "true",
        "--report_uri": report,
    }
    assert by_files["report_uri"] == report
    assert {k: v for k, v in arguments(by_batch).items() if k != "--report_uri"} == lease | {
        "--run_id": RUN_ID,
        "--dry_run": "false",
    }


def test_reapply_takes_files_or_a_run_id_never_both(aws, capsys) -> None:
    """Given the lease held, When the operator names both files and a run id, or neither, Then the command
    line refuses it before any run starts."""
    aws.put(ARTIFACTS, "locks/pipeline-lease.json", {"holder": "arn:x", "epoch": 1})
    for argv in (("reapply",), ("reapply", "--file", f"s3://{RAW}/f.csv", "--run-id", RUN_ID)):
        with pytest.raises(SystemExit) as refused:
            cli.main([*argv, "--stack-name", STACK])
        assert refused.value.code == 2
    assert aws.glue.get_job_runs(JobName="test-reapply")["JobRuns"] == []


def test_reload_asks_dms_for_the_table_of_the_stacks_task(aws, capsys, monkeypatch) -> None:
    """Given the stack's DMS task, When the operator reloads sales.orders, Then DMS is asked to reload that
    table (data-reload) of that task; a name without its schema is refused."""
    asked: list[dict[str, Any]] = []

    class Dms:
        def reload_tables(self, **request: Any) -> dict[str, Any]:
            asked.append(request)
            return {"ReplicationTaskArn": request["ReplicationTaskArn"]}

    made = cli.session_clients(None, None)
    clients = lambda service: Dms() if service == "dms" else made(service)  # noqa: E731

    code = cli.main(["reload", "sales.orders", "--stack-name", STACK], clients=clients)
    bad = cli.main(["reload", "orders", "--stack-name", STACK], clients=clients)

    assert (code, bad) == (0, 2)
    assert asked == [
        {
            "ReplicationTaskArn": TASK_ARN,
            "TablesToReload": [{"SchemaName": "sales", "TableName": "orders"}],
            "ReloadOption": "data-reload",
        }
    ]


def test_a_wait_shows_each_state_until_the_run_ends() -> None:
    """Given a Glue run that is STARTING, then RUNNING, then SUCCEEDED, When the operator waits on it, Then the
    progress display is told each state and the wait returns the final one."""
    states = iter(["STARTING", "RUNNING", "SUCCEEDED"])

    class Glue:
        def get_job_run(self, JobName: str, RunId: str) -> dict[str, Any]:
            return {"JobRun": {"JobRunState": next(states)}}

    shown: list[str] = []
    final = runs.wait_for_glue_run(Glue(), "test-reconcile", "jr_1", shown.append, poll_seconds=0)

    assert final == "SUCCEEDED"
    assert [line.split(" after ")[0] for line in shown] == ["STARTING", "RUNNING", "SUCCEEDED"]


def test_a_stack_that_does_not_exist_is_an_error_naming_it(aws, capsys) -> None:
    """Given no stack of that name, When the operator asks its status, Then lakectl exits 2 with AWS's error
    naming the stack (no traceback)."""
    code = cli.main(["status", "--stack-name", "no-such-stack"])

    assert code == 2
    assert "no-such-stack" in capsys.readouterr().err


class FakeRollbackRun:
    """Stands in for the reapply job's run in rollback mode: it publishes `report` at the run's
    `--report_uri` when lakectl waits for it, and the run ends SUCCEEDED (FAILED when refused)."""

    def __init__(self, aws: Aws, report: dict[str, Any]) -> None:
        self.aws, self.report = aws, report

    def __call__(self, glue: Any, job: str, run_id: str, progress: Any, **_: Any) -> str:
        arguments = glue.get_job_run(JobName=job, RunId=run_id)["JobRun"]["Arguments"]
        bucket, _, key = arguments["--report_uri"].removeprefix("s3://").partition("/")
        dry_run = arguments["--dry_run"] == "true"
        rolled_back = self.report["rolled_back"] and not dry_run
        self.aws.put(bucket, key, self.report | {"dry_run": dry_run, "rolled_back": rolled_back})
        return "FAILED" if self.report.get("refused") else "SUCCEEDED"


def rollback_report(files: list[str], refused: str | None = None) -> dict[str, Any]:
    return {
        "table": "sales.orders",
        "target_snapshot_id": 11,
        "rolled_back_snapshot_ids": [13, 12],
        "files_to_redrive": files,
        "rolled_back": refused is None,
        "refused": refused,
        "note": None,
    }


def test_rollback_runs_under_the_lease_holder_then_redrives_the_files_it_reports(
    aws, capsys, monkeypatch
) -> None:
    """Given the lease held at epoch 3 and two raw files written an hour ago, When the operator rolls
    sales.orders back to snapshot 11 (the job's report names the two files), Then the reapply job runs in
    rollback mode with the holder, the epoch, the target and the stack's TombstoneRetentionDays, and both
    files are back on the queue; with --no-redrive, and with --dry-run, the same run re-drives nothing."""
    now = datetime.now(UTC)
    keys = [f"dms/sales/orders/{cdc_file_name(now - timedelta(minutes=m))}" for m in (60, 59)]
    for key in keys:
        aws.s3.put_object(Bucket=RAW, Key=key, Body=b"I,1\n")
    files = [f"s3://{RAW}/{key}" for key in keys]
    holder = "arn:aws:states:us-east-1:123456789012:execution:test-pipeline:run-3"
    aws.put(ARTIFACTS, "locks/pipeline-lease.json", {"holder": holder, "epoch": 3})
    monkeypatch.setattr(cli, "wait_for_glue_run", FakeRollbackRun(aws, rollback_report(files)))

    code, result = lakectl(capsys, "rollback", "sales.orders", "--to-snapshot", "11")
    queued = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    kept_code, kept = lakectl(capsys, "rollback", "sales.orders", "--to-snapshot", "11", "--no-redrive")
    dry_code, dry = lakectl(
        capsys, "rollback", "sales.orders", "--before", "2026-11-24T10:00:00", "--dry-run"
    )
    nothing_more = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get("Messages", [])

    arguments = aws.glue.get_job_run(JobName="test-reapply", RunId=result["job_run_id"])["JobRun"][
        "Arguments"
    ]
    assert arguments == {
        "--lease_uri": f"s3://{ARTIFACTS}/locks/pipeline-lease.json",
        "--lease_holder": holder,
        "--lease_epoch": "3",
        "--rollback_json": json.dumps({"table": "sales.orders", "snapshot_id": 11}),
        "--tombstone_retention_days": "35",
        "--dry_run": "false",
        "--report_uri": f"s3://{ARTIFACTS}/manifests/reapply/{result['run_id']}.json",
    }
    assert code == kept_code == dry_code == 0
    assert result["state"] == "SUCCEEDED" and result["report"]["files_to_redrive"] == files
    assert result["redrive"] == {"sent": keys, "refused": []}
    assert sorted(json.loads(m["Body"])["detail"]["object"]["key"] for m in queued) == keys
    assert "redrive" not in kept and "redrive" not in dry and nothing_more == []
    dry_arguments = aws.glue.get_job_run(JobName="test-reapply", RunId=dry["job_run_id"])["JobRun"][
        "Arguments"
    ]
    assert json.loads(dry_arguments["--rollback_json"]) == {
        "table": "sales.orders",
        "before": "2026-11-24T10:00:00",
    }
    assert dry_arguments["--dry_run"] == "true" and dry["report"]["dry_run"] is True


def test_a_refused_rollback_exits_non_zero_with_its_reason_and_redrives_nothing(
    aws, capsys, monkeypatch
) -> None:
    """Given the lease held and a rollback the job refuses (a reload among the commits), When the operator
    runs it, Then lakectl exits 1 naming the reason (in JSON and in its human output), and queues nothing;
    Given no lease, Then it is refused naming `lakectl start` and no run starts."""
    no_lease_code, no_lease = lakectl(capsys, "rollback", "sales.orders", "--to-snapshot", "11")
    no_runs = aws.glue.get_job_runs(JobName="test-reapply")["JobRuns"]
    aws.put(ARTIFACTS, "locks/pipeline-lease.json", {"holder": "arn:x", "epoch": 1})
    why = "snapshot 12 is a reload of the table: reload the table instead (`lakectl reload sales.orders`)"
    files = [f"s3://{RAW}/dms/sales/orders/{cdc_file_name(datetime.now(UTC))}"]
    monkeypatch.setattr(cli, "wait_for_glue_run", FakeRollbackRun(aws, rollback_report(files, why)))

    code, result = lakectl(capsys, "rollback", "sales.orders", "--to-snapshot", "11")
    text_code = cli.main(["rollback", "sales.orders", "--to-snapshot", "11", "--stack-name", STACK])
    text = capsys.readouterr().out

    assert no_lease_code == 2 and "lakectl start" in no_lease and no_runs == []
    assert code == text_code == 1
    assert result["refused"] == why and "redrive" not in result
    assert f"refused: {why}" in text
    assert aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get("Messages", []) == []


def test_the_status_last_run_is_not_the_refines_report(aws, capsys) -> None:
    """Given a CDC run's report, then the refine's report at its fixed key (manifests/reports/refine-latest.json,
    the watchdog's) written after it, When the operator asks the status, Then the last run is still the CDC
    run's, with its pending loads: the refine's report holds none of what the status shows of a run."""
    aws.put(ARTIFACTS, f"manifests/reports/{RUN_ID}.json", {"run_id": RUN_ID, "job": "cdc", "tables": []})
    aws.put(ARTIFACTS, "manifests/reports/refine-latest.json", {"run_id": "idle-x", "batch": 1, "tables": []})

    code, status = lakectl(capsys, "status")

    assert code == 0
    assert status["last_run"]["run_id"] == RUN_ID
