"""The local run's refined check (make demo's last verdict) checks the models the stack published, which the
deployed refine job reads: the example models after a deploy, a user's folder after it was published again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest

from deploy import glue_artifacts
from localaws.pipeline_checks import LakeChecks
from localaws.pipeline_stack import AppHandles
from tests.offline_aws import offline_aws

BUCKET = "demo-artifacts"


def _checks() -> LakeChecks:
    app = AppHandles("lake-demo", "raw", BUCKET, "arn:sm", "demo_clean", "cdc", "full-load")
    deployed = SimpleNamespace(app=app)
    return LakeChecks(deployed, sources=None, warehouse=Path("unused"), aws=boto3.client)


def test_the_refined_check_reads_the_models_the_stack_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the local stack's job code published as its deploy publishes it, When the refined check lists the
    models to check, Then they are the example models, in refresh order (sales_enriched before the aggregates
    that ref it); Given a user's folder published again (one example removed, a model added), Then they are
    that folder's models."""
    with offline_aws(monkeypatch):
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        glue_artifacts.upload_glue_artifacts(s3, BUCKET, iceberg_jar=False)
        deployed = _checks().deployed_models()

        users = tmp_path / "models"
        users.mkdir()
        (users / "sales_enriched.sql").write_bytes(
            (glue_artifacts.MODELS / "sales_enriched.sql").read_bytes()
        )
        (users / "orders_by_day.sql").write_text(
            "{{ config(unique_key='day') }}\nSELECT sold_date AS day, count(*) AS lines\n"
            "FROM {{ ref('sales_enriched') }} GROUP BY sold_date\n"
        )
        glue_artifacts.upload_glue_artifacts(s3, BUCKET, iceberg_jar=False, models=users)
        republished = _checks().deployed_models()

    assert [m.name for m in deployed.models] == [
        "sales_enriched",
        "daily_revenue_by_category",
        "daily_revenue_by_state",
    ]
    assert not deployed.errors
    assert [m.name for m in republished.models] == ["sales_enriched", "orders_by_day"]
    assert not republished.errors
