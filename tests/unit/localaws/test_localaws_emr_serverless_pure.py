"""The local EMR Serverless' pure parts: a StartJobRun request's meaning on this host, a run's API shape,
the CloudFormation application's request, the shared host-run helpers (no LocalStack, no Spark)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from localaws_plugin import host_runs, settings
from localaws_plugin.emr_serverless_runs import (
    TERMINAL_STATES,
    JobRun,
    application_request,
    local_arguments,
    option_names,
    parse_spark_submit_parameters,
    step_functions_error,
)

from tools import emr_serverless_asl

EMR_ASL = json.loads(emr_serverless_asl.EMR_ASL.read_text())


def test_spark_submit_parameters_name_the_libraries_jars_and_settings():
    parsed = parse_spark_submit_parameters(
        "--py-files s3://a/lib.zip,s3://a/more.zip --jars=s3://a/iceberg.jar "
        "--conf spark.sql.catalog.lake=org.apache.iceberg.spark.SparkCatalog --conf k=v=w --verbose"
    )
    assert parsed.py_files == ("s3://a/lib.zip", "s3://a/more.zip")
    assert parsed.jars == ("s3://a/iceberg.jar",)
    assert parsed.conf == {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog", "k": "v=w"}
    assert parsed.other == ("--verbose",)
    assert parse_spark_submit_parameters(None).py_files == ()
    with pytest.raises(ValueError):
        parse_spark_submit_parameters("--conf novalue")
    with pytest.raises(ValueError):
        parse_spark_submit_parameters("--py-files")


def test_the_state_machines_runs_ask_for_the_library_the_local_run_puts_on_the_path():
    """What the derived state machine sends is what this provider reads: the lakehouse zip as --py-files."""
    for name in ("RunFullLoad", "RunCdc"):
        submit = EMR_ASL["States"][name]["Parameters"]["JobDriver"]["SparkSubmit"]
        parsed = parse_spark_submit_parameters(submit["SparkSubmitParameters"])
        assert parsed.py_files == ("s3://${ArtifactsBucket}/${JobCodePrefix}/lib/lakehouse.zip",)
        assert parsed.conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"


def test_local_overrides_replace_every_occurrence_and_are_added_when_absent():
    arguments = [
        "--catalog_type",
        "glue",
        "--warehouse",
        "s3://clean/w/",
        "--run_id",
        "r1",
        "--catalog_type",
        "glue",
    ]
    overrides = {
        "--catalog_type": "hadoop",
        "--warehouse": "/var/w",
        "--s3_endpoint_url": "http://127.0.0.1:4566",
    }
    assert local_arguments(arguments, overrides) == [
        "--catalog_type",
        "hadoop",
        "--warehouse",
        "/var/w",
        "--run_id",
        "r1",
        "--catalog_type",
        "hadoop",
        "--s3_endpoint_url",
        "http://127.0.0.1:4566",
    ]
    assert option_names(arguments) == {"--catalog_type", "--warehouse", "--run_id"}


def test_every_local_run_gets_the_local_catalog_and_the_refine_job_its_default_location(monkeypatch):
    monkeypatch.setenv("LOCALAWS_WAREHOUSE", "/w")
    monkeypatch.setenv("LOCALAWS_ENDPOINT_URL", "http://127.0.0.1:4999")
    assert host_runs.local_overrides({"--catalog_type"}) == {
        "--catalog_type": "hadoop",
        "--warehouse": "/w",
        "--s3_endpoint_url": "http://127.0.0.1:4999",
    }
    assert host_runs.local_overrides({"--refined_location": "s3://r"})["--refined_location"] == ""


def test_a_failed_runs_details_are_the_last_lines_of_its_stderr():
    stderr = "\n".join(f"line {n}" for n in range(40)) + "\n\n"
    message = host_runs.error_message_from_stderr(stderr, 1)
    assert message.splitlines() == [f"line {n}" for n in range(28, 40)]
    assert host_runs.error_message_from_stderr("", 3) == "script exited with status 3"


def _run() -> JobRun:
    return JobRun(
        application_id="00app",
        run_id="00run",
        account_id="000000000000",
        region="us-east-1",
        name="dev-cdc",
        execution_role="arn:aws:iam::000000000000:role/emr",
        release_label="emr-7.12.0",
        job_driver={"sparkSubmit": {"entryPoint": "s3://a/cdc_job.py"}},
    )


def test_a_run_goes_from_submitted_to_a_terminal_state_with_its_details_and_times():
    run = _run()
    assert run.as_api()["state"] == "SUBMITTED" and "startedAt" not in run.as_api()
    run.move_to("RUNNING")
    run.started_at = datetime.now(UTC) - timedelta(seconds=42)
    run.move_to("FAILED", "ValueError: bad manifest")
    api = run.as_api()
    assert api["state"] == "FAILED" and api["stateDetails"] == "ValueError: bad manifest"
    assert api["totalExecutionDurationSeconds"] >= 42 and api["endedAt"] >= api["startedAt"]
    assert api["arn"] == "arn:aws:emr-serverless:us-east-1:000000000000:/applications/00app/jobruns/00run"
    assert {"SUCCESS", "FAILED", "CANCELLED"} == TERMINAL_STATES
    summary = run.as_summary()
    assert summary["id"] == "00run" and summary["state"] == "FAILED" and summary["name"] == "dev-cdc"


def test_the_api_shape_has_every_member_getjobrun_requires():
    import botocore.session

    model = botocore.session.get_session().get_service_model("emr-serverless")
    required = set(model.shape_for("JobRun").required_members)
    assert required <= set(_run().as_api())
    assert set(_run().as_summary()) >= set(model.shape_for("JobRunSummary").required_members)
    assert set(model.shape_for("JobRunState").enum) >= TERMINAL_STATES


def test_step_functions_names_api_errors_as_aws_does():
    assert step_functions_error("ValidationException") == "EMRServerless.ValidationException"
    assert set(emr_serverless_asl.GLUE_TO_EMR_ERRORS.values()) == {
        step_functions_error(code)
        for code in ("ConflictException", "ThrottlingException", "InternalServerException")
    }


def test_the_cloudformation_application_becomes_a_create_application_request():
    model = {
        "Name": "dev-lake",
        "Type": "SPARK",
        "ReleaseLabel": "emr-7.12.0",
        "AutoStartConfiguration": {"Enabled": "true"},
        "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": "15"},
        "MaximumCapacity": {"Cpu": "64 vCPU", "Memory": "256 GB"},
        "InitialCapacity": [
            {
                "Key": "Driver",
                "Value": {"WorkerCount": "1", "WorkerConfiguration": {"Cpu": "4 vCPU", "Memory": "16 GB"}},
            },
            {
                "Key": "Executor",
                "Value": {"WorkerCount": 2, "WorkerConfiguration": {"Cpu": "4 vCPU", "Memory": "16 GB"}},
            },
        ],
        "ImageConfiguration": {"ImageUri": "x/y:z"},
    }
    assert application_request(model) == {
        "name": "dev-lake",
        "releaseLabel": "emr-7.12.0",
        "type": "SPARK",
        "autoStartConfiguration": {"enabled": True},
        "autoStopConfiguration": {"enabled": True, "idleTimeoutMinutes": 15},
        "maximumCapacity": {"cpu": "64 vCPU", "memory": "256 GB"},
        "initialCapacity": {
            "Driver": {"workerCount": 1, "workerConfiguration": {"cpu": "4 vCPU", "memory": "16 GB"}},
            "Executor": {"workerCount": 2, "workerConfiguration": {"cpu": "4 vCPU", "memory": "16 GB"}},
        },
    }


def test_the_plugin_package_declares_the_emr_serverless_service_its_cloudformation_type_and_the_hook():
    """LocalStack finds plugins through entry points: the provider, the resource provider and the start hook
    that installs Step Functions' emr-serverless integration must be declared, and name what exists."""
    import re
    import tomllib
    from pathlib import Path

    plugin = Path(host_runs.__file__).resolve().parents[1]
    points = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["entry-points"]
    declared = {
        points["localstack.aws.provider"]["emr-serverless:default"],
        points["localstack.cloudformation.resource_providers"]["aws::emrserverless::application"],
        *points["localstack.hooks.on_infra_start"].values(),
    }
    assert declared == {
        "localaws_plugin.providers:emr_serverless",
        "localaws_plugin.cfn_emr_serverless:EmrServerlessApplicationProviderPlugin",
        "localaws_plugin.sfn_emr_serverless:patch_step_functions_for_emr_serverless",
    }
    for target in declared:
        module, name = target.split(":")
        source = (plugin / (module.replace(".", "/") + ".py")).read_text()
        assert re.search(rf"^(def|class) {name}\b", source, re.MULTILINE), target
    hook = (plugin / "localaws_plugin" / "sfn_emr_serverless.py").read_text()
    assert "@hooks.on_infra_start()" in hook


