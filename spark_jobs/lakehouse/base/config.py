"""Job configuration: where the catalog and zones are, and where each of the pipeline's own records is.
Configuration, not code."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lakehouse.base.names import lake_namespaces, records_database

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
    # The pipeline's own records, each in the records namespace (records_database), never beside the replicas.
    quarantine_table: str = "dms_quarantine"
    applied_files_table: str = "dms_applied_files"
    tombstone_table: str = "dms_tombstones"
    freshness_table: str = "lake_freshness"
    points_table: str = "consistent_points"
    divergence_table: str = "dms_divergence"
    s3_endpoint_url: str | None = None
    staging_dir: str = "var/staging"
    shuffle_partitions: int = 0  # 0: derived from the cluster (shuffle_partitions_for)
    worker_type: str | None = None  # Glue's WorkerType of this job (a hint: Spark's own settings come first)
    number_of_workers: int | None = None  # Glue's NumberOfWorkers of this job, its driver's worker included
    extra: dict[str, str] = field(default_factory=dict)

    def table(self, database: str, name: str) -> str:
        return f"{self.catalog_name}.{database}.{name}"

    def clean_table(self, name: str) -> str:
        return self.table(self.clean_database, name)

    @property
    def records_database(self) -> str:
        return records_database(self.clean_database)

    def record_table(self, name: str) -> str:
        """One of the pipeline's own tables: in the records namespace, out of any source name's reach."""
        return self.table(self.records_database, name)

    @property
    def record_names(self) -> tuple[str, ...]:
        """The names of every table the pipeline keeps for itself (each in the records namespace)."""
        return (
            self.applied_files_table,
            self.tombstone_table,
            self.quarantine_table,
            self.freshness_table,
            self.points_table,
            self.divergence_table,
        )

    @property
    def ledger(self) -> str:
        return self.record_table(self.applied_files_table)

    @property
    def tombstones(self) -> str:
        return self.record_table(self.tombstone_table)

    @property
    def quarantine(self) -> str:
        return self.record_table(self.quarantine_table)

    @property
    def freshness(self) -> str:
        return self.record_table(self.freshness_table)

    @property
    def consistent_points(self) -> str:
        return self.record_table(self.points_table)

    @property
    def divergence(self) -> str:
        return self.record_table(self.divergence_table)


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
    parser.add_argument(
        "--shuffle_partitions",
        type=int,
        default=0,
        help="spark.sql.shuffle.partitions; 0 (default): twice the executor cores the job has (docs/DEPLOY.md)",
    )
    parser.add_argument(
        "--worker_type", help="the Glue job's WorkerType (G.1X, …): its cores if Spark does not say"
    )
    parser.add_argument(
        "--number_of_workers", type=int, help="the Glue job's NumberOfWorkers (driver included)"
    )


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
    namespaces = lake_namespaces(args.clean_database, args.refined_database)
    if len(set(namespaces.values())) < len(namespaces):
        parser.error(
            f"--refined_database {args.refined_database!r}: the lake's namespaces must differ "
            f"({', '.join(f'{role}: {name}' for role, name in namespaces.items())})"
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
        worker_type=args.worker_type,
        number_of_workers=args.number_of_workers,
    )
    if config.shuffle_partitions < 0:
        parser.error(f"--shuffle_partitions {config.shuffle_partitions}: 0 (derived) or a positive number")
    return config, args


# ---------------------------------------------------------------- parallelism from the cluster
# vCPUs of a Glue worker (AWS Glue guide, "AWS Glue worker types"): one Spark executor per worker, and one
# worker of NumberOfWorkers runs the driver.
GLUE_WORKER_VCPUS = {
    "G.1X": 4,
    "G.2X": 8,
    "G.4X": 16,
    "G.8X": 32,
    "G.12X": 48,
    "G.16X": 64,
    "R.1X": 4,
    "R.2X": 8,
}
# Shuffle partitions per executor core: Spark's tuning guide advises 2-3 tasks per core; adaptive execution
# then coalesces what is small (spark.sql.adaptive.advisoryPartitionSizeInBytes, session.TUNING), so a small
# batch runs a few tasks and a large one all the cores twice over. local[2] gets 4: what it always had.
TASKS_PER_CORE = 2
_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def executor_cores(
    conf: Mapping[str, str],
    worker_type: str | None = None,
    number_of_workers: int | None = None,
    local_cpus: int = 1,
) -> int | None:
    """The executor cores a job has, at most, from its Spark settings (what the engine gave it), else from the
    Glue job's worker type and count; None when neither says (then Spark's defaultParallelism is all we know).
    - `local[N]` N, `local[*]` the machine's CPUs (`local_cpus`), `local-cluster[E,C,M]` E x C;
    - dynamic allocation (Glue auto scaling, EMR Serverless): `spark.dynamicAllocation.maxExecutors` x
      `spark.executor.cores`; otherwise `spark.executor.instances` x `spark.executor.cores`;
    - Glue: (NumberOfWorkers - 1) x the worker type's vCPUs (one worker runs the driver)."""
    master = conf.get("spark.master", "").strip()
    if match := _LOCAL.match(master):
        return local_cpus if match[1] == "*" else int(match[1] or 1)
    if match := _LOCAL_CLUSTER.match(master):
        return int(match[1]) * int(match[2])
    cores = _positive(conf.get("spark.executor.cores"))
    if conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true":
        executors = _positive(conf.get("spark.dynamicAllocation.maxExecutors"))
    else:
        executors = _positive(conf.get("spark.executor.instances"))
    if cores and executors:
        return cores * executors
    if worker_type in GLUE_WORKER_VCPUS and number_of_workers:
        return GLUE_WORKER_VCPUS[worker_type] * max(1, number_of_workers - 1)
    return None


def _positive(value: str | None) -> int | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number >= 1 else None  # maxExecutors may be "infinity"


def shuffle_partitions_for(cores: int | None, default_parallelism: int, override: int = 0) -> int:
    """spark.sql.shuffle.partitions: `override` when set (> 0), else TASKS_PER_CORE per executor core, else
    (cores unknown) TASKS_PER_CORE x Spark's defaultParallelism; never fewer than 2."""
    if override > 0:
        return override
    return max(2, TASKS_PER_CORE * (cores if cores else default_parallelism))
