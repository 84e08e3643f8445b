"""SparkEngine: one template, two engines. With `glue` (the default) the stack is what it always was; with
`emr-serverless` the same four jobs run as job runs of one EMR Serverless application, started by a state
machine derived from the Glue one (tools/emr_serverless_asl.py), with the same arguments, data access and
failures."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from localaws_plugin.emr_serverless_runs import check_worker_configuration

from tests.unit.template.test_template import ASL, TEMPLATE
from tools import emr_serverless_asl

EMR_ASL = emr_serverless_asl.EMR_ASL
GLUE_SYNC = "arn:aws:states:::glue:startJobRun.sync"
EMR_SYNC = "arn:aws:states:::emr-serverless:startJobRun.sync"
JOB_TASKS = {
    "RunFullLoad",
    "RunIdleRefine",
    "RunCdc",
    "RunRefine",
    "RunReload",
    "RunMaintenance",
    "RunReconcile",
    "RunRawAudit",
}
SAMPLE_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dms-iceberg-lake-spark:emr-7.12.0-py311"


@pytest.fixture(scope="module")
def emr_asl() -> dict[str, Any]:
    return json.loads(EMR_ASL.read_text())


def _array_items(expression: str) -> list[tuple[str, bool]]:
    """The items of `States.Array(…)`: (text, is it a path or an intrinsic rather than a literal)."""
    inner = expression.removeprefix("States.Array(").removesuffix(")")
    items, current, depth, quoted, escaped = [], "", 0, False, False
    for char in inner:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "'":
            quoted = not quoted
            current += char
        elif not quoted and char == "(":
            depth += 1
            current += char
        elif not quoted and char == ")":
            depth -= 1
            current += char
        elif not quoted and depth == 0 and char == ",":
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    return [
        (item[1:-1], False) if item.startswith("'") and item.endswith("'") else (item, True) for item in items
    ]


def _entry_point_arguments(spark_submit: dict[str, Any]) -> list[tuple[str, bool]]:
    if "EntryPointArguments" in spark_submit:
        return [(value, False) for value in spark_submit["EntryPointArguments"]]
    return _array_items(spark_submit["EntryPointArguments.$"])


# ---------------------------------------------------------------- the derived definition
def test_the_emr_definition_is_generated_from_the_glue_one_and_up_to_date():
    """Given pipeline.asl.json and template.yaml, Then the checked-in EMR Serverless definition is exactly what
    tools/emr_serverless_asl.py derives from them (edit the Glue definition or the Glue jobs, then
    regenerate)."""
    assert EMR_ASL.read_text() == emr_serverless_asl.generate(TEMPLATE, ASL), (
        f"{EMR_ASL.name} is out of date: run `.venv/bin/{emr_serverless_asl.REGENERATE}`"
    )


def test_the_emr_definition_is_the_glue_one_with_its_job_runs_on_emr_serverless(asl, emr_asl):
    """Same states, same transitions, same Catch; only the six job tasks differ, each an
    emr-serverless:startJobRun.sync task with the Glue task's Retry (error names mapped), paths and Next."""
    assert set(emr_asl["States"]) == set(asl["States"])
    assert {n for n, s in asl["States"].items() if s.get("Resource") == GLUE_SYNC} == JOB_TASKS
    assert {n for n, s in emr_asl["States"].items() if s.get("Resource") == EMR_SYNC} == JOB_TASKS
    assert "glue:" not in EMR_ASL.read_text()
    for name, glue_state in asl["States"].items():
        emr_state = emr_asl["States"][name]
        if name not in JOB_TASKS:
            if name == "Acknowledge":  # a Glue run's figures: an EMR job run has none of them
                glue_payload = dict(glue_state["Parameters"]["Payload"])
                assert glue_payload.pop("glue_run.$") == "$.cdc_run"
                assert emr_state["Parameters"]["Payload"] == glue_payload
                emr_state = {**emr_state, "Parameters": glue_state["Parameters"]}
            assert emr_state == glue_state, name
            continue
        for key in ("Next", "Catch", "ResultPath", "Comment", "Type"):
            assert emr_state.get(key) == glue_state.get(key), (name, key)
        assert [r["ErrorEquals"] for r in emr_state["Retry"]] == [
            [emr_serverless_asl.GLUE_TO_EMR_ERRORS.get(e, e) for e in r["ErrorEquals"]]
            for r in glue_state["Retry"]
        ]
        for glue_retrier, emr_retrier in zip(glue_state["Retry"], emr_state["Retry"], strict=True):
            assert {k: v for k, v in emr_retrier.items() if k != "ErrorEquals"} == {
                k: v for k, v in glue_retrier.items() if k != "ErrorEquals"
            }


