"""Job configuration: where the catalog and zones are. Configuration, not code."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

CatalogType = Literal["glue", "hadoop"]


@dataclass(frozen=True)
class LakeConfig:
    """Everything a job needs to find its catalog, its tables and its inputs."""

    catalog_type: CatalogType = "hadoop"
    catalog_name: str = "lake"
    warehouse: str = "var/warehouse"
    clean_database: str = "clean"
    refined_database: str = "refined"
    schema_file: str | None = None
    quarantine_table: str = "dms_quarantine"
    s3_endpoint_url: str | None = None
    staging_dir: str = "var/staging"
    shuffle_partitions: int = 4
    extra: dict[str, str] = field(default_factory=dict)

    def table(self, database: str, name: str) -> str:
        return f"{self.catalog_name}.{database}.{name}"

    def clean_table(self, name: str) -> str:
        return self.table(self.clean_database, name)

    @property
    def quarantine(self) -> str:
        return self.clean_table(self.quarantine_table)


def add_lake_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every job takes (docs/CONTRACTS.md)."""
    parser.add_argument("--catalog_type", choices=["glue", "hadoop"], default="hadoop")
    parser.add_argument("--catalog_name", default="lake")
    parser.add_argument("--warehouse", default="var/warehouse")
    parser.add_argument("--clean_database", default="clean")
    parser.add_argument("--refined_database", default="refined")
    parser.add_argument("--schema_file")
    parser.add_argument("--s3_endpoint_url")
    parser.add_argument("--staging_dir", default="var/staging")
    parser.add_argument("--shuffle_partitions", type=int, default=4)


def parse_job_arguments(
    argv: Sequence[str], configure: argparse.ArgumentParser | None = None
) -> tuple[LakeConfig, argparse.Namespace]:
    """Parse `--name value` job arguments. Glue adds its own (`--JOB_ID`, `--job-bookmark-option`, …):
    unknown ones are ignored, as Glue's getResolvedOptions would."""
    parser = configure or argparse.ArgumentParser()
    add_lake_arguments(parser)
    args, _unknown = parser.parse_known_args(list(argv))
    config = LakeConfig(
        catalog_type=args.catalog_type,
        catalog_name=args.catalog_name,
        warehouse=args.warehouse,
        clean_database=args.clean_database,
        refined_database=args.refined_database,
        schema_file=args.schema_file,
        s3_endpoint_url=args.s3_endpoint_url,
        staging_dir=args.staging_dir,
        shuffle_partitions=args.shuffle_partitions,
    )
    return config, args
