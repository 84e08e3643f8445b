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
import yaml

REPO = Path(__file__).resolve().parents[3]
TEMPLATE = REPO / "template.yaml"
ASL = REPO / "statemachine" / "pipeline.asl.json"


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)


@pytest.fixture(scope="module")
def asl() -> dict[str, Any]:
    return json.loads(ASL.read_text())


class _OfflinePolicyLoader:
    """The managed policies the template names, without asking IAM."""

    def load(self) -> dict[str, str]:
        return {"AWSGlueServiceRole": "arn:aws:iam::aws:policy/service-role/AWSGlueServiceRole"}


def test_template_transforms_with_the_sam_translator(template, monkeypatch):
    from samtranslator.translator.transform import transform

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    packaged = copy.deepcopy(template)  # as `sam package` leaves it: local paths become S3 objects
    for name, resource in packaged["Resources"].items():
        for uri in ("CodeUri", "DefinitionUri"):
            if uri in resource.get("Properties", {}):
                resource["Properties"][uri] = f"s3://artifacts/{name}.zip"
    transformed = transform(packaged, {}, _OfflinePolicyLoader())
    kinds = {r["Type"] for r in transformed["Resources"].values()}
    assert {"AWS::Lambda::Function", "AWS::StepFunctions::StateMachine", "AWS::Glue::Job"} <= kinds


def test_template_passes_cfn_lint_with_no_errors():
    result = subprocess.run(
        [sys.executable, "-m", "cfnlint", str(TEMPLATE)], capture_output=True, text=True, timeout=300
    )
    errors = [line for line in result.stdout.splitlines() if re.match(r"^E\d", line)]
    assert errors == [], result.stdout


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


def test_no_wildcard_actions_on_data(template):
    text = json.dumps(template["Resources"])
    assert '"Action": "*"' not in text and '"s3:*"' not in text.replace(
        '"Effect": "Deny", "Principal": "*", "Action": "s3:*"', ""
    )


def test_cdc_runs_one_at_a_time_in_order(template):
    assert template["Resources"]["CdcJob"]["Properties"]["ExecutionProperty"] == {"MaxConcurrentRuns": 1}
    target = template["Resources"]["CdcFileCreatedRule"]["Properties"]["Targets"][0]
    assert target["SqsParameters"]["MessageGroupId"]
