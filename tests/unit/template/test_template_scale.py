"""Scale and deploy blockers: the jobs' parallelism reaches both engines, switching
SparkEngine on a stack cannot collide on a name, one Iceberg runtime on Glue (the one the tests run), the EMR
application's architecture pinned with its image, a CsvNullValue the EMR definition cannot hold refused."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lakehouse.base.config import GLUE_WORKER_VCPUS, executor_cores, shuffle_partitions_for

from tests.unit.template.test_template import REPO
from tools import emr_serverless_asl

EMR_ASL = emr_serverless_asl.EMR_ASL
ENGINES = ("glue", "emr-serverless")
ENGINE_CONDITION = {"glue": "UseGlue", "emr-serverless": "UseEmrServerless"}


def _glue_jobs(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Glue::Job"
    }


# ---------------------------------------------------------------- item 1: parallelism on both engines
def test_every_glue_job_passes_the_partitions_parameter_and_its_own_workers(template):
    """Given the Glue jobs, Then each passes ShufflePartitions (default 0: derived) and its own worker type and
    count, which the job turns into cores when Spark does not say (lakehouse.base.config.executor_cores)."""
    parameter = template["Parameters"]["ShufflePartitions"]
    assert (parameter["Type"], parameter["Default"], parameter["MinValue"]) == ("Number", 0, 0)
    jobs = _glue_jobs(template)
    assert len(jobs) >= 4
    for name, job in jobs.items():
        arguments = job["DefaultArguments"]
        assert arguments["--shuffle_partitions"] == {"Fn::Sub": "${ShufflePartitions}"}, name
        assert arguments["--worker_type"] == {"Ref": job["WorkerType"]["Ref"]}, name
        assert arguments["--number_of_workers"] == {"Fn::Sub": "${" + job["NumberOfWorkers"]["Ref"] + "}"}, (
            name
        )
    for name in ("FullLoadWorkerType", "CdcWorkerType"):
        assert set(template["Parameters"][name]["AllowedValues"]) <= set(GLUE_WORKER_VCPUS), name


def test_the_emr_runs_carry_the_same_parallelism_and_no_constant(template):
    """Given the EMR definition, Then every run passes `--shuffle_partitions ${ShufflePartitions}` (a
    substitution of the EMR state machine) and no spark-submit line fixes spark.sql.shuffle.partitions."""
    emr = json.loads(EMR_ASL.read_text())
    runs = [s for s in emr["States"].values() if s.get("Resource") == emr_serverless_asl.EMR_SYNC]
    assert len(runs) >= 4
    for run in runs:
        submit = run["Parameters"]["JobDriver"]["SparkSubmit"]
        arguments = json.dumps(submit.get("EntryPointArguments") or submit["EntryPointArguments.$"])
        assert "'--shuffle_partitions', '${ShufflePartitions}'" in arguments or (
            '"--shuffle_partitions", "${ShufflePartitions}"' in arguments
        )
        assert "shuffle.partitions" not in submit["SparkSubmitParameters"]
        assert "default.parallelism" not in submit["SparkSubmitParameters"]
    substitutions = template["Resources"]["EmrPipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert substitutions["ShufflePartitions"] == {"Fn::Join": ["", [{"Ref": "ShufflePartitions"}]]}


@pytest.mark.parametrize("vcpu", ["16", "32", "64", "128", "256", "512"])
def test_an_emr_run_knows_the_cores_the_application_can_give_it(template, vcpu):
    """Given EmrMaximumVcpu, Then the application's spark-defaults give executors of 4 vCPU and at most as many
    as fit beside the driver (2 vCPU), so a run derives twice those cores as its shuffle partitions."""
    application = template["Resources"]["EmrApplication"]["Properties"]
    defaults = application["RuntimeConfiguration"][0]["Properties"]
    capacity = template["Mappings"]["EmrCapacity"][vcpu]
    assert defaults["spark.dynamicAllocation.maxExecutors"] == {
        "Fn::FindInMap": ["EmrCapacity", {"Ref": "EmrMaximumVcpu"}, "MaxExecutors"]
    }
    conf = {
        "spark.master": "yarn",
        "spark.executor.cores": defaults["spark.executor.cores"],
        "spark.dynamicAllocation.enabled": defaults["spark.dynamicAllocation.enabled"],
        "spark.dynamicAllocation.maxExecutors": capacity["MaxExecutors"],
    }
    assert executor_cores(conf) == int(vcpu) - 4
    assert shuffle_partitions_for(executor_cores(conf), 1) == 2 * (int(vcpu) - 4)
    assert capacity["Memory"] == f"{4 * int(vcpu)} GB"
    warm = {
        w["Key"]: w["Value"]["WorkerConfiguration"]["Cpu"]
        for w in application["InitialCapacity"]["Fn::If"][1]
    }
    assert warm == {
        "Driver": f"{defaults['spark.driver.cores']} vCPU",
        "Executor": f"{defaults['spark.executor.cores']} vCPU",
    }


# ---------------------------------------------------------------- item 6: SparkEngine switch
def _resolve(node: Any, engine: str, conditions: dict[str, Any]) -> Any:
    """The template node as CloudFormation sees it with SparkEngine=`engine` (engine conditions only; any other
    Fn::If keeps both branches, as a list: a name under either is possible)."""
    if isinstance(node, dict):
        if set(node) == {"Fn::If"}:
            name, yes, no = node["Fn::If"]
            if name in ENGINE_CONDITION.values():
                return _resolve(yes if name == ENGINE_CONDITION[engine] else no, engine, conditions)
            return [_resolve(yes, engine, conditions), _resolve(no, engine, conditions)]
        return {key: _resolve(value, engine, conditions) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve(item, engine, conditions) for item in node]
    return node


def _exists_under(resource: dict[str, Any], engine: str) -> bool:
    condition = resource.get("Condition")
    if condition in ENGINE_CONDITION.values():
        return condition == ENGINE_CONDITION[engine]
    return True


def _physical_names(resource: dict[str, Any], engine: str, conditions: dict[str, Any]) -> set[str]:
    properties = _resolve(resource.get("Properties") or {}, engine, conditions)
    names = set()
    for key, value in properties.items():
        if key == "Name" or (key.endswith("Name") and key != "ReleaseLabel"):
            text = json.dumps(value)
            if "${EnvironmentName}" in text:
                names.add(f"{resource['Type']}:{text}")
    return names


def test_switching_the_engine_creates_nothing_under_a_name_the_other_engine_holds(template):
    """CloudFormation creates a stack update's new resources before it deletes the old ones. Given the resources
    that exist under one engine only, Then none has a physical name a resource of the other engine has (the
    Glue and EMR state machines were both `<env>-pipeline`: the switch failed on the name and rolled back)."""
    conditions = template["Conditions"]
    resources = template["Resources"]
    only = {
        engine: {
            name
            for logical, resource in resources.items()
            if resource.get("Condition") == ENGINE_CONDITION[engine]
            for name in _physical_names(resource, engine, conditions)
        }
        for engine in ENGINES
    }
    assert only["glue"] and only["emr-serverless"]
    everything = {
        engine: {
            name
            for resource in resources.values()
            if _exists_under(resource, engine)
            for name in _physical_names(resource, engine, conditions)
        }
        for engine in ENGINES
    }
    assert not only["emr-serverless"] & everything["glue"]
    assert not only["glue"] & everything["emr-serverless"]


def _state_machine_arns(node: Any) -> set[tuple[str, str]]:
    text = json.dumps(node)
    return set(re.findall(r":(stateMachine|execution):\$\{EnvironmentName\}(-[\w-]+?)(?=[\":])", text))


@pytest.mark.parametrize("engine", ENGINES)
def test_whatever_names_the_state_machine_names_the_one_of_the_engine_in_use(template, engine):
    """Given SparkEngine, Then every state machine ARN the stack holds (the watchdog's, the rollover's grant) is
    that engine's state machine; execution grants (the lease's and the history guard's) cover it, and the lease
    may also read the other's executions: after a switch the lease can still name one."""
    conditions = template["Conditions"]
    resources = template["Resources"]
    machines = {
        _resolve(r["Properties"]["Name"], engine, conditions)["Fn::Sub"].removeprefix("${EnvironmentName}")
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::StateMachine" and _exists_under(r, engine)
    }
    assert len(machines) == 1
    (machine,) = machines
    all_machines = {
        r["Properties"]["Name"]["Fn::Sub"].removeprefix("${EnvironmentName}")
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::StateMachine"
    }
    assert len(all_machines) == 2
    seen = set()
    for logical, resource in resources.items():
        if not _exists_under(resource, engine):
            continue
        arns = _state_machine_arns(_resolve(resource.get("Properties"), engine, conditions))
        for kind, name in arns:
            seen.add((logical, kind))
            if kind == "stateMachine":
                assert name == machine, (logical, name)
            else:
                assert name in all_machines, (logical, name)
        executions = {name for kind, name in arns if kind == "execution"}
        assert not executions or machine in executions, logical
    assert ("WatchdogFunction", "stateMachine") in seen and ("LeaseFunction", "execution") in seen


