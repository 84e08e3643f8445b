"""The models a stack's refine job reads are the folder last published: publishing again (the local stack's
fixed layout, `python -m deploy.glue_artifacts`) adds a new model and deletes a removed one."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from deploy import glue_artifacts
from tests.offline_aws import offline_aws

BUCKET = "local-artifacts"
MODELS_PREFIX = f"{glue_artifacts.FIXED_CODE_PREFIX}/models/"


def _published_models(s3) -> dict[str, str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=MODELS_PREFIX).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().decode() for o in listed}


def test_publishing_again_adds_a_new_model_and_deletes_a_removed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a stack whose job code was published with the models a and b, When the user removes b, edits a,
    adds c and the code is published again, Then the models prefix holds exactly a (edited) and c, and the
    job code beside it is still there."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "a.sql").write_text("SELECT 1 AS x FROM {{ source('t') }}")
    (folder / "b.sql").write_text("SELECT 2 AS x FROM {{ source('t') }}")
    with offline_aws(monkeypatch):
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        glue_artifacts.upload_glue_artifacts(s3, BUCKET, iceberg_jar=False, models=folder)
        first = _published_models(s3)

        (folder / "b.sql").unlink()
        (folder / "a.sql").write_text("SELECT 3 AS x FROM {{ source('t') }}")
        (folder / "c.sql").write_text("SELECT 4 AS x FROM {{ source('t') }}")
        glue_artifacts.upload_glue_artifacts(s3, BUCKET, iceberg_jar=False, models=folder)

        assert first == {
            f"{MODELS_PREFIX}a.sql": "SELECT 1 AS x FROM {{ source('t') }}",
            f"{MODELS_PREFIX}b.sql": "SELECT 2 AS x FROM {{ source('t') }}",
        }
        assert _published_models(s3) == {
            f"{MODELS_PREFIX}a.sql": "SELECT 3 AS x FROM {{ source('t') }}",
            f"{MODELS_PREFIX}c.sql": "SELECT 4 AS x FROM {{ source('t') }}",
        }
        code = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{glue_artifacts.FIXED_CODE_PREFIX}/lib/")
        assert [o["Key"] for o in code["Contents"]] == [
            f"{glue_artifacts.FIXED_CODE_PREFIX}/lib/lakehouse.zip"
        ]
