"""The checks of a local pipeline run and the reports it reads: the clean and refined zones against the source
database (row checksums, `tools.verify`) in a local Spark session over the warehouse the local Glue jobs write,
the quarantine table, and the CDC runs' reports in the artifacts bucket.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localaws import replication
from localaws.pipeline_sources import SourceServers
from localaws.pipeline_stack import AppHandles, DeployedStack

VERIFY_CATALOG = "local_glue"  # the demo's own Spark catalog name over the local Glue warehouse


class LakeChecks:
    """The run's view of its lake: one Spark session, kept for the run. Not thread-safe."""

    def __init__(
        self,
        deployed: DeployedStack,
        sources: SourceServers,
        warehouse: Path,
        aws: Callable[[str], Any],
    ) -> None:
        self.deployed = deployed
        self.sources = sources
        self.warehouse = warehouse
        self.aws = aws
        self._spark: Any = None

    @property
    def app(self) -> AppHandles | None:
        return self.deployed.app

    @property
    def refined_database(self) -> str:
        assert self.app is not None
        return self.app.outputs.get("RefinedDatabaseName") or self.app.clean_database.replace(
            "_clean", "_refined"
        )

    def lake_config(self) -> Any:
        """The demo's own view of the local warehouse (a hadoop catalog over the local Glue's folder)."""
        from lakehouse.base.config import LakeConfig

        assert self.app is not None
        return LakeConfig(
            catalog_name=VERIFY_CATALOG,
            warehouse=str(self.warehouse),
            clean_database=self.app.clean_database,
            refined_database=self.refined_database,
        )

    def spark(self) -> Any:
        """One local Spark session reading the warehouse the local Glue jobs write (kept for the run)."""
        from lakehouse.io.session import build_session

        if self._spark is None:
            self._spark = build_session(self.lake_config(), "verify-lake")
        for key, value in {
            f"spark.sql.catalog.{VERIFY_CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{VERIFY_CATALOG}.type": "hadoop",
            f"spark.sql.catalog.{VERIFY_CATALOG}.warehouse": self.warehouse.resolve().as_uri(),
            f"spark.sql.catalog.{VERIFY_CATALOG}.cache-enabled": "false",  # see other writers' commits
        }.items():
            self._spark.conf.set(key, value)
        return self._spark

    def verify(self) -> list[Any]:
        """Every clean table against its source table (row checksums); see tools.verify."""
        from lakehouse.base.schema import SchemaFile

        from tools.verify import check_all

        spark = self.spark()
        schema = SchemaFile.from_dict(replication.schema_document(self.sources.source_db))
        return check_all(spark, self.lake_config(), schema, self.sources.source_db)

    def verify_refined(self) -> list[Any]:
        """The refined table of each model the stack's refine job reads against the model's SQL over the source
        database (row checksums; tools.verify.check_refined)."""
        from tools.verify import check_refined

        return check_refined(self.spark(), self.lake_config(), self.sources.source_db, self.deployed_models())

    def deployed_models(self) -> Any:
        """The models published with the stack's job code (`<JobCodePrefix>/models/`, the local stack's fixed
        layout), parsed as the refine job parses them."""
        from lakehouse.refine.models import load_folder

        from deploy.glue_artifacts import FIXED_CODE_PREFIX

        assert self.app is not None
        s3, bucket = self.aws("s3"), self.app.artifacts_bucket
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{FIXED_CODE_PREFIX}/models/"
        )
        keys = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(".sql")]
        return load_folder(
            (key, s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")) for key in keys
        )

    def run_reports(self) -> list[dict[str, Any]]:
        """The CDC runs' reports (`manifests/reports/<run_id>.json`), oldest first."""
        assert self.app is not None
        s3 = self.aws("s3")
        reports = []
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.app.artifacts_bucket, Prefix="manifests/reports/"
        ):
            for item in page.get("Contents", []):
                report = json.loads(
                    s3.get_object(Bucket=self.app.artifacts_bucket, Key=item["Key"])["Body"].read()
                )
                if report.get("job") == "cdc":
                    reports.append(report)
        return sorted(reports, key=lambda r: r.get("run_id", ""))

    def quarantined(self) -> list[dict[str, Any]]:
        """Rows of the pipeline's quarantine table (file + line + reason of what was set aside)."""
        assert self.app is not None
        if self._spark is None:
            self.verify()
        table = self.lake_config().quarantine
        if not self._spark.catalog.tableExists(table):
            return []
        return [row.asDict() for row in self._spark.table(table).collect()]
