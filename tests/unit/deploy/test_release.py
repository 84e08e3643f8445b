"""make deploy (deploy.release): one command builds, publishes the jobs' code under versioned keys and deploys
with the user's parameters; only what deploying needs is installed."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import boto3
import pytest

from deploy import glue_artifacts, release, stack_names
from tests.offline_aws import offline_aws

REPO = Path(__file__).resolve().parents[3]
STACK = "lake"
BUCKET = "dev-artifacts-123456789012-eu-west-1"
INSTANCE = "arn:aws:dms:eu-west-1:123456789012:rep:INSTANCE"
SOURCE = "arn:aws:dms:eu-west-1:123456789012:endpoint:SOURCE"
DMS_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "dms.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


@pytest.fixture
def small_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    jar = tmp_path / glue_artifacts.ICEBERG_RUNTIME_JAR
    jar.write_bytes(b"PK jar")
    monkeypatch.setattr(glue_artifacts, "iceberg_runtime_jar", lambda: jar)
    return jar


def test_a_release_names_every_artifact_by_its_content(tmp_path: Path, small_jar: Path) -> None:
    """Given the code and a schema file, When a release is made twice, Then the keys are the same (the library's
    zip is the same bytes each time); a changed schema file changes its key only; each key is a template
    parameter the jobs read, under the prefix the template's defaults do not use."""
    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "tables": {}}')
    first, second = glue_artifacts.release(schema, small_jar), glue_artifacts.release(schema, small_jar)
    assert first == second
    prefix = first.parameters["JobCodePrefix"]
    assert [a.key for a in first.artifacts] == [
        *(f"{prefix}/scripts/{s}" for s in glue_artifacts.GLUE_SCRIPTS),
        f"{prefix}/lib/lakehouse.zip",
        *(f"{prefix}/models/{m.name}" for m in glue_artifacts.model_files()),
        first.parameters["IcebergJarKey"],
        first.parameters["SchemaFileKey"],
    ]
    assert prefix.startswith("glue/code/") and len(prefix) == len("glue/code/") + glue_artifacts.HASH_LENGTH
    assert first.parameters["IcebergJarKey"].endswith(f"/{glue_artifacts.ICEBERG_RUNTIME_JAR}")
    assert first.parameters["SchemaFileKey"].startswith("config/schema-")

    schema.write_text('{"version": 1, "tables": {"a": {}}}')
    changed = glue_artifacts.release(schema, small_jar).parameters
    assert changed["SchemaFileKey"] != first.parameters["SchemaFileKey"]
    assert {k: v for k, v in changed.items() if k != "SchemaFileKey"} == {
        k: v for k, v in first.parameters.items() if k != "SchemaFileKey"
    }
    declared = stack_names.template()["Parameters"]
    assert set(first.parameters) <= set(declared)
    defaults = {name: declared[name]["Default"] for name in first.parameters}
    assert defaults == {
        "JobCodePrefix": glue_artifacts.FIXED_CODE_PREFIX,
        "IcebergJarKey": "",  # Glue's own Iceberg
        "SchemaFileKey": glue_artifacts.SCHEMA_KEY,
        "HasRefineModels": "true",  # the example models
        "ExampleModels": "true",
    }
    assert glue_artifacts.release().parameters.keys() == {"JobCodePrefix", "HasRefineModels", "ExampleModels"}
    code = len(glue_artifacts.GLUE_SCRIPTS) + 1 + len(glue_artifacts.model_files())
    assert glue_artifacts.release().artifacts == first.artifacts[:code]


