"""Derive the EMR Serverless state machine from the Glue one (`statemachine/pipeline.asl.json` stays the
single source of truth):

    python -m tools.emr_serverless_asl            # writes statemachine/pipeline.emr-serverless.asl.json
    python -m tools.emr_serverless_asl --check    # exit 1 when the checked-in file is out of date

Every `glue:startJobRun.sync` task becomes an `emr-serverless:startJobRun.sync` task that runs the same entry
script with the same arguments:
- `ApplicationId` / `ExecutionRoleArn` from the substitutions `EmrApplicationId` / `EmrJobRoleArn`, `Name`
  the Glue job's name, `ExecutionTimeoutMinutes` the Glue job's `Timeout`;
- `JobDriver.SparkSubmit.EntryPoint` the Glue job's `Command.ScriptLocation`;
- `EntryPointArguments`: the job's own arguments from the Glue job's `DefaultArguments` in template.yaml
  (`--snake_case` ones, as `lakehouse.base.config` tells ours from Glue's), then the task's run arguments
  (argparse keeps the last of a repeated option, so a run argument overrides a default as on Glue); dynamic
  values through `States.Array`, as Step Functions has no other way to build a list;
- `SparkSubmitParameters`: `--py-files` (the Glue job's `--extra-py-files`), `--jars ${IcebergJars}` (the
  template's choice of Iceberg runtime, as the Glue jobs' `--datalake-formats` / `--extra-jars` make it: the
  release's own, or the pinned jar) and the Iceberg catalog settings `lakehouse.io.session.catalog_conf` gives
  a Glue-catalog session with the job's `--catalog_name` and `--warehouse`;
- Retry error names mapped to EMR Serverless's (`GLUE_TO_EMR_ERRORS`); an unknown Glue error name is an error
  here, never silently copied.
Values of the Glue job's arguments are kept as written in the template: `!Sub` text keeps its `${Name}`
placeholders, `!Ref Name` becomes `${Name}`; the EMR state machine's `DefinitionSubstitutions` must provide
each (tests/unit/template checks that they are the same parameters and resources the Glue jobs use).
A state's parameter that reads a Glue run's result (the acknowledge's `glue_run`) is dropped: an EMR job run
has none of the Glue run's fields.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
GLUE_ASL = REPO / "statemachine" / "pipeline.asl.json"
EMR_ASL = REPO / "statemachine" / "pipeline.emr-serverless.asl.json"
REGENERATE = "python -m tools.emr_serverless_asl"

GLUE_SYNC = "arn:aws:states:::glue:startJobRun.sync"
EMR_SYNC = "arn:aws:states:::emr-serverless:startJobRun.sync"
GLUE_STATE_MACHINE = "PipelineStateMachine"
APPLICATION_ID = "${EmrApplicationId}"
ICEBERG_JARS = "${IcebergJars}"
EXECUTION_ROLE_ARN = "${EmrJobRoleArn}"

# What Glue's refusals to start a run are on EMR Serverless (StartJobRun's documented errors; Step Functions
# names an optimized integration's API errors `<Service>.<Code>`). EMR Serverless queues runs beyond the
# application's concurrency instead of refusing them; ConflictException is its "not now" (an application
# stopping or being updated).
GLUE_TO_EMR_ERRORS = {
    "Glue.ConcurrentRunsExceededException": "EMRServerless.ConflictException",
    "Glue.ThrottlingException": "EMRServerless.ThrottlingException",
    "Glue.InternalServiceException": "EMRServerless.InternalServerException",
}

_OURS = re.compile(r"^--[a-z0-9_]+$")  # the jobs' own arguments (lakehouse.base.config), not Glue's
_PLACEHOLDER = re.compile(r"\$\{[A-Za-z0-9_.:]+\}")


class EngineError(ValueError):
    """The Glue definition or template holds something this tool cannot translate faithfully."""


# ---------------------------------------------------------------- reading the template
def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """template.yaml as CloudFormation reads it, by cfn-lint's decoder: short tags in their long forms
    (`!Ref X` → `{"Ref": "X"}`, `!GetAtt A.B` → `{"Fn::GetAtt": ["A", "B"]}`, `!Condition C` →
    `{"Condition": "C"}`); mappings and strings are dict and str subclasses that carry their line."""
    from cfnlint.decode import cfn_yaml

    return cfn_yaml.load(str(path))


def as_text(value: Any) -> str:
    """A Glue job property as definition text: literal, `!Sub` text (placeholders kept), `!Ref X` → `${X}`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return value["Fn::Sub"]
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return "${" + value["Ref"] + "}"
    raise EngineError(f"cannot express {value!r} as state machine text (use a literal, !Sub text or !Ref)")


