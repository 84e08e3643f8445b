"""tools.emr_serverless_asl: how a Glue job task becomes an EMR Serverless one (pure functions, no
template)."""

from __future__ import annotations

import copy

import pytest

from tools import emr_serverless_asl
from tools.emr_serverless_asl import EngineError

JOB = {
    "Name": {"Fn::Sub": "${EnvironmentName}-cdc"},
    "Timeout": {"Ref": "CdcJobTimeoutMinutes"},
    "Command": {"ScriptLocation": {"Fn::Sub": "s3://${ArtifactsBucket}/glue/scripts/cdc_job.py"}},
    "DefaultArguments": {
        "--datalake-formats": "iceberg",
        "--extra-jars": {"Fn::Sub": "s3://${ArtifactsBucket}/glue/jars/runtime.jar"},
        "--extra-py-files": {"Fn::Sub": "s3://${ArtifactsBucket}/glue/lib/lakehouse.zip"},
        "--enable-metrics": "true",
        "--TempDir": "s3://tmp/",
        "--catalog_type": "glue",
        "--warehouse": {"Fn::Sub": "s3://${CleanBucket}/warehouse/"},
        "--csv_null_value": {"Ref": "CsvNullValue"},
    },
}
TEMPLATE = {
    "Resources": {
        "CdcJob": {"Type": "AWS::Glue::Job", "Properties": JOB},
        "PipelineStateMachine": {
            "Properties": {"DefinitionSubstitutions": {"CdcJobName": {"Ref": "CdcJob"}}}
        },
    }
}
GLUE_TASK = {
    "Type": "Task",
    "Resource": emr_serverless_asl.GLUE_SYNC,
    "Parameters": {
        "JobName": "${CdcJobName}",
        "Arguments": {"--manifest.$": "$.batch.value.manifest_uri", "--reload": "true"},
    },
    "ResultPath": "$.cdc_run",
    "Retry": [
        {"ErrorEquals": ["Glue.ThrottlingException"], "MaxAttempts": 12},
        {"ErrorEquals": ["States.ALL"], "MaxAttempts": 2},
    ],
    "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Failed"}],
    "Next": "Acknowledge",
}
ASL = {
    "Comment": "glue",
    "StartAt": "RunCdc",
    "States": {
        "RunCdc": GLUE_TASK,
        "Acknowledge": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"Payload": {"run_id.$": "$.batch.value.run_id", "glue_run.$": "$.cdc_run"}},
            "End": True,
        },
        "Failed": {"Type": "Fail"},
    },
}


def test_template_values_become_definition_text_with_their_substitutions():
    assert emr_serverless_asl.as_text("glue") == "glue"
    assert emr_serverless_asl.as_text(120) == "120"
    assert emr_serverless_asl.as_text({"Fn::Sub": "s3://${CleanBucket}/w/"}) == "s3://${CleanBucket}/w/"
    assert emr_serverless_asl.as_text({"Ref": "CsvNullValue"}) == "${CsvNullValue}"
    with pytest.raises(EngineError):
        emr_serverless_asl.as_text({"Fn::GetAtt": ["Bucket", "Arn"]})
    with pytest.raises(EngineError):
        emr_serverless_asl.as_text({"Fn::Sub": ["${x}", {"x": "y"}]})


def test_intrinsic_literals_escape_what_the_parser_would_read_but_keep_substitutions():
    assert emr_serverless_asl.intrinsic_literal("s3://${ArtifactsBucket}/x") == "'s3://${ArtifactsBucket}/x'"
    assert emr_serverless_asl.intrinsic_literal("it's {a} \\") == "'it\\'s \\{a\\} \\\\'"
    assert emr_serverless_asl.intrinsic_literal("") == "''"


def test_only_the_jobs_own_arguments_are_passed_in_template_order():
    assert emr_serverless_asl.job_arguments(JOB) == [
        ("--catalog_type", "glue"),
        ("--warehouse", "s3://${CleanBucket}/warehouse/"),
        ("--csv_null_value", "${CsvNullValue}"),
    ]


def test_static_arguments_are_a_list_and_dynamic_ones_a_states_array():
    defaults = [("--catalog_type", "glue")]
    assert emr_serverless_asl.entry_point_arguments(defaults, {"--reload": "true"}) == (
        "EntryPointArguments",
        ["--catalog_type", "glue", "--reload", "true"],
    )
    name, value = emr_serverless_asl.entry_point_arguments(
        defaults, {"--run_id.$": "$$.Execution.Name", "--report_uri.$": "States.Format('s3://b/{}', $.id)"}
    )
    assert name == "EntryPointArguments.$"
    assert value == (
        "States.Array('--catalog_type', 'glue', '--run_id', $$.Execution.Name, "
        "'--report_uri', States.Format('s3://b/{}', $.id))"
    )


