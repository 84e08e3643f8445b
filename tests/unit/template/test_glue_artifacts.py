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
    Then the four entry scripts, lakehouse.zip, the tested Iceberg runtime jar and config/schema.json are in
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
        "glue/lib/lakehouse.zip",
        "glue/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
        "config/schema.json",
    }
    jar = stack.head_object(Bucket=BUCKET, Key="glue/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar")
    assert jar["ContentLength"] == glue_artifacts.iceberg_runtime_jar().stat().st_size
    archive = zipfile.ZipFile(
        io.BytesIO(stack.get_object(Bucket=BUCKET, Key="glue/lib/lakehouse.zip")["Body"].read())
    )
    names = archive.namelist()
    assert "lakehouse/__init__.py" in names and all(n.startswith("lakehouse/") for n in names)
    assert not any("__pycache__" in n for n in names)
    assert stack.get_object(Bucket=BUCKET, Key="config/schema.json")["Body"].read() == schema.read_bytes()
    assert f"s3://{BUCKET}/glue/lib/lakehouse.zip" in capsys.readouterr().out