# ---------------------------------------------------------------- item 6: EMR architecture and image
def test_the_emr_application_and_its_image_are_one_architecture(template):
    application = template["Resources"]["EmrApplication"]["Properties"]
    assert application["Architecture"] == "X86_64"
    assert application["ImageConfiguration"]["Fn::If"][1] == {"ImageUri": {"Ref": "EmrImageUri"}}
    dockerfile = (REPO / "deploy" / "emr-serverless" / "Dockerfile").read_text()
    froms = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert froms == [
        "FROM --platform=linux/amd64 public.ecr.aws/emr-serverless/spark/${EMR_RELEASE}:${EMR_IMAGE_TAG}"
    ]
    assert "docker build --platform linux/amd64" in dockerfile
    deploy_doc = (REPO / "docs" / "DEPLOY.md").read_text()
    assert "docker build --platform linux/amd64" in deploy_doc


# ---------------------------------------------------------------- item 6: CsvNullValue
def _accepted(template: dict[str, Any], value: str) -> bool:
    # CloudFormation's AllowedPattern is a Java regex matched against the whole value; this one uses no
    # construct Python reads differently.
    return re.fullmatch(template["Parameters"]["CsvNullValue"]["AllowedPattern"], value) is not None


def _literal(text: str, position: int, strict: bool) -> tuple[str, int]:
    """The string literal opening at `position` per the ASL spec: `\\'`, `\\{`, `\\}` and `\\\\` stand for the
    character, any other escape is an error; `strict`: an unescaped brace too (only States.Format's template
    holds `{}` placeholders). Returns the value and the position after the closing quote."""
    out, position = "", position + 1
    while True:
        char = text[position]  # IndexError: an unterminated literal
        if char == "\\":
            following = text[position + 1]
            assert following in "'{}\\", f"invalid escape \\{following}"
            out, position = out + following, position + 2
        elif char == "'":
            return out, position + 1
        else:
            assert not (strict and char in "{}"), f"unescaped {char} in a literal"
            out, position = out + char, position + 1


