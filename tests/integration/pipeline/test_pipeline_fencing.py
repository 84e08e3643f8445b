"""Fencing on the deployed template (docs/CONTRACTS.md, "Fencing"): two executions racing. Execution 1 is
stopped while its full-load run is going (the documented upgrade step); execution 2 takes the lease over,
stops that run and waits until it stopped before it starts its own; a run started under execution 1's lease
after that commits nothing; the clean tables end equal to the source."""

import json
import time

import pytest

from localaws import replication
from localaws.pipeline_run import LocalPipeline

pytestmark = pytest.mark.integration

ACTIVE = ("STARTING", "RUNNING", "STOPPING", "WAITING")
LEASE_KEY = "locks/pipeline-lease.json"


def wait_for(probe, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    return None


def lease(pipeline: LocalPipeline) -> dict:
    s3 = pipeline.aws("s3")
    try:
        body = s3.get_object(Bucket=pipeline.app.artifacts_bucket, Key=LEASE_KEY)["Body"]
    except s3.exceptions.NoSuchKey:
        return {}
    return json.loads(body.read())


def runs_of(pipeline: LocalPipeline, job: str, holder: str) -> list[dict]:
    runs = pipeline.aws("glue").get_job_runs(JobName=job)["JobRuns"]
    return [r for r in runs if r.get("Arguments", {}).get("--lease_holder") == holder]


def test_an_execution_stopped_mid_run_loses_the_lease_and_its_run_writes_nothing(make_pipeline) -> None:
    """Given execution 1 holding the lease (epoch 1) with its full-load run going,
    When it is stopped and execution 2 is started,
    Then execution 2 takes the lease over (epoch 2), stops execution 1's run and starts its own only once
    that run ended; a run started later with execution 1's lease arguments fails with LeaseLost; every
    clean table ends equal to its source."""
    pipeline = make_pipeline()
    pipeline.start_replication()
    first = pipeline.start_execution()
    job = pipeline.app.full_load_job_name
    going = wait_for(lambda: [r for r in runs_of(pipeline, job, first) if r["JobRunState"] == "RUNNING"], 300)
    assert going, pipeline.aws("glue").get_job_runs(JobName=job)["JobRuns"]
    assert lease(pipeline)["holder"] == first and lease(pipeline)["epoch"] == 1

    sfn = pipeline.aws("stepfunctions")
    sfn.stop_execution(executionArn=first, error="Upgrade", cause="the documented upgrade step")
    # The runbook's order: execution 2 once execution 1 is no longer RUNNING (LocalStack stops it a moment after
    # answering; started before that, execution 2 finds the lease held by a RUNNING execution and exits).
    assert wait_for(lambda: sfn.describe_execution(executionArn=first)["status"] != "RUNNING", 60)
    second = pipeline.start_execution()

    assert wait_for(lambda: lease(pipeline).get("holder") == second, 120), lease(pipeline)
    assert lease(pipeline)["epoch"] == 2 and lease(pipeline)["taken_from"] == first
    ended = wait_for(
        lambda: (
            (r := pipeline.aws("glue").get_job_run(JobName=job, RunId=going[0]["Id"])["JobRun"])[
                "JobRunState"
            ]
            not in ACTIVE
            and r
        ),
        180,
    )
    assert ended and ended["JobRunState"] == "STOPPED", ended
    own = wait_for(lambda: runs_of(pipeline, job, second), 300)
    assert own and all(r["StartedOn"] >= ended["CompletedOn"] for r in own), (ended, own)

    pipeline.wait_until_applied(timeout=420)  # no workload: the race is the point, and each run costs minutes

    # A run of execution 1 that outlived everything (here: started by hand with its arguments) commits nothing.
    table = f"{pipeline.source_schema}.{replication.SOURCE_TABLES[0]}"
    stale = {
        "--tables": table,
        "--reload": "true",
        "--run_id": "stale-reload",
        "--lease_uri": f"s3://{pipeline.app.artifacts_bucket}/{LEASE_KEY}",
        "--lease_holder": first,
        "--lease_epoch": "1",
    }
    with pytest.raises(RuntimeError, match="LeaseLost") as refused:
        pipeline.run_job(job, stale, timeout=300)
    assert second in str(refused.value)

    checks = pipeline.verify()
    assert checks and all(c.matches for c in checks), "\n".join(c.line() for c in checks)
    pipeline.stop_executions()