def test_emr_refusals_to_start_a_run_are_retried_longer_than_a_failed_run(emr_asl):
    """As on Glue: EMR Serverless refusing to start a load or a CDC run (throttling, an internal error, an
    application not accepting runs) is retried for about 85 minutes without costing the batch a run."""
    refusals = set(emr_serverless_asl.GLUE_TO_EMR_ERRORS.values())
    for name in ("RunFullLoad", "RunCdc", "RunReload"):
        first, *rest = emr_asl["States"][name]["Retry"]
        assert set(first["ErrorEquals"]) == refusals and first["MaxAttempts"] == 12, name
        assert rest and rest[-1]["ErrorEquals"] == ["States.ALL"], name


@pytest.mark.parametrize("task", sorted(JOB_TASKS))
def test_each_run_is_the_glue_jobs_script_with_its_arguments_library_and_catalog(
    template, asl, emr_asl, task
):
    """Given a job task, Then its EMR run has the Glue job's script as entry point, the Glue job's own
    arguments (`--snake_case` DefaultArguments, in order) followed by the task's run arguments, the Glue job's
    library as --py-files, its Iceberg runtime as --jars and the Glue Data Catalog as the Iceberg catalog."""
    from lakehouse.base.config import LakeConfig
    from lakehouse.io.session import catalog_conf

    glue_parameters = asl["States"][task]["Parameters"]
    logical = template["Resources"]["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"][
        glue_parameters["JobName"][2:-1]
    ]["Ref"]
    job = template["Resources"][logical]["Properties"]
    parameters = emr_asl["States"][task]["Parameters"]
    spark_submit = parameters["JobDriver"]["SparkSubmit"]
    assert parameters["ApplicationId"] == "${EmrApplicationId}"
    assert parameters["ExecutionRoleArn"] == "${EmrJobRoleArn}"
    assert parameters["Name"] == job["Name"]["Fn::Sub"]
    assert spark_submit["EntryPoint"] == job["Command"]["ScriptLocation"]["Fn::Sub"]

    expected = []
    for name, value in job["DefaultArguments"].items():
        if re.fullmatch(r"--[a-z0-9_]+", name):
            text = value if isinstance(value, str) else value.get("Fn::Sub") or "${" + value["Ref"] + "}"
            expected += [(name, False), (text, False)]
    for key, value in glue_parameters["Arguments"].items():
        expected += [(key.removesuffix(".$"), False), (value, key.endswith(".$"))]
    assert _entry_point_arguments(spark_submit) == expected
    assert ("--catalog_type", False) in expected and ("glue", False) in expected

    submit = shlex.split(spark_submit["SparkSubmitParameters"])
    options = list(zip(submit[::2], submit[1::2], strict=True))
    assert ("--py-files", job["DefaultArguments"]["--extra-py-files"]["Fn::Sub"]) in options
    assert ("--jars", emr_serverless_asl.ICEBERG_JARS) in options
    conf = dict(value.split("=", 1) for option, value in options if option == "--conf")
    warehouse = job["DefaultArguments"]["--warehouse"]["Fn::Sub"]
    assert conf == catalog_conf(LakeConfig(catalog_type="glue", catalog_name="lake", warehouse=warehouse))
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"


