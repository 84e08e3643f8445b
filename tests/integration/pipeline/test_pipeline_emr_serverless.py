"""The template deployed with SparkEngine=emr-serverless: the same pipeline, its Spark jobs run as job runs of
an EMR Serverless application through Step Functions' `emr-serverless:startJobRun.sync` (the local one is
localaws_plugin's: the entry points run on the host with the project's Python, as the local Glue's do)."""

import pytest

from localaws import replication
from localaws.pipeline_run import EMR_SERVERLESS_PARAMETERS, LocalPipeline

pytestmark = pytest.mark.integration


def assert_clean_equals_source(pipeline: LocalPipeline) -> None:
    checks = pipeline.verify()
    lines = "\n".join(c.line() for c in checks)
    assert checks and all(c.matches for c in checks), lines
    assert {c.table for c in checks} == {f"{pipeline.source_schema}.{t}" for t in replication.SOURCE_TABLES}


def test_on_emr_serverless_the_full_load_and_cdc_batches_bring_the_clean_zone_to_the_source(
    make_pipeline,
) -> None:
    """Given the stack deployed with SparkEngine=emr-serverless (an EMR Serverless application, its job role
    and the state machine tools/emr_serverless_asl.py derives from the Glue one),
    When DMS loads the source and a workload of inserts, updates and deletes follows,
    Then the full load and the CDC batches run as job runs of the application (named after the Glue jobs,
    all SUCCESS; the Glue jobs never run), and every clean table equals its source."""
    pipeline = make_pipeline(parameters=dict(EMR_SERVERLESS_PARAMETERS))
    app = pipeline.app
    assert app is not None and app.outputs["SparkEngine"] == "emr-serverless" and app.emr_application_id
    definition = pipeline.aws("stepfunctions").describe_state_machine(stateMachineArn=app.state_machine_arn)[
        "definition"
    ]
    assert "arn:aws:states:::emr-serverless:startJobRun.sync" in definition
    assert "glue:startJobRun" not in definition

    pipeline.start_replication()
    pipeline.start_execution()
    # the full load: every table of the schema file loaded (minutes on a loaded machine: a bound, not a goal)
    pipeline.wait_until_applied(timeout=900)
    changes = pipeline.run_workload(150, seed=61)
    pipeline.wait_until_applied(timeout=420)

    assert changes > 0
    assert_clean_equals_source(pipeline)
    runs = pipeline.emr_job_runs()  # an idle-time refine may still be going: it is not what is checked
    environment = pipeline.settings.name
    succeeded = {r["name"] for r in runs if r["state"] == "SUCCESS"}
    assert {f"{environment}-full-load", f"{environment}-cdc"} <= succeeded, runs
    failed = [
        (r["name"], r["state"], r["stateDetails"]) for r in runs if r["state"] in ("FAILED", "CANCELLED")
    ]
    assert failed == []
    glue = pipeline.aws("glue")
    assert glue.get_job_runs(JobName=app.cdc_job_name)["JobRuns"] == []
    assert glue.get_job_runs(JobName=app.full_load_job_name)["JobRuns"] == []