def test_a_glue_task_becomes_an_emr_serverless_task_in_the_same_place():
    derived = emr_serverless_asl.derive(ASL, TEMPLATE)
    task = derived["States"]["RunCdc"]
    assert task["Resource"] == emr_serverless_asl.EMR_SYNC
    assert [k for k in task if k != "Resource"] == [k for k in GLUE_TASK if k != "Resource"]
    assert task["Retry"][0]["ErrorEquals"] == ["EMRServerless.ThrottlingException"]
    assert task["Retry"][1] == GLUE_TASK["Retry"][1] and task["Catch"] == GLUE_TASK["Catch"]
    parameters = task["Parameters"]
    assert parameters["Name"] == "${EnvironmentName}-cdc"
    assert parameters["ExecutionTimeoutMinutes.$"] == "States.StringToJson('${CdcJobTimeoutMinutes}')"
    submit = parameters["JobDriver"]["SparkSubmit"]
    assert submit["EntryPoint"] == "s3://${ArtifactsBucket}/glue/scripts/cdc_job.py"
    assert submit["EntryPointArguments.$"].startswith("States.Array('--catalog_type', 'glue', '--warehouse'")
    assert submit["EntryPointArguments.$"].endswith(
        "'--manifest', $.batch.value.manifest_uri, '--reload', 'true')"
    )
    # the jars are the template's choice of Iceberg runtime (its IcebergJars substitution), whatever the Glue job's
    assert submit["SparkSubmitParameters"].startswith(
        "--py-files s3://${ArtifactsBucket}/glue/lib/lakehouse.zip --jars ${IcebergJars} "
    )
    assert (
        "--conf spark.sql.catalog.lake.warehouse=s3://${CleanBucket}/warehouse/"
        in submit["SparkSubmitParameters"]
    )
    # the acknowledge no longer reads the Glue run's figures; the rest of its payload is kept
    assert derived["States"]["Acknowledge"]["Parameters"]["Payload"] == {"run_id.$": "$.batch.value.run_id"}
    assert (
        ASL["States"]["Acknowledge"]["Parameters"]["Payload"]["glue_run.$"] == "$.cdc_run"
    )  # input untouched
    assert derived["Comment"].startswith("GENERATED by `python -m tools.emr_serverless_asl`")


def test_what_cannot_be_translated_faithfully_stops_the_generator():
    unknown_error = copy.deepcopy(ASL)
    unknown_error["States"]["RunCdc"]["Retry"][0]["ErrorEquals"] = ["Glue.SomethingNew"]
    with pytest.raises(EngineError, match=r"Glue\.SomethingNew"):
        emr_serverless_asl.derive(unknown_error, TEMPLATE)
    extra_parameter = copy.deepcopy(ASL)
    extra_parameter["States"]["RunCdc"]["Parameters"]["WorkerType"] = "G.2X"
    with pytest.raises(EngineError, match="WorkerType"):
        emr_serverless_asl.derive(extra_parameter, TEMPLATE)
    other_glue_call = copy.deepcopy(ASL)
    other_glue_call["States"]["Failed"] = {"Type": "Task", "Resource": "arn:aws:states:::glue:startCrawler"}
    with pytest.raises(EngineError, match="startCrawler"):
        emr_serverless_asl.derive(other_glue_call, TEMPLATE)
    local_catalog = copy.deepcopy(TEMPLATE)
    local_catalog["Resources"]["CdcJob"]["Properties"]["DefaultArguments"]["--catalog_type"] = "hadoop"
    with pytest.raises(EngineError, match="Glue Data Catalog"):
        emr_serverless_asl.derive(ASL, local_catalog)


def test_the_check_mode_says_how_to_regenerate(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "pipeline.emr-serverless.asl.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(emr_serverless_asl, "EMR_ASL", stale)
    monkeypatch.setattr(emr_serverless_asl, "REPO", tmp_path)
    monkeypatch.setattr(emr_serverless_asl, "generate", lambda: '{"new": true}\n')
    assert emr_serverless_asl.main(["--check"]) == 1
    assert "python -m tools.emr_serverless_asl" in capsys.readouterr().err
    assert emr_serverless_asl.main([]) == 0 and stale.read_text() == '{"new": true}\n'
    assert emr_serverless_asl.main(["--check"]) == 0
