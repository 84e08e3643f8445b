"""The SAM template and the state machine: they transform, lint clean, and keep their promises."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.emr_serverless_asl import load_template

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / "template.yaml"
ASL = REPO / "statemachine" / "pipeline.asl.json"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def asl() -> dict[str, Any]:
    return json.loads(ASL.read_text())


class _OfflinePolicyLoader:
    """The managed policies the template names, without asking IAM."""

    def load(self) -> dict[str, str]:
        return {}


def test_template_transforms_with_the_sam_translator(template, monkeypatch):
    from samtranslator.translator.transform import transform

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    packaged = copy.deepcopy(template)  # as `sam package` leaves it: local paths become S3 objects
    for name, resource in packaged["Resources"].items():
        for uri in ("CodeUri", "DefinitionUri", "ContentUri"):
            if uri in resource.get("Properties", {}):
                resource["Properties"][uri] = f"s3://artifacts/{name}.zip"
    transformed = transform(packaged, {}, _OfflinePolicyLoader())
    kinds = {r["Type"] for r in transformed["Resources"].values()}
    assert {"AWS::Lambda::Function", "AWS::StepFunctions::StateMachine", "AWS::Glue::Job"} <= kinds


def test_template_passes_cfn_lint_with_no_errors_or_warnings():
    """cfn-lint's exit code is a bit mask: 2 errors, 4 warnings, 8 informational (and 1 when it could not run)."""
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run([str(cfn_lint), str(TEMPLATE)], capture_output=True, text=True, timeout=300)
    assert result.returncode & 0b111 == 0, result.stdout + result.stderr