def _intrinsic_items(expression: str) -> list[str | None]:
    """The arguments of `States.Array(…)`: a literal's value, None for a path or a nested function."""
    assert expression.startswith("States.Array(") and expression.endswith(")")
    inner, items, position = expression[len("States.Array(") : -1], [], 0
    while position < len(inner):
        while inner[position] == " ":
            position += 1
        if inner[position] == "'":
            value, position = _literal(inner, position, strict=True)
            items.append(value)
        else:
            depth = 0
            while position < len(inner) and not (depth == 0 and inner[position] == ","):
                if inner[position] == "'":
                    _, position = _literal(inner, position, strict=False)
                    continue
                depth += {"(": 1, ")": -1}.get(inner[position], 0)
                position += 1
            items.append(None)
        while position < len(inner) and inner[position] == " ":
            position += 1
        if position < len(inner):
            assert inner[position] == ",", f"unexpected {inner[position : position + 20]!r}"
            position += 1
    return items


def _definition_with(value: str) -> str:
    """The EMR definition as Step Functions gets it: every `${Name}` replaced as text, CsvNullValue by `value`."""
    text = EMR_ASL.read_text()
    return re.sub(r"\$\{(\w+)\}", lambda m: value if m[1] == "CsvNullValue" else f"x{m[1]}", text)