def test_a_run_has_the_glue_jobs_timeout(template, emr_asl):
    timeouts = {
        "RunFullLoad": "States.StringToJson('${FullLoadTimeoutMinutes}')",
        "RunReload": "States.StringToJson('${FullLoadTimeoutMinutes}')",
        "RunCdc": "States.StringToJson('${CdcJobTimeoutMinutes}')",
    }
    for task, expression in timeouts.items():
        assert emr_asl["States"][task]["Parameters"]["ExecutionTimeoutMinutes.$"] == expression
    assert (
        emr_asl["States"]["RunRefine"]["Parameters"]["ExecutionTimeoutMinutes"]
        == (template["Resources"]["RefineJob"]["Properties"]["Timeout"])
    )


# ---------------------------------------------------------------- the template
def test_every_placeholder_of_the_emr_definition_is_substituted_with_what_the_glue_jobs_use(template):
    """Each `${Name}` of the EMR definition is a substitution of the EMR state machine; those the Glue jobs'
    arguments read are the same template parameter or resource (`!Ref Name`; a Number parameter as text,
    `!Join ["", [!Ref Name]]`), except CsvDelimiter, whose `\\t` is passed as
    `tab` (the jobs take both): a backslash in the definition's text would be read as an escape, and
    RunPaceSeconds, whose `auto` is the engine's own (test_template.py)."""
    text = EMR_ASL.read_text()
    placeholders = set(re.findall(r"\$\{(\w+)\}", text))
    machine = template["Resources"]["EmrPipelineStateMachine"]
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert placeholders == set(substitutions)
    glue_substitutions = template["Resources"]["PipelineStateMachine"]["Properties"][
        "DefinitionSubstitutions"
    ]
    for name, value in substitutions.items():
        if name == "RunPaceSeconds":
            continue
        if name in glue_substitutions:
            assert value == glue_substitutions[name], name
        elif name == "EmrApplicationId":
            assert value == {"Fn::GetAtt": ["EmrApplication", "ApplicationId"]}
        elif name == "EmrJobRoleArn":
            assert value == {"Fn::GetAtt": ["EmrJobRole", "Arn"]}
        elif name == "IcebergJars":  # the Glue jobs' Iceberg as a run's jars (test_iceberg_runtime.py)
            assert value["Fn::If"][0] == "HasIcebergJar"
        elif name == "CsvDelimiter":
            assert value == {"Fn::If": ["CsvDelimiterIsTab", "tab", {"Ref": "CsvDelimiter"}]}
        elif template["Parameters"].get(name, {}).get("Type") == "Number":
            assert value == {"Fn::Join": ["", [{"Ref": name}]]}, name  # a substitution is text
        else:
            assert value == {"Ref": name}, name
            assert name in template["Parameters"] or name in template["Resources"], name
    assert "arn:aws:" not in text.replace("arn:aws:states:::", "")