class FakeSam:
    """The SAM CLI as deploy.release runs it: `deploy` creates (or finds) the stack in moto, whose artifacts
    bucket and output are what the real template makes; records each command and what the bucket held then."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.bucket_at_deploy: set[str] = set()

    def __call__(self, command: list[str]) -> None:
        self.commands.append(command)
        if command[1] != "deploy":
            return
        s3 = boto3.client("s3")
        if BUCKET in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
            self.bucket_at_deploy = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
            return
        create_stack()


def create_stack() -> None:
    template = {
        "Resources": {"ArtifactsBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": BUCKET}}},
        "Outputs": {"ArtifactsBucketName": {"Value": {"Ref": "ArtifactsBucket"}}},
    }
    boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    with offline_aws(monkeypatch, region="eu-west-1"):
        iam = boto3.client("iam")
        for role in ("dms-vpc-role", "dms-cloudwatch-logs-role"):  # the account's DMS roles (a prerequisite)
            iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(DMS_TRUST))
        yield boto3.Session(region_name="eu-west-1")


def _deploy(session: Any, monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, FakeSam]:
    sam = FakeSam()
    monkeypatch.setattr(release, "_run", sam)
    code = release.main(["--stack-name", STACK, "--sam", "sam", *argv], session=session)
    return code, sam


def _parameters(command: list[str]) -> dict[str, str]:
    given = command[command.index("--parameter-overrides") + 1 :]
    return dict(item.split("=", 1) for item in given)


def test_a_first_deploy_builds_deploys_with_the_users_parameters_and_the_keys_then_publishes(
    aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_jar: Path, capsys
) -> None:
    """Given no stack yet, When make deploy runs with PARAMS and a schema file, Then sam build runs, then sam
    deploy with samconfig's overrides, the user's PARAMS and the release's keys (all of them: the command
    line's list replaces samconfig's), and after the create every artifact is at its versioned key."""
    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "tables": {}}')
    params = f"DmsReplicationInstanceArn={INSTANCE} DmsSourceEndpointArn={SOURCE} AlarmEmail=ops@example.com"

    code, sam = _deploy(aws, monkeypatch, "--parameter-overrides", params, "--schema-file", str(schema))

    assert code == 0, capsys.readouterr().err
    assert [c[1] for c in sam.commands] == ["build", "deploy"]
    keys = glue_artifacts.release(schema).parameters
    assert _parameters(sam.commands[1]) == {
        "EnvironmentName": "dev",  # samconfig.toml's [default]
        "DmsReplicationInstanceArn": INSTANCE,
        "DmsSourceEndpointArn": SOURCE,
        "AlarmEmail": "ops@example.com",
        "IcebergJarKey": '""',  # Glue's own Iceberg, said (sam reads a bare `K=` as nothing)
        **keys,
    }
    assert sam.commands[1][sam.commands[1].index("--stack-name") + 1] == STACK
    published = {o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert published == {a.key for a in glue_artifacts.release(schema).artifacts}
    assert f"s3://{BUCKET}/{keys['SchemaFileKey']}" in capsys.readouterr().out


def test_the_models_folder_sets_the_refine_parameters_unless_the_user_names_them(
    aws: Any, monkeypatch: pytest.MonkeyPatch, small_jar: Path
) -> None:
    """Given the example models in models/, When make deploy runs with PARAMS naming HasRefineModels=false (a
    refine kept off while models are written), Then sam deploy gets the user's value; ExampleModels, not
    named, is what the folder says; the code's key is the release's whatever PARAMS say."""
    create_stack()
    params = "HasRefineModels=false JobCodePrefix=glue/mine"
    code, sam = _deploy(aws, monkeypatch, "--parameter-overrides", params)
    assert code == 0
    given = _parameters(sam.commands[1])
    expected = glue_artifacts.release().parameters
    assert (given["HasRefineModels"], given["ExampleModels"]) == ("false", expected["ExampleModels"])
    assert given["JobCodePrefix"] == expected["JobCodePrefix"] != "glue/mine"


def test_an_update_publishes_the_new_code_before_the_stack_names_it(
    aws: Any, monkeypatch: pytest.MonkeyPatch, small_jar: Path
) -> None:
    """Given a deployed stack, When make deploy runs again without a schema file, Then the new code is in the
    bucket before sam deploy (the updated jobs never name a missing key), and the stack keeps its schema file
    (no SchemaFileKey passed: sam deploy keeps the stack's value)."""
    create_stack()
    code, sam = _deploy(aws, monkeypatch)
    assert code == 0
    expected = glue_artifacts.release()
    assert sam.bucket_at_deploy == {a.key for a in expected.artifacts}
    assert "SchemaFileKey" not in _parameters(sam.commands[1])
    assert _parameters(sam.commands[1])["JobCodePrefix"] == expected.parameters["JobCodePrefix"]


def test_the_pinned_iceberg_runtime_is_published_and_named_only_when_asked_for(
    aws: Any, monkeypatch: pytest.MonkeyPatch, small_jar: Path
) -> None:
    """Given a deployed stack, When make deploy runs with `IcebergJarKey=pinned`, Then the tests' Iceberg runtime
    is in the bucket at its versioned key before sam deploy, which gets that key; When it runs again without it,
    Then no jar is published and sam deploy gets an empty IcebergJarKey (back to Glue's own Iceberg); a key of
    the user's own jar is passed as given."""
    create_stack()
    code, sam = _deploy(aws, monkeypatch, "--parameter-overrides", "IcebergJarKey=pinned")
    assert code == 0
    pinned = glue_artifacts.release(iceberg_jar=small_jar)
    jar_key = pinned.parameters["IcebergJarKey"]
    assert jar_key.startswith("glue/jars/") and jar_key.endswith(f"/{small_jar.name}")
    assert jar_key in sam.bucket_at_deploy
    assert _parameters(sam.commands[1])["IcebergJarKey"] == jar_key

    boto3.client("s3").delete_object(Bucket=BUCKET, Key=jar_key)
    code, sam = _deploy(aws, monkeypatch)
    assert code == 0
    assert jar_key not in sam.bucket_at_deploy
    assert _parameters(sam.commands[1])["IcebergJarKey"] == '""'

    code, sam = _deploy(aws, monkeypatch, "--parameter-overrides", "IcebergJarKey=jars/mine.jar")
    assert code == 0 and _parameters(sam.commands[1])["IcebergJarKey"] == "jars/mine.jar"


def test_a_first_deploy_without_what_it_needs_stops_before_building(
    aws: Any, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Given no stack and no parameters, When make deploy runs, Then nothing is built and it says which
    parameters (the DMS instance and source endpoint) and which file (the schema) to give, and how."""
    code, sam = _deploy(aws, monkeypatch)
    assert code == 2 and sam.commands == []
    error = capsys.readouterr().err
    assert "DmsReplicationInstanceArn, DmsSourceEndpointArn" in error and "PARAMS=" in error
    assert "SCHEMA_FILE=schema.json" in error


def test_make_deploy_passes_params_to_the_release_and_installs_only_the_deploy_extra() -> None:
    """Given `make -n deploy PARAMS=… SCHEMA_FILE=…`, Then the release command gets PARAMS as the overrides and
    the schema file; it runs in a venv of the `deploy` extra, which holds no Spark, moto or PostgreSQL."""
    result = subprocess.run(
        ["make", "-n", "-B", "deploy", "PARAMS=A=1 B=two", "SCHEMA_FILE=schema.json", "YES=1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    commands = result.stdout.replace("\\\n", " ")
    assert "pip install --quiet -e '.[deploy]'" in commands
    release_line = next(line for line in commands.splitlines() if "-m deploy.release" in line)
    assert release_line.split()[0] == ".venv-deploy/bin/python"
    assert "--parameter-overrides 'A=1 B=two'" in release_line
    assert "--schema-file schema.json" in release_line and "--no-confirm-changeset" in release_line
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {
        requirement.split("[")[0].split("=")[0].split(">")[0].split("<")[0]
        for requirement in extras["deploy"]
    }
    assert names == {"boto3", "aws-sam-cli", "pyyaml", "snowpark-connect-deps-iceberg"}