def _null_values_passed(definition: str) -> list[str]:
    values = []
    for state in json.loads(definition)["States"].values():
        if state.get("Resource") != emr_serverless_asl.EMR_SYNC:
            continue
        submit = state["Parameters"]["JobDriver"]["SparkSubmit"]
        items = submit.get("EntryPointArguments") or _intrinsic_items(submit["EntryPointArguments.$"])
        values += [items[i + 1] for i, item in enumerate(items[:-1]) if item == "--csv_null_value"]
    return values


@pytest.mark.parametrize(
    "value", ["'", "{", "}", "\\", '"', "a'b", "{}", "\\N", "x\ny", "\t", "\x7f", "x" * 101]
)
def test_a_null_value_the_emr_definition_cannot_hold_is_refused(template, value):
    assert not _accepted(template, value)


@pytest.mark.parametrize(
    "value", ["~DMS~NULL~", "", "NULL", "<null>", "#N/A", "$null$", "(nil)", "n,u;l|l", "é∅"]
)
def test_an_accepted_null_value_reaches_every_emr_run_unchanged(template, value):
    assert _accepted(template, value)
    definition = _definition_with(value)
    passed = _null_values_passed(definition)  # the full load, the reload and the CDC run read CSV
    assert len(passed) >= 3 and set(passed) == {value}


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=30))
def test_every_accepted_null_value_yields_a_valid_emr_definition(template, value):
    """Given any text the parameter accepts, Then the EMR definition with it substituted is valid JSON whose
    intrinsic arrays parse, and each run receives exactly that text."""
    if not _accepted(template, value):
        return
    passed = _null_values_passed(_definition_with(value))
    assert len(passed) >= 3 and set(passed) == {value}


# ---------------------------------------------------------------- item 6: the rest
def test_drain_reserved_concurrency_is_a_parameter_off_by_default(template):
    parameter = template["Parameters"]["DrainReservedConcurrency"]
    assert parameter["Default"] == 0 and parameter["MinValue"] == 0
    drain = template["Resources"]["QueueDrainFunction"]["Properties"]
    assert drain["ReservedConcurrentExecutions"] == {
        "Fn::If": ["ReserveDrainConcurrency", {"Ref": "DrainReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }
    assert template["Conditions"]["ReserveDrainConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "DrainReservedConcurrency"}, 0]}]
    }


def test_lake_formation_and_quicksight_say_what_they_need_before_deploy(template):
    """Where the parameters are described (the template, DEPLOY.md's table), the prerequisites are said, and
    the check that refuses them before anything is created is named (deploy/preflight.py)."""
    lake = template["Parameters"]["EnableLakeFormation"]["Description"]
    quicksight = template["Parameters"]["EnableQuickSight"]["Description"]
    assert "Lake Formation" in lake and "administrator" in lake and "deploy.preflight" in lake
    assert "Athena" in quicksight and "results bucket" in quicksight and "deploy.preflight" in quicksight
    deploy_doc = (REPO / "docs" / "DEPLOY.md").read_text()
    row = next(line for line in deploy_doc.splitlines() if line.startswith("| `EnableLakeFormation`"))
    assert "administrator" in row and "preflight" in row
    row = next(line for line in deploy_doc.splitlines() if line.startswith("| `EnableQuickSight`"))
    assert "results bucket" in row and "preflight" in row
    makefile = (REPO / "Makefile").read_text()
    deploy_target = makefile[makefile.index("\ndeploy:") :].split("\n\n")[0]
    assert "-m deploy.release" in deploy_target  # the preflight before the build: tests/unit/deploy
