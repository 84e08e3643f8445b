"""Job configuration: where the catalog and zones are. Configuration, not code."""

from __future__ import annotations

import argparse
import re
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
    applied_files_table: str = "dms_applied_files"
    tombstone_table: str = "dms_tombstones"
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


# Glue passes its own job parameters to the script too (`--JOB_ID`, `--TempDir`, `--job-bookmark-option`,
# `--enable-metrics`, …): hyphenated or with capitals, unlike ours (`--snake_case`); and these two.
GLUE_OWN_LOWERCASE = {"conf", "class"}
_OURS = re.compile(r"^--[a-z0-9_]+$")
_DATABASE = re.compile(r"^[a-z0-9_]+$")


def add_lake_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every job takes (docs/CONTRACTS.md)."""
    parser.add_argument(
        "--catalog_type",
        choices=["glue", "hadoop"],
        default="hadoop",
        help="glue: the AWS Glue Data Catalog with S3FileIO (as on AWS); hadoop: a local warehouse folder",
    )
    parser.add_argument("--catalog_name", default="lake", help="the Spark catalog the tables live under")
    parser.add_argument(
        "--warehouse",
        default="var/warehouse",
        help="warehouse location (s3://<clean bucket>/warehouse/ on AWS)",
    )
    parser.add_argument("--clean_database", default="clean", help="namespace of the clean zone")
    parser.add_argument("--refined_database", default="refined", help="namespace of the refined zone")
    parser.add_argument(
        "--schema_file", help="the schema file (python -m tools.schema_gen): columns, types, primary keys"
    )
    parser.add_argument(
        "--s3_endpoint_url", help="a local S3 emulator's endpoint: s3:// inputs are staged through boto3"
    )
    parser.add_argument("--staging_dir", default="var/staging", help="where staged S3 inputs go (local runs)")
    parser.add_argument("--shuffle_partitions", type=int, default=4, help="spark.sql.shuffle.partitions")


def parse_job_arguments(
    argv: Sequence[str], configure: argparse.ArgumentParser | None = None
) -> tuple[LakeConfig, argparse.Namespace]:
    """Parse `--name value` job arguments. Glue's own parameters are passed over; an argument that looks
    like ours (`--snake_case`) but isn't one is an error (a typo must not run with a default)."""
    parser = configure or argparse.ArgumentParser()
    add_lake_arguments(parser)
    args, unknown = parser.parse_known_args(list(argv))
    mistyped = [
        a
        for a in unknown
        if _OURS.match(a.split("=", 1)[0]) and a.split("=", 1)[0][2:] not in GLUE_OWN_LOWERCASE
    ]
    if mistyped:
        parser.error(f"unrecognized arguments: {' '.join(mistyped)} (see --help)")
    for name in ("clean_database", "refined_database"):
        if not _DATABASE.match(getattr(args, name)):
            parser.error(
                f"--{name} {getattr(args, name)!r}: lower-case letters, digits and _ only (Glue, Athena)"
            )
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
