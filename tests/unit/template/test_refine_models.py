"""The refined models reach the stack: published with the job code, named by the refine job's --models_uri, and
the loop starts no refine run (none is billed) when the deploy found no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy import glue_artifacts
from tests.unit.template.test_template import CONFIG, LEASE, _route, _tasks, _walk


def _due(refine_models: bool) -> dict[str, Any]:
    return {
        "config": CONFIG | {"refine_models": refine_models},
        "lease": LEASE,
        "loop": {"batches": 9, "since_refine": 5, "since_maintenance": 1},
        "batch": {"value": {"run_id": "b9"}},
    }


@pytest.mark.parametrize("refine_models", [True, False])
def test_the_loop_refines_only_when_a_model_was_deployed(asl: dict[str, Any], refine_models: bool) -> None:
    """Given RefineEveryNBatches batches applied since the last refine (and, idle, a quiet source)
    When the loop decides, Then it starts the refine job if the deploy published a model, and no run at all
    (HasRefineModels=false) otherwise."""
    document = _due(refine_models)
    idle = document | {
        "batch": {"value": {"has_work": False, "file_count": 0, "moved_aside": [], "reloads_pending": []}}
    }

    after_batch = _route(asl, "RefineDue?", document)[-1]
    idle_tasks = _tasks(asl, _walk(asl, "HasWork?", idle)[0])

    assert (
        asl["States"]["Configure"]["Parameters"]["refine_models.$"]
        == "States.StringToJson('${HasRefineModels}')"
    )
    assert (after_batch == "RunRefine") is refine_models
    assert ("RunIdleRefine" in idle_tasks) is refine_models


def test_the_refine_job_reads_the_models_published_with_its_code(template: dict[str, Any]) -> None:
    """Given the template, Then the refine job's --models_uri is the models folder under its JobCodePrefix and
    both state machines are told whether there is a model."""
    resources = template["Resources"]
    arguments = resources["RefineJob"]["Properties"]["DefaultArguments"]

    assert arguments["--models_uri"] == {"Fn::Sub": "s3://${ArtifactsBucket}/${JobCodePrefix}/models/"}
    assert template["Parameters"]["HasRefineModels"]["Default"] == "true"
    for machine in ("PipelineStateMachine", "EmrPipelineStateMachine"):
        substitutions = resources[machine]["Properties"]["DefinitionSubstitutions"]
        assert "HasRefineModels" in substitutions, machine


def test_the_release_publishes_the_models_and_says_whether_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the checkout's models folder, When a release is made, Then each model is published under the code
    prefix (its hash covers them) and HasRefineModels is true; Given an empty folder, Then it is false."""
    release = glue_artifacts.release()
    prefix = release.parameters["JobCodePrefix"]
    published = sorted(a.key for a in release.artifacts if "/models/" in a.key)

    assert published == [f"{prefix}/models/{p.name}" for p in sorted(glue_artifacts.MODELS.glob("*.sql"))]
    assert len(published) >= 3 and release.parameters["HasRefineModels"] == "true"

    monkeypatch.setattr(glue_artifacts, "MODELS", tmp_path)
    empty = glue_artifacts.release()

    assert empty.parameters["HasRefineModels"] == "false"
    assert not [a for a in empty.artifacts if "/models/" in a.key]
    assert empty.parameters["JobCodePrefix"] != prefix
