"""The reapply Glue job `lakectl reapply` starts: the stack defines it like the CDC job it mirrors (its
script published with the others), and the job accepts every argument the stack and lakectl pass it."""

from __future__ import annotations

import sys
from typing import Any

from lakectl.runs import reapply_arguments, rollback_arguments
from lakectl.stack import Stack
from tests.unit.template.test_reconcile_wiring import SAMPLE, SPARK_JOBS, _job_argv

if str(SPARK_JOBS) not in sys.path:
    sys.path.insert(0, str(SPARK_JOBS))

from lakehouse.base.config import parse_job_arguments
from lakehouse.io.fence import fence_from_arguments
from lakehouse.jobs.reapply import parser as reapply_parser
from lakehouse.jobs.reapply import rollback_target

STACK = Stack(
    "dev-stack", {"ArtifactsBucketName": SAMPLE["ArtifactsBucket"], "ReapplyJobName": "dev-reapply"}
)
# the DMS settings' sample values (the CDC job's parameters)
VALUES = SAMPLE | {"TypeMismatch": "fail", "CsvDelimiter": ",", "CsvNullValue": "", "HistoryTables": ""}
FILES = [
    "s3://raw/dms/sales/orders/20261124-100100000.csv",
    "s3://raw/dms/sales/orders/20261124-100200000.csv",
]


def test_the_reapply_job_accepts_every_argument_the_stack_and_lakectl_pass_it(
    template: dict[str, Any],
) -> None:
    """Given the reapply job's default arguments and the run arguments lakectl gives it, When its entry parses
    them as on Glue (lease arguments taken by the fence), Then nothing is unknown, the run is fenced by the
    holder and epoch, and it reads the files, the stack's schema file and catalog."""
    run = reapply_arguments(
        STACK, "arn:aws:states:::execution:p:e", 5, "reapply-1", FILES, None, dry_run=True
    )

    fence, rest = fence_from_arguments(_job_argv(template, "ReapplyJob", run, VALUES))
    config, args = parse_job_arguments(rest, reapply_parser())

    assert fence is not None and (fence.holder, fence.epoch) == ("arn:aws:states:::execution:p:e", 5)
    assert fence.lease_uri == "s3://artifacts/locks/pipeline-lease.json"
    assert args.files_json == FILES and args.run_id is None and args.dry_run == "true"
    assert args.report_uri == "s3://artifacts/manifests/reapply/reapply-1.json"
    assert config.schema_file == "s3://artifacts/config/schema-0123456789abcdef.json"
    assert config.catalog_type == "glue"


def test_the_reapply_job_mirrors_the_cdc_job_and_is_an_output_the_lease_fences(
    template: dict[str, Any],
) -> None:
    """Given the template, Then the reapply job runs its published script on Glue 5.1 with the CDC job's role
    and its DMS settings, its name is a stack Output, and the lease function stops its runs on a takeover."""
    resources = template["Resources"]
    job = resources["ReapplyJob"]["Properties"]
    cdc = resources["CdcJob"]["Properties"]
    assert job["GlueVersion"] == "5.1" and job["Role"] == cdc["Role"]
    assert job["Command"]["ScriptLocation"] == {
        "Fn::Sub": "s3://${ArtifactsBucket}/${JobCodePrefix}/scripts/reapply_job.py"
    }
    assert (SPARK_JOBS / "reapply_job.py").exists()
    for name in ("--schema_file", "--warehouse", "--catalog_type", "--csv_null_value", "--history_tables"):
        assert job["DefaultArguments"][name] == cdc["DefaultArguments"][name], name
    assert template["Outputs"]["ReapplyJobName"]["Value"] == {"Ref": "ReapplyJob"}
    lease = resources["LeaseFunction"]["Properties"]
    assert "${ReapplyJob}" in lease["Environment"]["Variables"]["GLUE_JOB_NAMES"]["Fn::Sub"]


def test_the_reapply_job_takes_lakectls_rollback_arguments(template: dict[str, Any]) -> None:
    """Given the run arguments `lakectl rollback` gives the reapply job (a table, its target snapshot, the
    stack's TombstoneRetentionDays), When its entry parses them with the stack's defaults, Then the rollback
    is read as one JSON value, with the retention, fenced by the holder, and no file or run is named."""
    stack = Stack(STACK.name, STACK.outputs, {"TombstoneRetentionDays": "40"})
    target = {"table": "sales.orders", "snapshot_id": 123}
    run = rollback_arguments(stack, "arn:aws:states:::execution:p:e", 5, "rollback-1", target, dry_run=False)

    fence, rest = fence_from_arguments(_job_argv(template, "ReapplyJob", run, VALUES))
    _, args = parse_job_arguments(rest, reapply_parser())

    assert fence is not None and fence.holder == "arn:aws:states:::execution:p:e"
    assert args.rollback_json == target and args.tombstone_retention_days == 40
    assert args.files_json == [] and args.run_id is None and args.dry_run == "false"
    assert rollback_target(args.rollback_json, reapply_parser()) == {
        "table": "sales.orders",
        "snapshot_id": 123,
        "before": None,
    }
    assert args.report_uri == "s3://artifacts/manifests/reapply/rollback-1.json"