def test_every_placeholder_of_the_state_machine_is_substituted(template, asl):
    placeholders = set(re.findall(r"\$\{(\w+)\}", ASL.read_text()))
    substitutions = template["Resources"]["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert placeholders == set(substitutions)
    assert "arn:aws:lambda" not in ASL.read_text() and "arn:aws:glue" not in ASL.read_text()


def test_every_task_retries_and_catches(asl):
    tasks = {name: state for name, state in asl["States"].items() if state["Type"] == "Task"}
    assert len(tasks) >= 8
    for name, state in tasks.items():
        assert state.get("Retry"), f"{name} has no Retry"
        assert state.get("Catch"), f"{name} has no Catch"
    for state in asl["States"].values():
        for target in [
            state.get("Next"),
            state.get("Default"),
            *[c["Next"] for c in state.get("Choices", [])],
            *[c["Next"] for c in state.get("Catch", [])],
        ]:
            assert target is None or target in asl["States"]


def test_glue_runs_use_the_sync_integration_and_rollover_starts_this_state_machine(asl):
    resources = {s.get("Resource") for s in asl["States"].values()}
    assert "arn:aws:states:::glue:startJobRun.sync" in resources
    rollover = asl["States"]["StartNextExecution"]
    assert rollover["Resource"] == "arn:aws:states:::states:startExecution"
    assert rollover["Parameters"]["StateMachineArn.$"] == "$$.StateMachine.Id"
    assert rollover["Parameters"]["Input"]["skip_full_load"] is True
    assert rollover["Parameters"]["Input"]["loop.$"] == "$.loop"


def test_queue_visibility_timeout_always_exceeds_the_cdc_job_timeout(template):
    allowed = template["Parameters"]["CdcJobTimeoutMinutes"]["AllowedValues"]
    mapping = template["Mappings"]["CdcTimeouts"]
    assert set(allowed) == set(mapping)
    for minutes in allowed:
        assert mapping[minutes]["VisibilityTimeout"] > int(minutes) * 60
    queue = template["Resources"]["CdcFilesQueue"]["Properties"]
    assert queue["VisibilityTimeout"] == {
        "Fn::FindInMap": ["CdcTimeouts", {"Ref": "CdcJobTimeoutMinutes"}, "VisibilityTimeout"]
    }
    assert template["Resources"]["CdcJob"]["Properties"]["Timeout"] == {"Ref": "CdcJobTimeoutMinutes"}


def _allowed_actions(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(resource, action) of every Allow statement in the template's inline policies."""
    found = []

    def walk(node: Any, resource: str) -> None:
        if isinstance(node, dict):
            if node.get("Effect") == "Allow" and "Action" in node:
                actions = node["Action"] if isinstance(node["Action"], list) else [node["Action"]]
                found.extend((resource, action) for action in actions)
            for child in node.values():
                walk(child, resource)
        elif isinstance(node, list):
            for child in node:
                walk(child, resource)

    for name, resource in template["Resources"].items():
        walk(resource, name)
    return found


def test_no_wildcard_actions_and_no_broad_managed_policies(template):
    """Given every Allow in the template, Then no action is a wildcard (`*`, `s3:*`, `glue:*`…), and the
    Glue role carries no managed policy (AWSGlueServiceRole would grant glue:* on the whole catalog)."""
    allowed = _allowed_actions(template)
    assert len(allowed) > 30
    # A KMS key policy must let the account administer the key (AWS's default key policy; IAM decides who),
    # and the alarm publishers get kms:GenerateDataKey* as SNS documents it for AWS service event sources.
    documented = {("PipelineKey", "kms:*"), ("PipelineKey", "kms:GenerateDataKey*")}
    wildcards = [
        (name, action) for name, action in allowed if "*" in action and (name, action) not in documented
    ]
    assert wildcards == []
    assert "ManagedPolicyArns" not in template["Resources"]["GlueJobRole"]["Properties"]


def test_cdc_runs_one_at_a_time_in_order(template):
    assert template["Resources"]["CdcJob"]["Properties"]["ExecutionProperty"] == {"MaxConcurrentRuns": 1}
    target = template["Resources"]["CdcFileCreatedRule"]["Properties"]["Targets"][0]
    assert target["SqsParameters"]["MessageGroupId"]


def _retriers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: retrier for retrier in state["Retry"] for name in retrier["ErrorEquals"]}


def _exception_classes() -> set[str]:
    sources = "\n".join(p.read_text() for p in (REPO / "functions").glob("*/*.py"))
    return set(re.findall(r"^class (\w+Error)\(", sources, flags=re.MULTILINE))


def test_final_errors_are_not_retried_and_resumable_steps_retry_any_failure(asl):
    """Given the Lambda tasks, Then a failed DMS task or an unknown manifest fails at once (the Lambda's
    exception name, not retried), while the drain (resumable), the acknowledge (idempotent) and the
    history guard (read-only) retry any failure; States.ALL, where used, comes last."""
    states = asl["States"]
    assert _retriers(states["CheckFullLoadProgress"])["DmsTaskFailedError"]["MaxAttempts"] == 0
    assert _retriers(states["Acknowledge"])["ManifestNotPendingError"]["MaxAttempts"] == 0
    assert {"DmsTaskFailedError", "ManifestNotPendingError"} <= _exception_classes()
    for name in ("DrainQueue", "Acknowledge", "CheckHistory", "CheckFullLoadProgress"):
        assert _retriers(states[name])["States.TaskFailed"]["MaxAttempts"] >= 2, name
    for name, state in states.items():
        for retrier in state.get("Retry", [])[:-1]:
            assert "States.ALL" not in retrier["ErrorEquals"], f"{name}: States.ALL must be the last retrier"


def test_a_failed_cdc_run_never_reaches_the_acknowledge(asl):
    """Given the CDC run fails after its retries, Then the execution waits and drains again without
    acknowledging, so the manifest stays pending and is handed out once more (the drain counts the
    attempts and moves it aside after MaxManifestAttempts); the acknowledge follows only a successful run."""
    states = asl["States"]
    run = states["RunCdc"]
    assert run["Next"] == "Acknowledge"
    for catcher in run["Catch"]:
        failed = states[catcher["Next"]]
        assert failed["Type"] == "Wait" and failed["Next"] == "CheckHistory", catcher
    into_acknowledge = [
        name
        for name, state in states.items()
        if "Acknowledge"
        in {state.get("Next"), state.get("Default"), *(c["Next"] for c in state.get("Choices", []))}
    ]
    assert into_acknowledge == ["RunCdc"]
    assert states["RunCdc"]["Parameters"]["Arguments"]["--manifest.$"] == "$.batch.value.manifest_uri"


_MISSING = object()


def _choose(state: dict[str, Any], document: dict[str, Any]) -> str:
    """The next state of a Choice, for the comparisons this state machine uses."""

    def value(path: str) -> Any:
        return _read(document, path)

    def holds(rule: dict[str, Any]) -> bool:
        if "And" in rule:
            return all(holds(part) for part in rule["And"])
        if "Not" in rule:
            return not holds(rule["Not"])
        found = value(rule["Variable"])
        if "IsPresent" in rule:
            return (found is not _MISSING) == rule["IsPresent"]
        if "BooleanEquals" in rule:
            return found == rule["BooleanEquals"]
        if "StringEquals" in rule:
            return found == rule["StringEquals"]
        if "NumericGreaterThanEqualsPath" in rule:
            return found is not _MISSING and found >= value(rule["NumericGreaterThanEqualsPath"])
        if "NumericGreaterThan" in rule:
            return found is not _MISSING and found > rule["NumericGreaterThan"]
        raise AssertionError(f"comparison not modelled: {rule}")

    return next((rule["Next"] for rule in state["Choices"] if holds(rule)), state["Default"])


def _route(asl: dict[str, Any], start: str, document: dict[str, Any]) -> list[str]:
    """Follow Choice states from `start` until a state that does work."""
    path = [start]
    while asl["States"][path[-1]]["Type"] == "Choice":
        path.append(_choose(asl["States"][path[-1]], document))
    return path


def _read(document: dict[str, Any], path: str) -> Any:
    current: Any = document
    for part in path.removeprefix("$.").split("."):
        if not isinstance(current, dict) or part not in current:
            return _MISSING
        current = current[part]
    return current


def _write(document: dict[str, Any], path: str | None, value: Any) -> dict[str, Any]:
    if path is None:
        return document
    if path == "$":
        return value
    *parents, last = path.removeprefix("$.").split(".")
    current = document
    for part in parents:
        current = current.setdefault(part, {})
    current[last] = value
    return document


def _evaluate(parameters: Any, document: dict[str, Any]) -> Any:
    """Parameters as Step Functions would resolve them: every `$.` path they read must exist (a missing one
    fails the execution with States.Runtime), States.MathAdd adds; other intrinsics give a placeholder."""
    if not isinstance(parameters, dict):
        return parameters
    resolved = {}
    for key, value in parameters.items():
        if not key.endswith(".$"):
            resolved[key] = _evaluate(value, document)
            continue
        for path in re.findall(r"(?<!\$)\$\.[\w.]+", value):
            assert _read(document, path) is not _MISSING, f"{key}: {path} is missing"
        add = re.fullmatch(r"States\.MathAdd\((\$\.[\w.]+), (-?\d+)\)", value)
        if add:
            resolved[key[:-2]] = _read(document, add[1]) + int(add[2])
        elif value.startswith("$."):
            resolved[key[:-2]] = _read(document, value)
        else:
            resolved[key[:-2]] = f"<{value}>"
    return resolved


def _walk(
    asl: dict[str, Any], start: str, document: dict[str, Any], failing: frozenset[str] = frozenset()
) -> tuple[list[str], dict[str, Any]]:
    """Run the state machine from `start` to the history guard (or an end state): Choice, Pass and Wait
    as Step Functions does, a Task succeeds (result `{}`) unless named in `failing`, then its States.ALL
    catcher is taken. Returns the states visited and the document at the end."""
    document = copy.deepcopy(document)
    path = [start]
    while path[-1] != "CheckHistory" and len(path) < 50:
        state = asl["States"][path[-1]]
        if state["Type"] == "Choice":
            path.append(_choose(state, document))
        elif state["Type"] == "Wait":
            path.append(state["Next"])
        elif state["Type"] == "Pass":
            result = (
                _evaluate(state["Parameters"], document) if "Parameters" in state else state.get("Result")
            )
            document = _write(document, state.get("ResultPath", "$"), result)
            path.append(state["Next"])
        elif state["Type"] == "Task":
            _evaluate(state["Parameters"], document)
            if path[-1] in failing:
                catcher = next(c for c in state["Catch"] if "States.ALL" in c["ErrorEquals"])
                document = _write(document, catcher.get("ResultPath", "$"), {"Error": "States.TaskFailed"})
                path.append(catcher["Next"])
            else:
                document = _write(document, state.get("ResultPath", "$"), {})
                path.append(state["Next"])
        else:
            break
    return path, document


def _tasks(asl: dict[str, Any], path: list[str]) -> list[str]:
    """The Tasks (Glue runs, Lambdas) a walk ran before the history guard it stops at."""
    return [name for name in path if asl["States"][name]["Type"] == "Task" and name != "CheckHistory"]


CONFIG = {"refine_every": 5, "maintenance_every": 50, "maintenance_mode": "job", "loop_wait_seconds": 60}
# what AcquireLease leaves in the state for the rest of the execution (every job run is fenced by it)
LEASE = {
    "value": {"acquired": True, "holder": "arn:aws:states:us-east-1:123456789012:execution:p:e", "epoch": 1}
}


@pytest.mark.parametrize(
    ("execution_input", "first_work"),
    [
        ({}, "CheckFullLoadProgress"),
        ({"skip_full_load": False}, "CheckFullLoadProgress"),
        ({"skip_full_load": True}, "StartLoop"),
        (
            {"skip_full_load": True, "loop": {"batches": 7, "since_refine": 2, "since_maintenance": 3}},
            "DrainQueue",
        ),
        # handed over by an execution of the previous definition, which counted no maintenance
        ({"skip_full_load": True, "loop": {"batches": 7, "since_refine": 2}}, "UpgradeLoopState"),
    ],
)
def test_a_rolled_over_execution_goes_straight_to_the_loop_and_keeps_its_counters(
    asl, execution_input, first_work
):
    """Given the execution's input, When it starts, Then a fresh start waits for the full load, and a
    rolled-over one (skip_full_load) goes to the loop, keeping the counters it was handed."""
    assert asl["States"]["Configure"]["Next"] == "AcquireLease"
    assert asl["States"]["AcquireLease"]["Next"] == "LeaseAcquired?"
    assert (
        _route(asl, "LeaseAcquired?", {"lease": {"value": {"acquired": True}}})[1] == "ResumingAfterRollover"
    )
    assert (
        _route(asl, "LeaseAcquired?", {"lease": {"value": {"acquired": False}}})[1] == "AnotherPipelineRuns"
    )
    assert _route(asl, "ResumingAfterRollover", execution_input)[-1] == first_work


@pytest.mark.parametrize(("since_refine", "refine"), [(1, False), (4, False), (5, True), (6, True)])
def test_refine_runs_every_n_applied_batches(asl, since_refine, refine):
    """Given RefineEveryNBatches=5, Then the refine job runs when 5 batches were applied since the last."""
    document = {
        "config": {"refine_every": 5, "maintenance_every": 50, "maintenance_mode": "job"},
        "loop": {"batches": 99, "since_refine": since_refine, "since_maintenance": 1},
    }
    assert _route(asl, "RefineDue?", document)[-1] == ("RunRefine" if refine else "CheckHistory")
    assert asl["States"]["RefineDone"]["Parameters"]["since_refine"] == 0
    # a failed refine backs off like a successful one: it runs again after N more batches, not every batch
    assert asl["States"]["RunRefine"]["Catch"][0]["Next"] == "RefineFailed"
    assert asl["States"]["RefineFailed"]["Parameters"]["since_refine"] == 0


@pytest.mark.parametrize(
    ("history", "refine"),
    [
        (None, True),  # the first pass of an execution: no answer of the guard yet
        ({"refine_interval_passed": True}, True),
        ({"refine_interval_passed": False}, False),
    ],
)
def test_a_refine_waits_for_its_minimum_interval_after_batches_and_when_idle(asl, history, refine):
    """Given RefineEveryNBatches batches applied since the last refine (or an empty queue with batches applied
    since), When the history guard's last answer says the refine's newest run started less than
    RefineEveryMinutes ago, Then no refine starts (the loop goes on to maintenance, or idles and asks again);
    Given the interval passed, or no answer yet, Then the refine runs."""
    loop = {"batches": 99, "since_refine": 7, "since_maintenance": 1}
    config = {"refine_every": 5, "refine_models": True, "maintenance_every": 50, "maintenance_mode": "job"}
    document: dict[str, Any] = {"config": config, "loop": loop}
    if history is not None:
        document["history"] = {"value": history}
    idle = document | {"batch": {"value": {"has_work": False}}}

    assert (_route(asl, "RefineDue?", document)[-1] == "RunRefine") is refine
    assert (_route(asl, "HasWork?", idle)[-1] == "RunIdleRefine") is refine


@pytest.mark.parametrize(
    ("batch", "pace", "next_state"),
    [
        ({"has_work": True, "caught_up": True}, 60, "PaceRuns"),  # the batch emptied the queue
        ({"has_work": True, "caught_up": False}, 60, "CheckHistory"),  # a limit cut it: a backlog
        ({"has_work": True, "resumed": True}, 60, "CheckHistory"),  # a retried batch: maybe a backlog
        ({"has_work": True, "caught_up": True}, 0, "CheckHistory"),  # RunPaceSeconds=0
        ({"has_work": False}, 60, "Idle"),
    ],
)
def test_a_caught_up_loop_paces_its_runs_and_a_backlog_goes_straight_on(asl, batch, pace, next_state):
    """Given a pass whose batch emptied the queue, When RunPaceSeconds > 0, Then the loop waits that long
    before the next drain (the next run gathers the files of that time); Given a batch a limit cut or a
    retried one, or no pause configured, Then it goes straight on; Given an empty queue, Then it idles."""
    document = {"config": {"run_pace_seconds": pace, "loop_wait_seconds": 60}, "batch": {"value": batch}}

    assert _route(asl, "WaitIfIdle?", document)[-1] == next_state
    assert asl["States"]["PaceRuns"] == {
        "Type": "Wait",
        "SecondsPath": "$.config.run_pace_seconds",
        "Next": "CheckHistory",
    }
    assert asl["States"]["Configure"]["Parameters"]["run_pace_seconds.$"] == (
        "States.StringToJson('${RunPaceSeconds}')"
    )


def test_run_pace_auto_pauses_only_where_each_run_is_billed_on_its_own(template):
    """Given RunPaceSeconds=auto (the default), Then the Glue state machine gets 60 s, the EMR Serverless one
    60 s without the warm pool and 0 with it; a number is passed as it is."""
    assert template["Parameters"]["RunPaceSeconds"]["Default"] == "auto"
    assert template["Conditions"]["RunPaceAuto"] == {"Fn::Equals": [{"Ref": "RunPaceSeconds"}, "auto"]}
    resources = template["Resources"]
    glue = resources["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    emr = resources["EmrPipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert glue["RunPaceSeconds"] == {"Fn::If": ["RunPaceAuto", "60", {"Ref": "RunPaceSeconds"}]}
    assert emr["RunPaceSeconds"] == {
        "Fn::If": ["RunPaceAuto", {"Fn::If": ["EmrWarmPool", "0", "60"]}, {"Ref": "RunPaceSeconds"}]
    }


def test_an_empty_queue_waits_then_loops_and_a_long_history_rolls_over(asl):
    """Given no work (and nothing applied since the last refine), Then the loop waits LoopWaitSeconds and
    goes on; Given rollover, Then it starts the next execution and this one succeeds."""
    states = asl["States"]
    idle = {
        "batch": {"value": {"has_work": False}},
        "loop": {"batches": 3, "since_refine": 0, "since_maintenance": 3},
    }
    assert _route(asl, "HasWork?", idle)[-1] == "Idle"
    assert states["Idle"] == {
        "Type": "Wait",
        "SecondsPath": "$.config.loop_wait_seconds",
        "Next": "CheckHistory",
    }
    assert _route(asl, "RollOver?", {"history": {"value": {"rollover": False}}})[-1] == "CheckDmsTask"
    assert _route(asl, "RollOver?", {"history": {"value": {"rollover": True}}})[-1] == "StartNextExecution"
    assert states[states["StartNextExecution"]["Next"]]["Type"] == "Succeed"


def test_file_events_eventbridge_cannot_queue_are_kept_and_alarmed(template):
    """Given the rule that queues file events, Then an event it cannot deliver goes to a standard
    dead-letter queue (a FIFO one is refused by EventBridge) watched by an alarm, never dropped."""
    resources = template["Resources"]
    target = resources["CdcFileCreatedRule"]["Properties"]["Targets"][0]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["UndeliveredFileEventsQueue", "Arn"]}}
    assert "FifoQueue" not in resources["UndeliveredFileEventsQueue"]["Properties"]
    alarm = resources["UndeliveredFileEventsAlarm"]["Properties"]
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["UndeliveredFileEventsQueue", "QueueName"]}
    alarmed = {
        metric["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for metric in _alarm_metrics(r["Properties"])
        if metric["Namespace"] == "AWS/SQS"
    }
    assert alarmed == {"UndeliveredFileEventsQueue", "CdcFilesDeadLetterQueue", "CdcFilesQueue"}


def _alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm watches: its own, or those of its metric-math expression."""
    if "Metrics" in alarm:
        return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    return [{k: alarm[k] for k in ("Namespace", "MetricName", "Dimensions") if k in alarm}]


def test_the_jobs_read_the_files_with_the_settings_dms_writes_them_with(template):
    """Given the stack's CsvNullValue and CsvDelimiter parameters, Then the full-load and CDC jobs get both
    as job arguments and the DMS endpoint the stack creates writes with both (a tab is spelled \\t in the
    parameter, a real tab for DMS), so a pipe- or tab-separated output is read, not quarantined."""
    endpoint = template["Resources"]["DmsTargetEndpoint"]["Properties"]["S3Settings"]
    assert endpoint["CsvNullValue"] == {"Ref": "CsvNullValue"}
    assert endpoint["CsvDelimiter"] == {"Fn::If": ["CsvDelimiterIsTab", "\t", {"Ref": "CsvDelimiter"}]}
    assert template["Conditions"]["CsvDelimiterIsTab"] == {"Fn::Equals": [{"Ref": "CsvDelimiter"}, "\\t"]}
    pattern = template["Parameters"]["CsvDelimiter"]["AllowedPattern"]
    assert [bool(re.fullmatch(pattern, v)) for v in (",", "|", ";", "\\t", '"', " ", ",,")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    for name in ("FullLoadJob", "CdcJob"):
        arguments = template["Resources"][name]["Properties"]["DefaultArguments"]
        assert arguments["--csv_null_value"] == {"Ref": "CsvNullValue"}, name
        assert arguments["--csv_delimiter"] == {"Ref": "CsvDelimiter"}, name


def test_the_refine_job_reads_the_clean_tables_of_the_configured_source_schema(template):
    """Given the SourceSchema parameter (default public, PostgreSQL's), Then the refine job gets it as
    --source_schema: the clean tables it joins are named <schema>_<table> after the DMS files' folder."""
    parameter = template["Parameters"]["SourceSchema"]
    assert parameter["Default"] == "public"
    assert [
        bool(re.fullmatch(parameter["AllowedPattern"], v)) for v in ("public", "dbo", "sales_2", "a b", "")
    ] == [
        True,
        True,
        True,
        False,
        False,
    ]
    arguments = template["Resources"]["RefineJob"]["Properties"]["DefaultArguments"]
    assert arguments["--source_schema"] == {"Ref": "SourceSchema"}


def test_glue_jobs_follow_the_argument_contract(template):
    """Given the four Glue jobs, Then each runs Glue 5.1 with Iceberg, its script and the library from
    the artifacts bucket, and the arguments docs/CONTRACTS.md names for it."""
    common = {
        "--datalake-formats",  # Glue's own Iceberg, or the pinned jar instead (test_iceberg_runtime.py)
        "--extra-py-files",
        "--catalog_type",
        "--catalog_name",
        "--warehouse",
        "--clean_database",
        "--enable-metrics",
        "--custom-logGroup-prefix",
    }
    extra = {
        "FullLoadJob": {"--schema_file", "--raw_path"},
        "CdcJob": {"--schema_file"},
        "RefineJob": {"--refined_database"},
        "MaintenanceJob": {"--refined_database", "--snapshot_retention_hours", "--orphan_file_age_hours"},
    }
    for name, wanted in extra.items():
        job = template["Resources"][name]["Properties"]
        arguments = job["DefaultArguments"]
        assert job["GlueVersion"] == "5.1"
        assert common | wanted <= set(arguments), name
        assert arguments["--catalog_type"] == "glue"
        assert arguments["--extra-py-files"] == {
            "Fn::Sub": "s3://${ArtifactsBucket}/${JobCodePrefix}/lib/lakehouse.zip"
        }
        script = job["Command"]["ScriptLocation"]["Fn::Sub"]
        assert script.startswith("s3://${ArtifactsBucket}/${JobCodePrefix}/scripts/")
        assert (REPO / "spark_jobs" / script.rsplit("/", 1)[-1]).exists()


def test_the_drain_knows_the_queues_redrive_count_and_its_timeouts_fit(template):
    """Given the queue's redrive and the drain Lambda, Then the drain is told the same maxReceiveCount
    (it gives messages back only with receives to spare), and its time budget ends before its timeout."""
    resources = template["Resources"]
    redrive = resources["CdcFilesQueue"]["Properties"]["RedrivePolicy"]
    drain = resources["QueueDrainFunction"]["Properties"]
    variables = drain["Environment"]["Variables"]
    assert int(variables["QUEUE_MAX_RECEIVE_COUNT"]) == redrive["maxReceiveCount"] >= 4
    assert float(variables["DRAIN_TIME_BUDGET_SECONDS"]) < drain["Timeout"] - 30
    actions = {action for name, action in _allowed_actions(template) if name == "QueueDrainFunction"}
    assert {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",
    } <= actions


TRANSIENT_GLUE_ERRORS = {
    "Glue.ConcurrentRunsExceededException",
    "Glue.ThrottlingException",
    "Glue.InternalServiceException",
}


def test_transient_glue_errors_are_retried_longer_before_a_cdc_run_counts_as_failed(asl):
    """Given Glue refusing to start the CDC run for a while (a run of the job still going, throttling, an
    internal error; reported as `Glue.<Exception>` like `StepFunctions.ExecutionAlreadyExistsException`
    for rollover), When RunCdc fails with one of them, Then a retrier placed before the generic one waits
    from 30 s, doubling, for over an hour in all, so a healthy batch does not spend its MaxManifestAttempts
    (and move to manifests/failed/) on minutes of refusals; a failed run itself still gets 2 retries."""
    retriers = asl["States"]["RunCdc"]["Retry"]
    transient = [r for r in retriers if TRANSIENT_GLUE_ERRORS & set(r["ErrorEquals"])]
    assert len(transient) == 1
    retrier = transient[0]
    assert set(retrier["ErrorEquals"]) >= TRANSIENT_GLUE_ERRORS
    assert not {"States.ALL", "States.TaskFailed"} & set(retrier["ErrorEquals"])
    generic = next(i for i, r in enumerate(retriers) if "States.ALL" in r["ErrorEquals"])
    assert retriers.index(retrier) < generic  # Step Functions uses the first retrier that matches
    assert retrier["IntervalSeconds"] == 30 and retrier["BackoffRate"] == 2 and retrier["MaxAttempts"] >= 8
    cap = retrier.get("MaxDelaySeconds", float("inf"))
    waits = [min(retrier["IntervalSeconds"] * 2**attempt, cap) for attempt in range(retrier["MaxAttempts"])]
    assert sum(waits) >= 3600 and max(waits) <= 600, waits  # outlasts a 60-minute run, lags at most 10 min
    assert retriers[generic] == {
        "ErrorEquals": ["States.ALL"],
        "IntervalSeconds": 30,
        "MaxAttempts": 2,
        "BackoffRate": 2,
    }


@pytest.mark.parametrize("refine_fails", [False, True])
def test_an_empty_queue_refines_what_was_applied_since_the_last_refine(asl, refine_fails):
    """Given a quiet source (the drain finds the queue empty) after 3 applied batches, fewer than
    RefineEveryNBatches, When the loop goes idle, Then it runs the refine job first (the refined zone
    would otherwise stay stale until N more batches came), resets since_refine (also when the refine
    fails: it backs off, it is alarmed by the Glue failure rule), then waits and reaches the history
    guard, reading nothing an idle drain does not return (no batch run_id)."""
    document = {
        "config": CONFIG,
        "lease": LEASE,
        "loop": {"batches": 8, "since_refine": 3, "since_maintenance": 8},
        "batch": {"value": {"has_work": False, "file_count": 0, "moved_aside": [], "reloads_pending": []}},
    }
    failing = frozenset({"RunIdleRefine"}) if refine_fails else frozenset()
    path, after = _walk(asl, "HasWork?", document, failing)
    assert _tasks(asl, path) == ["RunIdleRefine"]
    assert asl["States"]["RunIdleRefine"]["Resource"] == "arn:aws:states:::glue:startJobRun.sync"
    assert asl["States"]["RunIdleRefine"]["Parameters"]["JobName"] == "${RefineJobName}"
    assert path[-2:] == ["Idle", "CheckHistory"]
    assert after["loop"] == {"batches": 8, "since_refine": 0, "since_maintenance": 8}


def test_an_empty_queue_with_nothing_new_since_the_last_refine_only_waits(asl):
    """Given the queue is empty and the refine already ran after the last applied batch, When the loop
    goes idle, Then no Glue run starts (an idle pipeline costs nothing): it waits and goes on."""
    document = {
        "config": CONFIG,
        "lease": LEASE,
        "loop": {"batches": 8, "since_refine": 0, "since_maintenance": 8},
        "batch": {"value": {"has_work": False, "file_count": 0}},
    }
    path, after = _walk(asl, "HasWork?", document)
    assert _tasks(asl, path) == []
    assert path[-2:] == ["Idle", "CheckHistory"]
    assert after["loop"] == document["loop"]


@pytest.mark.parametrize(
    ("since_maintenance", "mode", "maintenance_fails", "runs", "after"),
    [
        (49, "job", False, True, 0),
        (49, "job", True, True, 0),  # a failed run backs off like a successful one
        (10, "job", False, False, 11),
        (49, "glue-optimizers", False, False, 50),
        (49, "none", False, False, 50),
    ],
)
def test_maintenance_runs_every_n_batches_and_a_failure_never_stops_cdc(
    asl, since_maintenance, mode, maintenance_fails, runs, after
):
    """Given MaintenanceEveryNBatches=50 and a batch just acknowledged, When it is the 50th since the last
    maintenance and MaintenanceMode=job, Then the loop runs the maintenance job between two CDC runs, and
    whether it succeeds or fails (caught, alarmed by the Glue failure rule) it resets the counter and goes
    on to the history guard and the next drain: CDC never stops for maintenance. Otherwise no run."""
    document = {
        "config": CONFIG | {"maintenance_mode": mode},
        "lease": LEASE,
        "loop": {"batches": 99, "since_refine": 1, "since_maintenance": since_maintenance},
        "batch": {"value": {"has_work": True, "run_id": "r1", "manifest_key": "k", "file_count": 3}},
    }
    failing = frozenset({"RunMaintenance"}) if maintenance_fails else frozenset()
    path, state = _walk(asl, "CountBatch", document, failing)
    assert _tasks(asl, path) == (["RunMaintenance"] if runs else [])
    assert path[-1] == "CheckHistory"
    assert state["loop"] == {"batches": 100, "since_refine": 2, "since_maintenance": after}
    assert asl["States"]["RunMaintenance"]["Parameters"]["JobName"] == "${MaintenanceJobName}"
    assert _route(asl, "RollOver?", {"history": {"value": {"rollover": False}}})[-1] == "CheckDmsTask"


def test_the_runbook_says_when_skip_full_load_is_safe(asl):
    """Given `{"skip_full_load": true}` goes straight to the loop (no DMS wait, no full-load job, no
    manifests/full-load.json written) and nothing in the state machine checks that the full load was
    recorded, When an operator restarts after an execution ended before it was (DmsTaskFailed,
    FullLoadFailed), Then the runbook must not send them there: every docs/DEPLOY.md paragraph or table row
    that says to start with skip_full_load names manifests/full-load.json, which decides the input."""
    states = asl["States"]
    skipped = _route(asl, "ResumingAfterRollover", {"skip_full_load": True})
    assert skipped[-1] == "StartLoop" and "RunFullLoad" not in skipped
    touching = [name for name, state in states.items() if "full-load.json" in json.dumps(state)]
    assert touching == ["RecordFullLoad"]  # written once, after the full-load job; never read here
    published = states["RunFullLoad"]["Next"]  # its report published, the marker written next
    assert published == "PublishFullLoadReport" and states[published]["Next"] == "RecordFullLoad"
    assert states["FullLoadFailed"]["Type"] == states["DmsTaskFailed"]["Type"] == "Fail"
    deploy = (REPO / "docs" / "DEPLOY.md").read_text()
    blocks = [b for chunk in re.split(r"\n\s*\n", deploy) for b in re.split(r"\n(?=\|)|\n(?=- )", chunk)]
    advising = [b for b in blocks if '{"skip_full_load": true}' in b]
    assert advising
    for block in advising:
        assert "full-load.json" in block, block
    assert "head-object --bucket <ArtifactsBucketName> --key manifests/full-load.json" in deploy


def test_what_full_loads_and_reloads_quarantine_reaches_the_quarantine_alarm(template, asl):
    """Given the full-load and reload job runs, Then the step after each hands the run's own report (the
    name its --report_uri uses) to the acknowledge function, which publishes what it quarantined under the
    metric the quarantine alarm watches; a failure to publish never stops the pipeline (its catcher goes
    where the job's success goes)."""
    states = asl["States"]
    cases = {
        "RunFullLoad": ("PublishFullLoadReport", "RecordFullLoad"),
        "RunReload": ("PublishReloadReport", "RetireReloads"),
    }
    for job, (publish, after) in cases.items():
        assert states[job]["Next"] == publish, job
        step = states[publish]
        assert step["Parameters"]["FunctionName"] == "${AcknowledgeFunctionArn}"
        assert step["Next"] == after and [c["Next"] for c in step["Catch"]] == [after], publish
        assert all(c["ErrorEquals"] == ["States.ALL"] for c in step["Catch"])
    full_load_report = states["RunFullLoad"]["Parameters"]["Arguments"]["--report_uri.$"]
    assert "full-load-{}.json', $$.Execution.Name" in full_load_report
    assert states["PublishFullLoadReport"]["Parameters"]["Payload"] == {
        "load_run_id.$": "States.Format('full-load-{}', $$.Execution.Name)"
    }
    assert (
        states["PublishReloadReport"]["Parameters"]["Payload"]["load_run_id.$"]
        == states["RunReload"]["Parameters"]["Arguments"]["--run_id.$"]
    )
    alarm = template["Resources"]["QuarantinedRecordsAlarm"]["Properties"]["Metrics"]
    watched = {m["MetricStat"]["Metric"]["MetricName"] for m in alarm if "MetricStat" in m}
    assert watched == {"QuarantinedRecords", "QuarantinedFiles"}


@pytest.mark.parametrize("job", ["RunFullLoad", "RunReload"])
def test_a_load_that_glue_refuses_to_start_waits_instead_of_spending_its_runs(asl, job):
    """Given Glue refusing to start the full load or a reload for a while (a run still going, throttling),
    Then the same retrier as the CDC run's comes first, so the load's bounded runs (its cost) are spent on
    runs, not on refusals; the refine and maintenance steps keep failing fast (they are caught, and a long
    wait there would hold CDC up)."""
    retriers = asl["States"][job]["Retry"]
    assert retriers[0] == asl["States"]["RunCdc"]["Retry"][0]
    assert "States.ALL" in retriers[-1]["ErrorEquals"]
    for fast in ("RunRefine", "RunIdleRefine", "RunMaintenance"):
        assert all(not TRANSIENT_GLUE_ERRORS & set(r["ErrorEquals"]) for r in asl["States"][fast]["Retry"]), (
            fast
        )