def test_one_state_machine_per_engine_under_one_name_and_one_output(template):
    resources = template["Resources"]
    glue, emr = resources["PipelineStateMachine"], resources["EmrPipelineStateMachine"]
    assert glue["Condition"] == "UseGlue" and emr["Condition"] == "UseEmrServerless"
    assert template["Conditions"]["UseGlue"] == {"Fn::Equals": [{"Ref": "SparkEngine"}, "glue"]}
    assert template["Conditions"]["UseEmrServerless"] == {
        "Fn::Equals": [{"Ref": "SparkEngine"}, "emr-serverless"]
    }
    assert template["Parameters"]["SparkEngine"]["Default"] == "glue"
    assert template["Parameters"]["SparkEngine"]["AllowedValues"] == ["glue", "emr-serverless"]
    assert glue["Properties"]["DefinitionUri"] == "statemachine/pipeline.asl.json"
    assert emr["Properties"]["DefinitionUri"] == "statemachine/pipeline.emr-serverless.asl.json"
    for key in ("Type", "Logging", "Tracing"):
        assert emr["Properties"][key] == glue["Properties"][key], key
    # two names: a SparkEngine switch creates one before deleting the other (test_template_scale.py)
    assert glue["Properties"]["Name"] == {"Fn::Sub": "${EnvironmentName}-pipeline"}
    assert emr["Properties"]["Name"] == {"Fn::Sub": "${EnvironmentName}-pipeline-emr"}
    either = {"Fn::If": ["UseGlue", {"Ref": "PipelineStateMachine"}, {"Ref": "EmrPipelineStateMachine"}]}
    assert template["Outputs"]["StateMachineArn"]["Value"] == either
    alarm = resources["ExecutionsEndedAbnormallyAlarm"]["Properties"]["Metrics"]
    dimensions = [m["MetricStat"]["Metric"]["Dimensions"] for m in alarm if "MetricStat" in m]
    assert dimensions and all(d == [{"Name": "StateMachineArn", "Value": either}] for d in dimensions)
    assert (
        resources["PipelineDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][1]["StateMachineArn"]
        == either
    )


def _statements(role: dict[str, Any]) -> dict[str, dict[str, Any]]:
    statements = role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    return {s["Fn::If"][1]["Sid"] if "Fn::If" in s else s["Sid"]: s for s in statements}


def test_the_emr_job_role_has_the_glue_roles_data_access_and_nothing_glue_only(template):
    """Least privilege, the same data: every statement of the EMR job role is the Glue role's statement of the
    same Sid (the run-report writes without Glue's Spark UI path); Glue's logs, metrics and security
    configuration grants are not there; trust is EMR Serverless of this account."""
    resources = template["Resources"]
    glue, emr = _statements(resources["GlueJobRole"]), _statements(resources["EmrJobRole"])
    assert resources["EmrJobRole"]["Condition"] == "UseEmrServerless"
    assert set(emr) == {
        "EncryptWithThePipelineKey",
        "LocateBuckets",
        "ReadRawAndArtifacts",
        "WriteRunReports",
        "ReadWriteZones",
        "CatalogOfOurDatabases",
        "MoveOlderReleasesRecordsOnce",  # lakehouse.maintenance.records_move
        "LakeFormationDataAccess",
        "RawAuditMetrics",  # the raw zone audit (FilesRecovered) runs in either engine
        "RawAuditReEnqueuesLostFiles",
        "ReconcileReadsTheSourceSecret",  # the reconcile runs in either engine too
        "ReconcileRepairsByReload",
    }
    for sid, statement in emr.items():
        if sid == "WriteRunReports":
            glue_writes = glue["WriteRunReportsAndSparkEvents"]
            assert statement["Action"] == glue_writes["Action"]
            assert statement["Resource"] == [
                r for r in glue_writes["Resource"] if "spark-events" not in str(r)
            ]
        else:
            assert statement == glue[sid], sid
    trust = resources["EmrJobRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "emr-serverless.amazonaws.com"}]


def test_the_emr_state_machine_may_run_exactly_its_application_with_its_role(template):
    glue = template["Resources"]["PipelineStateMachine"]["Properties"]["Policies"][0]["Statement"]
    emr = template["Resources"]["EmrPipelineStateMachine"]["Properties"]["Policies"][0]["Statement"]
    by_action = {json.dumps(s["Action"]): s for s in emr}
    assert by_action['"emr-serverless:StartJobRun"']["Resource"] == {"Fn::GetAtt": ["EmrApplication", "Arn"]}
    assert by_action['["emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"]']["Resource"] == {
        "Fn::Sub": "${EmrApplication.Arn}/jobruns/*"
    }
    rule = by_action['["events:PutTargets", "events:PutRule", "events:DescribeRule"]']["Resource"]["Fn::Sub"]
    assert rule.endswith(":rule/StepFunctionsGetEventsForEMRServerlessJobRule")
    pass_role = by_action['"iam:PassRole"']
    assert pass_role["Resource"] == {"Fn::GetAtt": ["EmrJobRole", "Arn"]}
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}}

    def actions(statement: dict[str, Any]) -> list[str]:
        return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]

    # everything else is the Glue state machine's, minus its Glue grants
    glue_rest = [s for s in glue if not any(a.startswith("glue:") for a in actions(s))]
    emr_rest = [
        s for s in emr if not any(a.startswith(("emr-serverless:", "events:", "iam:")) for a in actions(s))
    ]
    # ... its rollover starting its own state machine (<env>-pipeline-emr, not the Glue one's name)
    glue_rest = json.loads(
        json.dumps(glue_rest).replace("${EnvironmentName}-pipeline", "${EnvironmentName}-pipeline-emr")
    )
    assert emr_rest == glue_rest


