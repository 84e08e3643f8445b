"""Publishing the Glue scripts, the Spark library and the schema file to the stack's artifacts bucket."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import boto3
import pytest

from deploy import glue_artifacts
from tests.offline_aws import offline_aws

STACK = "dms-iceberg-lake"
BUCKET = "dev-artifacts-123456789012-us-east-1"


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch):
    with offline_aws(monkeypatch):
        template = {
            "Resources": {
                "ArtifactsBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": BUCKET}}
            },
            "Outputs": {"ArtifactsBucketName": {"Value": {"Ref": "ArtifactsBucket"}}},
        }
        boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))
        yield boto3.client("s3")


def test_publishes_scripts_library_and_schema_where_the_glue_jobs_look(stack, tmp_path: Path, capsys):
    """Given a deployed stack (moto) and a schema file, When `python -m deploy.glue_artifacts` runs,
    Then the seven entry scripts, lakehouse.zip, the refined models, the tested Iceberg runtime jar and
    config/schema.json are in
    the artifacts bucket at the keys the template's Glue jobs name, and the zip holds the package at its root."""
    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "tables": {}}')

    assert glue_artifacts.main(["--stack-name", STACK, "--schema-file", str(schema)]) == 0

    keys = {o["Key"] for o in stack.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert keys == {
        "glue/scripts/full_load_job.py",
        "glue/scripts/cdc_job.py",
        "glue/scripts/refine_job.py",
        "glue/scripts/maintenance_job.py",
        "glue/scripts/reconcile_job.py",
        "glue/scripts/raw_audit_job.py",
        "glue/scripts/reapply_job.py",
        "glue/lib/lakehouse.zip",
        "glue/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
        "config/schema.json",
        *(f"glue/models/{m.name}" for m in glue_artifacts.model_files()),
    }
    jar = stack.head_object(Bucket=BUCKET, Key="glue/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar")
    assert jar["ContentLength"] == glue_artifacts.iceberg_runtime_jar().stat().st_size
    archive = zipfile.ZipFile(
        io.BytesIO(stack.get_object(Bucket=BUCKET, Key="glue/lib/lakehouse.zip")["Body"].read())
    )
    names = archive.namelist()
    assert "lakehouse/__init__.py" in names and all(
        n.startswith(("lakehouse/", "lake_contracts/")) for n in names
    )
    assert not any("__pycache__" in n for n in names)
    assert stack.get_object(Bucket=BUCKET, Key="config/schema.json")["Body"].read() == schema.read_bytes()
    assert f"s3://{BUCKET}/glue/lib/lakehouse.zip" in capsys.readouterr().out


OURS = {"lakehouse": glue_artifacts.SPARK_JOBS, "lake_contracts": glue_artifacts.SHARED}


def _imported_lakehouse_modules(path: Path) -> set[str]:
    """The modules of ours (`lakehouse…`, `lake_contracts…`) a file imports (`from lakehouse.apply import cdc`:
    lakehouse.apply.cdc)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            found.add(node.module)
            found |= {
                f"{node.module}.{a.name}" for a in node.names if _module_file(f"{node.module}.{a.name}")
            }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in OURS}
    return found


def _module_file(module: str) -> Path | None:
    """lakehouse.apply.cdc -> spark_jobs/lakehouse/apply/cdc.py, lake_contracts.x -> functions/shared/…; a
    package -> its __init__.py; else None."""
    root = OURS[module.split(".")[0]]
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_the_glue_library_holds_only_what_the_jobs_import(capsys) -> None:
    """Given the six Glue entry scripts and the library's jobs (the reapply job too, which runs outside Glue
    today), When the modules they import are followed through `lakehouse`,
    Then lakehouse.zip holds exactly those (and the packages' __init__, and the shared contracts the library
    imports): the demo, the test-data generator,
    the verifier, the dashboard, the BI runner and the schema generator live in `tools/`, not on Glue.
    The file list is what `python -m deploy.glue_artifacts --list` prints."""
    seen: set[str] = set()
    jobs = glue_artifacts.SPARK_JOBS / "lakehouse" / "jobs"
    todo = set().union(
        *(_imported_lakehouse_modules(glue_artifacts.SPARK_JOBS / s) for s in glue_artifacts.GLUE_SCRIPTS)
    ) | {
        f"lakehouse.jobs.{p.stem}" for p in jobs.glob("*.py") if p.stem != "__init__"
    }  # every job, run or not
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        parts = module.split(".")
        seen |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}  # importing a.b.c runs a and a.b
        source = _module_file(module)
        assert source is not None, module
        todo |= _imported_lakehouse_modules(source) - seen
    imported = {_module_file(m).relative_to(OURS[m.split(".")[0]]).as_posix() for m in seen}
    names = set(zipfile.ZipFile(io.BytesIO(glue_artifacts.lakehouse_zip())).namelist())

    assert names == imported, (sorted(names - imported), sorted(imported - names))
    assert glue_artifacts.main(["--list"]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(names)
