"""`make deploy`: one command from a checkout to a deployed stack, on AWS or on the local AWS (AWS_ENDPOINT_URL):

    python -m deploy.release --stack-name dms-iceberg-lake [--config-env default] \
        [--parameter-overrides "K=V …"] [--schema-file schema.json] [--no-confirm-changeset]

1. the parameters `sam deploy` will use: the samconfig.toml environment's `parameter_overrides`, then
   `--parameter-overrides` (on an update, what neither names keeps the stack's current value);
2. the preflight (deploy.preflight): every check, each failure with its fix, before anything is built;
3. `sam build`;
4. the release (deploy.glue_artifacts.release): the job code, the library and the schema file under keys that
   hold a hash of their content, passed as the template's `JobCodePrefix`, `SchemaFileKey`; on an update they
   are published before `sam deploy`, so the new stack never names a key that is missing, and the old keys stay
   for a rollback. The jobs run Glue's own Iceberg (`IcebergJarKey` empty) unless the parameters say
   `IcebergJarKey=pinned`: then the runtime the tests run on is published too and its key passed instead (a key
   of a jar of your own, uploaded by you, is passed as given);
5. `sam deploy` with all of them (the command line's overrides replace samconfig's, so both are passed; the
   models folder sets HasRefineModels and ExampleModels unless the parameters name them);
6. the release again, after a first create (the artifacts bucket is the stack's own): keys already there are skipped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy import glue_artifacts, preflight

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
SAMCONFIG = REPO / "samconfig.toml"


def sam_executable() -> str:
    """The SAM CLI of this interpreter's venv (the `deploy` extra), else the local stack's (.venv-sam), else PATH's."""
    for candidate in (Path(sys.executable).with_name("sam"), REPO / ".venv-sam" / "bin" / "sam"):
        if candidate.is_file():
            return str(candidate)
    return "sam"


def build_command(sam: str, config_env: str) -> list[str]:
    return [
        sam,
        "build",
        "--config-env",
        config_env,
        "--config-file",
        str(SAMCONFIG),
        "--template-file",
        str(TEMPLATE),
    ]


def deploy_command(
    sam: str, stack_name: str, config_env: str, parameters: Mapping[str, str], confirm: bool = True
) -> list[str]:
    """`sam deploy` of the built template with every parameter given (K=V, one argument each: no shell)."""
    command = [
        sam,
        "deploy",
        "--config-env",
        config_env,
        "--config-file",
        str(SAMCONFIG),
        "--stack-name",
        stack_name,
    ]
    if not confirm:
        command.append("--no-confirm-changeset")
    if parameters:
        command += ["--parameter-overrides", *(_override(key, value) for key, value in parameters.items())]
    return command


def _override(key: str, value: str) -> str:
    """K=V as sam deploy reads it: a value with a space is quoted, or sam would split it, and so is an empty one
    (sam reads `K=` as no parameter at all)."""
    return f'{key}="{value}"' if not value or any(c.isspace() for c in value) else f"{key}={value}"


# Parameters the release reads from the models folder: defaults the user's parameters may override.
MODELS_FOLDER_PARAMETERS = ("HasRefineModels", "ExampleModels")


def iceberg_jar_to_publish(overrides: Mapping[str, str]) -> Path | None:
    """The jar the release publishes: the tests' Iceberg runtime when the parameters ask for it, else none."""
    if overrides.get("IcebergJarKey") == glue_artifacts.PINNED_ICEBERG:
        return glue_artifacts.iceberg_runtime_jar()
    return None


def artifacts_bucket(cloudformation: Any, stack_name: str) -> str | None:
    """The stack's artifacts bucket (its output), or None while the stack does not exist."""
    stack = preflight.describe_stack(cloudformation, stack_name)
    if stack is None:
        return None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return outputs.get("ArtifactsBucketName")


def _run(command: list[str]) -> None:
    print("+", " ".join(command[:4]), "…" if len(command) > 4 else "", flush=True)
    environment = dict(os.environ)
    # sam build makes the python3.11 functions with the first python3.11 on PATH: this venv's
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment.setdefault("SAM_CLI_TELEMETRY", "0")
    subprocess.run(command, cwd=REPO, env=environment, check=True)


def main(argv: Sequence[str] | None = None, session: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack-name", help="default: the config env's stack_name in samconfig.toml")
    parser.add_argument("--config-env", default="default", help="the samconfig.toml environment")
    parser.add_argument("--parameter-overrides", default="", help="as sam deploy takes them: Key=Value …")
    parser.add_argument(
        "--schema-file", type=Path, help="from python -m tools.schema_gen (first deploy: required)"
    )
    parser.add_argument("--no-confirm-changeset", action="store_true", help="deploy without asking")
    parser.add_argument("--sam", default=None, help="the SAM CLI to run (default: this venv's)")
    args = parser.parse_args(argv)
    if session is None:
        import boto3

        session = boto3.Session()
    cloudformation = session.client("cloudformation")
    stack_name = args.stack_name or preflight.configured_stack_name(SAMCONFIG, args.config_env)
    overrides = preflight.configured_overrides(SAMCONFIG, args.config_env) | preflight.parse_overrides(
        args.parameter_overrides
    )
    target = preflight.target_of(
        session, stack_name, overrides, schema_file=args.schema_file, schema_required=True
    )
    found = preflight.problems(session, target)
    for problem in found:
        print(f"preflight: {problem}", file=sys.stderr)
    if found:
        return 2
    sam = args.sam or sam_executable()
    _run(build_command(sam, args.config_env))
    release = glue_artifacts.release(args.schema_file, iceberg_jar_to_publish(overrides))
    s3 = session.client("s3")
    bucket = artifacts_bucket(cloudformation, stack_name)
    if bucket is not None:
        glue_artifacts.publish(s3, bucket, release.artifacts, overwrite=False)
    # Glue's own Iceberg unless a jar is named: said on every deploy, so an update that no longer asks for the
    # pinned jar goes back to Glue's (sam deploy would keep the stack's previous key). What the models folder
    # holds sets HasRefineModels and ExampleModels unless the user's parameters say otherwise (a refine kept
    # off while models are written); the code's and the schema file's keys are always the release's.
    keys = dict(release.parameters)
    from_folder = {name: keys.pop(name) for name in MODELS_FOLDER_PARAMETERS if name in keys}
    parameters = {"IcebergJarKey": ""} | from_folder | dict(overrides) | keys
    _run(deploy_command(sam, stack_name, args.config_env, parameters, not args.no_confirm_changeset))
    bucket = artifacts_bucket(cloudformation, stack_name)
    if bucket is None:
        print(f"release: stack {stack_name} has no ArtifactsBucketName output", file=sys.stderr)
        return 1
    for key in glue_artifacts.publish(s3, bucket, release.artifacts, overwrite=False):
        print(f"s3://{bucket}/{key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