def placeholders(text: str) -> set[str]:
    return {match[2:-1] for match in _PLACEHOLDER.findall(text)}


def glue_job_of(template: dict[str, Any], job_name: str) -> tuple[str, dict[str, Any]]:
    """The Glue job (logical id, properties) a task's `JobName` substitution names."""
    match = re.fullmatch(r"\$\{(\w+)\}", job_name)
    if match is None:
        raise EngineError(f"JobName {job_name!r} is not a substitution")
    substitutions = template["Resources"][GLUE_STATE_MACHINE]["Properties"]["DefinitionSubstitutions"]
    reference = substitutions.get(match[1])
    if not (isinstance(reference, dict) and set(reference) == {"Ref"}):
        raise EngineError(f"substitution {match[1]} is not a !Ref of a Glue job: {reference!r}")
    logical = reference["Ref"]
    resource = template["Resources"].get(logical) or {}
    if resource.get("Type") != "AWS::Glue::Job":
        raise EngineError(f"{logical} is not an AWS::Glue::Job")
    return logical, resource["Properties"]


# ---------------------------------------------------------------- what a job run is
def job_arguments(glue_job: dict[str, Any]) -> list[tuple[str, str]]:
    """The job's own default arguments (`--snake_case`), in template order, as definition text."""
    defaults = glue_job.get("DefaultArguments") or {}
    return [(name, as_text(value)) for name, value in defaults.items() if _OURS.match(name)]


def spark_submit_parameters(glue_job: dict[str, Any]) -> str:
    """`--py-files`, `--jars` and the Iceberg catalog of a Glue-catalog session (lakehouse.io.session)."""
    from lakehouse.base.config import LakeConfig
    from lakehouse.io.session import catalog_conf

    defaults = glue_job.get("DefaultArguments") or {}
    arguments = dict(job_arguments(glue_job))
    if arguments.get("--catalog_type") != "glue":
        raise EngineError("the Glue job does not run on the Glue Data Catalog (--catalog_type glue)")
    config = LakeConfig(
        catalog_type="glue",
        catalog_name=arguments.get("--catalog_name", LakeConfig.catalog_name),
        warehouse=arguments["--warehouse"],
    )
    parts = []
    if "--extra-py-files" in defaults:
        parts += ["--py-files", as_text(defaults["--extra-py-files"])]
    parts += ["--jars", ICEBERG_JARS]
    for key, value in catalog_conf(config).items():
        if " " in key or " " in value:
            raise EngineError(f"a Spark setting with a blank cannot go on a spark-submit line: {key}={value}")
        parts += ["--conf", f"{key}={value}"]
    return " ".join(parts)


def intrinsic_literal(text: str) -> str:
    """`text` as a string literal of an intrinsic function: quotes, backslashes and braces escaped,
    except the braces of `${Name}` definition substitutions (replaced before Step Functions parses it)."""
    out, position = [], 0
    for match in _PLACEHOLDER.finditer(text):
        out.append(_escape(text[position : match.start()]))
        out.append(match.group(0))
        position = match.end()
    out.append(_escape(text[position:]))
    return "'" + "".join(out) + "'"


def _escape(text: str) -> str:
    return re.sub(r"([\\'{}])", r"\\\1", text)


def entry_point_arguments(defaults: list[tuple[str, str]], run_arguments: dict[str, Any]) -> tuple[str, Any]:
    """(parameter name, value): a plain list when every value is static, else `States.Array(…)`."""
    items: list[tuple[str, bool]] = []  # (text, is a path or an intrinsic)
    for name, value in defaults:
        items += [(name, False), (value, False)]
    for key, value in run_arguments.items():
        if key.endswith(".$"):
            items += [(key[:-2], False), (str(value), True)]
        else:
            if not isinstance(value, str):
                raise EngineError(f"run argument {key} is not text: {value!r}")
            items += [(key, False), (value, False)]
    if not any(dynamic for _, dynamic in items):
        return "EntryPointArguments", [text for text, _ in items]
    rendered = [text if dynamic else intrinsic_literal(text) for text, dynamic in items]
    return "EntryPointArguments.$", "States.Array(" + ", ".join(rendered) + ")"