def test_the_application_runs_spark_3_5_one_run_at_a_time_and_stops_when_idle(template):
    application = template["Resources"]["EmrApplication"]
    properties = application["Properties"]
    assert application["Condition"] == "UseEmrServerless"
    assert properties["Type"] == "SPARK"
    label = template["Parameters"]["EmrReleaseLabel"]
    assert properties["ReleaseLabel"] == {"Ref": "EmrReleaseLabel"}
    assert re.fullmatch(label["AllowedPattern"], label["Default"]) and label["Default"].startswith("emr-7.")
    assert not re.fullmatch(label["AllowedPattern"], "emr-6.15.0")  # Spark 3.4: not the tests' line
    assert properties["AutoStartConfiguration"] == {"Enabled": True}
    assert properties["AutoStopConfiguration"] == {
        "Enabled": True,
        "IdleTimeoutMinutes": {"Ref": "EmrIdleTimeoutMinutes"},
    }
    assert properties["SchedulerConfiguration"]["MaxConcurrentRuns"] == 1  # the Glue jobs' MaxConcurrentRuns
    python = properties["RuntimeConfiguration"][0]["Properties"]
    assert {v for k, v in python.items() if "PYTHON" in k} == {"/usr/bin/python3.11"}


def test_a_warm_pool_by_default_whose_workers_are_the_runs_own(template):
    """Given the EMR Serverless application, Then by default a driver and one executor are kept warm (none with
    EmrPreInitializedExecutors=0), and each pre-initialized worker is the size a run asks for: the driver's
    2 vCPU and spark.driver.memory plus Spark's overhead (10 %, at least 384 MB) within its 8 GB, the executors'
    4 vCPU and EMR's default 14g within 16 GB; a run asking for other sizes would wait for new workers while
    the pool is billed."""
    properties = template["Resources"]["EmrApplication"]["Properties"]
    capacity = properties["InitialCapacity"]["Fn::If"]
    assert capacity[0] == "EmrWarmPool" and capacity[2] == {"Ref": "AWS::NoValue"}
    assert {item["Key"] for item in capacity[1]} == {"Driver", "Executor"}
    executors = next(item for item in capacity[1] if item["Key"] == "Executor")
    assert executors["Value"]["WorkerCount"] == {"Ref": "EmrPreInitializedExecutors"}
    assert template["Parameters"]["EmrPreInitializedExecutors"]["Default"] == "1"
    defaults = properties["RuntimeConfiguration"][0]["Properties"]
    driver = next(item for item in capacity[1] if item["Key"] == "Driver")["Value"]["WorkerConfiguration"]
    assert driver["Cpu"] == f"{defaults['spark.driver.cores']} vCPU"
    heap_gb = float(defaults["spark.driver.memory"].removesuffix("g"))
    assert heap_gb + max(0.384, 0.1 * heap_gb) <= float(driver["Memory"].removesuffix(" GB"))
    assert executors["Value"]["WorkerConfiguration"] == {
        "Cpu": f"{defaults['spark.executor.cores']} vCPU",
        "Memory": "16 GB",
    }
    assert "spark.executor.memory" not in defaults  # EMR's default for 4 vCPU: 14g, within 16 GB
    for worker in (driver, executors["Value"]["WorkerConfiguration"]):  # sizes EMR Serverless accepts
        check_worker_configuration(worker["Cpu"], worker["Memory"])
    assert template["Conditions"]["EmrWarmPool"]["Fn::And"][1] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "EmrPreInitializedExecutors"}, "0"]}]
    }
    warm = template["Conditions"]["EmrWarmPool"]["Fn::And"]
    assert warm[0] == template["Conditions"]["UseEmrServerless"]
    assert re.fullmatch(template["Parameters"]["EmrPreInitializedExecutors"]["AllowedPattern"], "100")
    assert not re.fullmatch(template["Parameters"]["EmrPreInitializedExecutors"]["AllowedPattern"], "101")