def test_a_job_run_gets_the_callers_spark_jvm_options_and_not_localstacks_settings(monkeypatch):
    """Given LocalStack's environment with the JVM options and submit arguments of local Spark sessions and
    LocalStack's own settings,
    When the base environment of a host process (a job script, a warm Spark worker) is made,
    Then it carries the JVM options, the submit arguments and the paths, and none of LocalStack's settings."""
    submit = "--conf spark.sql.codegen.wholeStage=false pyspark-shell"
    monkeypatch.setenv("LAKE_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit)
    monkeypatch.setenv("GATEWAY_LISTEN", "127.0.0.1:4566")
    monkeypatch.setenv("PATH", "/usr/bin")

    env = settings.host_process_base_env()

    assert env["LAKE_SPARK_JAVA_OPTIONS"] == "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert env["PYSPARK_SUBMIT_ARGS"] == submit
    assert env["PATH"] == "/usr/bin"
    assert "GATEWAY_LISTEN" not in env


def test_pre_initialized_workers_of_a_size_emr_serverless_refuses_are_refused():
    """Given the template's pool (a driver of 2 vCPU / 8 GB, executors of 4 vCPU / 16 GB), Then the request is
    made; given a driver of 2 vCPU / 20 GB or of 3 vCPU, or 8 vCPU / 18 GB (8 vCPU workers step by 4 GB), Then
    the local EMR Serverless refuses the application, as AWS does."""

    def model(cpu: str, memory: str) -> dict:
        worker = {"WorkerCount": 1, "WorkerConfiguration": {"Cpu": cpu, "Memory": memory}}
        executor = {"WorkerCount": 1, "WorkerConfiguration": {"Cpu": "4 vCPU", "Memory": "16 GB"}}
        return {
            "Name": "dev-lake",
            "Type": "SPARK",
            "ReleaseLabel": "emr-7.12.0",
            "InitialCapacity": [{"Key": "Driver", "Value": worker}, {"Key": "Executor", "Value": executor}],
        }

    assert application_request(model("2 vCPU", "8 GB"))["initialCapacity"]["Driver"][
        "workerConfiguration"
    ] == {
        "cpu": "2 vCPU",
        "memory": "8 GB",
    }
    for cpu, memory in (("2 vCPU", "20 GB"), ("3 vCPU", "8 GB"), ("8 vCPU", "18 GB")):
        with pytest.raises(ValueError, match="EMR Serverless"):
            application_request(model(cpu, memory))