def timeout_minutes(glue_job: dict[str, Any]) -> tuple[str, Any] | None:
    timeout = glue_job.get("Timeout")
    if timeout is None:
        return None
    if isinstance(timeout, int):
        return "ExecutionTimeoutMinutes", timeout
    return "ExecutionTimeoutMinutes.$", f"States.StringToJson('{as_text(timeout)}')"


def emr_retry(retriers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    mapped = []
    for retrier in retriers:
        names = []
        for name in retrier["ErrorEquals"]:
            if name.startswith("States."):
                names.append(name)
            elif name in GLUE_TO_EMR_ERRORS:
                names.append(GLUE_TO_EMR_ERRORS[name])
            else:
                raise EngineError(f"no EMR Serverless equivalent known for the error {name}")
        mapped.append({**retrier, "ErrorEquals": names})
    return mapped


def emr_task(state: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The EMR Serverless twin of one `glue:startJobRun.sync` task (same place, Retry, Catch, paths)."""
    parameters = state["Parameters"]
    unknown = set(parameters) - {"JobName", "Arguments"}
    if unknown:
        raise EngineError(f"Glue task parameters not translated: {sorted(unknown)}")
    _, glue_job = glue_job_of(template, parameters["JobName"])
    name, value = entry_point_arguments(job_arguments(glue_job), parameters.get("Arguments") or {})
    spark_submit = {
        "EntryPoint": as_text(glue_job["Command"]["ScriptLocation"]),
        name: value,
        "SparkSubmitParameters": spark_submit_parameters(glue_job),
    }
    emr_parameters: dict[str, Any] = {
        "ApplicationId": APPLICATION_ID,
        "ExecutionRoleArn": EXECUTION_ROLE_ARN,
        "Name": as_text(glue_job["Name"]),
        "JobDriver": {"SparkSubmit": spark_submit},
    }
    if (timeout := timeout_minutes(glue_job)) is not None:
        emr_parameters[timeout[0]] = timeout[1]
    task: dict[str, Any] = {}
    for key, value in state.items():  # the Glue state's key order, for a readable diff
        if key == "Resource":
            task[key] = EMR_SYNC
        elif key == "Parameters":
            task[key] = emr_parameters
        elif key == "Retry":
            task[key] = emr_retry(value)
        else:
            task[key] = copy.deepcopy(value)
    return task


def _parameter_maps(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from _parameter_maps(child)
    elif isinstance(node, list):
        for child in node:
            yield from _parameter_maps(child)


def derive(glue_asl: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The EMR Serverless definition of `glue_asl` (pure: the inputs are not changed)."""
    emr = copy.deepcopy(glue_asl)
    glue_results = set()
    for name, state in glue_asl["States"].items():
        if state.get("Resource") == GLUE_SYNC:
            emr["States"][name] = emr_task(state, template)
            if state.get("ResultPath"):
                glue_results.add(state["ResultPath"])
        elif "glue:" in str(state.get("Resource", "")):
            raise EngineError(f"{name}: only glue:startJobRun.sync is translated ({state['Resource']})")
    for state in emr["States"].values():
        if state.get("Resource") == EMR_SYNC:
            continue
        for mapping in _parameter_maps(state.get("Parameters")):
            for key in [k for k, v in mapping.items() if k.endswith(".$") and v in glue_results]:
                del mapping[key]  # a Glue run's figures (the acknowledge's glue_run): EMR has none of them
    emr["Comment"] = (
        f"GENERATED by `{REGENERATE}` from pipeline.asl.json (do not edit): the same state machine with its "
        f"Glue job runs on EMR Serverless. {glue_asl.get('Comment', '')}"
    ).strip()
    return emr


def render(definition: dict[str, Any]) -> str:
    return json.dumps(definition, indent=2, ensure_ascii=False) + "\n"


def generate(template_path: Path = TEMPLATE, glue_asl_path: Path = GLUE_ASL) -> str:
    """The text `statemachine/pipeline.emr-serverless.asl.json` must hold."""
    return render(derive(json.loads(glue_asl_path.read_text()), load_template(template_path)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in file is out of date")
    args = parser.parse_args(argv)
    if str(REPO / "spark_jobs") not in sys.path:
        sys.path.insert(0, str(REPO / "spark_jobs"))  # lakehouse.io.session: the catalog settings
    wanted = generate()
    current = EMR_ASL.read_text() if EMR_ASL.exists() else ""
    if args.check:
        if current != wanted:
            print(f"{EMR_ASL.relative_to(REPO)} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        EMR_ASL.write_text(wanted)
        print(f"wrote {EMR_ASL.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