def test_emr_serverless_needs_a_python_3_11_image_and_a_delimiter_the_definition_can_hold(template):
    rule = template["Rules"]["EmrServerlessNeeds"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "SparkEngine"}, "emr-serverless"]}
    asserted = json.dumps(rule["Assertions"])
    assert "EmrImageUri" in asserted and "CsvDelimiter" in asserted
    image = template["Parameters"]["EmrImageUri"]
    assert re.fullmatch(image["AllowedPattern"], SAMPLE_IMAGE)
    assert not re.fullmatch(image["AllowedPattern"], "python:3.11")
    dockerfile = (Path(emr_serverless_asl.REPO) / "deploy" / "emr-serverless" / "Dockerfile").read_text()
    assert "FROM --platform=linux/amd64 public.ecr.aws/emr-serverless/spark/${EMR_RELEASE}:" in dockerfile
    assert f"ARG EMR_RELEASE={template['Parameters']['EmrReleaseLabel']['Default']}" in dockerfile
    assert "dnf install -y python3.11" in dockerfile and dockerfile.rstrip().endswith("USER hadoop:hadoop")


def test_a_failed_run_is_alarmed_on_either_engine(template):
    """Given either engine, when a run fails, then a rule the topic lets EventBridge publish for sees it: the
    EMR Serverless application's runs (with that engine) and every Glue job of the stack on both engines, since
    lakectl's reapply and reconcile run as Glue jobs whatever the engine."""
    resources = template["Resources"]
    emr = resources["EmrJobRunFailedRule"]
    assert emr["Condition"] == "UseEmrServerless"
    pattern = emr["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.emr-serverless"]
    assert pattern["detail"]["applicationId"] == [{"Fn::GetAtt": ["EmrApplication", "ApplicationId"]}]
    assert pattern["detail"]["state"] == ["FAILED"]
    glue = resources["GlueJobFailedRule"]
    assert "Condition" not in glue
    glue_jobs = [{"Ref": name} for name, r in resources.items() if r["Type"] == "AWS::Glue::Job"]
    assert glue["Properties"]["EventPattern"]["source"] == ["aws.glue"]
    assert sorted(glue["Properties"]["EventPattern"]["detail"]["jobName"], key=str) == sorted(
        glue_jobs, key=str
    )
    for rule in (emr, glue):
        assert rule["Properties"]["Targets"] == [{"Id": "alarm-topic", "Arn": {"Ref": "AlarmTopic"}}]


def test_lake_formation_grants_go_to_the_role_that_runs_the_jobs(template):
    grants = [
        r["Properties"]["Principal"]["DataLakePrincipalIdentifier"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::LakeFormation::PrincipalPermissions"
        and r.get("Condition") == "UseLakeFormation"
    ]
    either = {
        "Fn::If": [
            "UseEmrServerless",
            {"Fn::GetAtt": ["EmrJobRole", "Arn"]},
            {"Fn::GetAtt": ["GlueJobRole", "Arn"]},
        ]
    }
    # clean, history, records and refined databases: two grants each; the two data locations
    assert len(grants) == 10 and all(g == either for g in grants)


@pytest.mark.parametrize(
    "parameters",
    [
        ["SparkEngine=glue"],
        ["SparkEngine=emr-serverless", f"EmrImageUri={SAMPLE_IMAGE}"],
        ["SparkEngine=emr-serverless", f"EmrImageUri={SAMPLE_IMAGE}", "EmrPreInitializedExecutors=2"],
    ],
    ids=["glue", "emr-serverless", "emr-serverless-warm"],
)
def test_cfn_lint_is_clean_for_each_engine(parameters):
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    task = "DmsReplicationTaskArn=arn:aws:dms:us-east-1:123456789012:task:ABC"
    command = [str(cfn_lint), str(TEMPLATE), "--parameters", task, *parameters]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode & 0b111 == 0, result.stdout + result.stderr
