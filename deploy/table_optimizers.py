"""Turn the Glue Data Catalog's managed table optimizers on (or off) for every table of the lake, when the
stack runs with `MaintenanceMode=glue-optimizers` (docs/DEPLOY.md, "Table maintenance"):

    python -m deploy.table_optimizers --stack-name dms-iceberg-lake            # enable, or update
    python -m deploy.table_optimizers --stack-name dms-iceberg-lake --disable  # back to the maintenance job

Each Iceberg table of the clean, row-history and refined databases gets compaction, snapshot retention and orphan-file
deletion, configured from the stack's own maintenance parameters (CompactionMinInputFiles, DeleteFileThreshold,
SnapshotRetentionHours, RetainLastSnapshots, OrphanFileAgeHours) and run with the stack's TableOptimizerRole. Run it
again after new tables appear (the CDC job creates a table the first time DMS sends one).

The optimizers compact while CDC runs commit. When both touch the same data files, whichever commits second loses
Iceberg's validation (a retry of the metadata swap does not help): a CDC MERGE that loses is planned again from its
batch (lakehouse.io.commit_conflicts), a compaction that loses gives its group up, and Glue counts a failed run.
Glue's own defaults rewrite a data file once it has one delete file (deleteFileThreshold 1): every file a CDC batch
touched, the whole table under spread changes, each run racing the next batch. The stack's DeleteFileThreshold
(100) leaves a file to its deletes until many batches touched it, and CompactionMinInputFiles (5) compacts a
partition's small files once a few accumulated: compaction then touches few files CDC is writing to, and loses
rarely.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

OPTIMIZER_TYPES = ("compaction", "retention", "orphan_file_deletion")


@dataclass(frozen=True)
class OptimizerSettings:
    role_arn: str
    min_input_files: int = 5
    delete_file_threshold: int = 100
    snapshot_retention_hours: float = 72
    retain_last: int = 20
    orphan_file_age_hours: float = 72

    @classmethod
    def from_stack(cls, parameters: dict[str, str], outputs: dict[str, str]) -> OptimizerSettings:
        role = outputs.get("TableOptimizerRoleArn")
        if not role:
            raise SystemExit(
                "the stack has no TableOptimizerRoleArn output: deploy it with MaintenanceMode=glue-optimizers"
            )
        return cls(
            role_arn=role,
            min_input_files=int(parameters.get("CompactionMinInputFiles", 5)),
            delete_file_threshold=int(parameters.get("DeleteFileThreshold", 100)),
            snapshot_retention_hours=float(parameters.get("SnapshotRetentionHours", 72)),
            retain_last=int(parameters.get("RetainLastSnapshots", 20)),
            orphan_file_age_hours=float(parameters.get("OrphanFileAgeHours", 72)),
        )

    def configuration(self, kind: str) -> dict[str, Any]:
        """The TableOptimizerConfiguration of one optimizer type (Glue counts retention in whole days)."""
        configuration: dict[str, Any] = {"roleArn": self.role_arn, "enabled": True}
        if kind == "compaction":
            configuration["compactionConfiguration"] = {
                "icebergConfiguration": {
                    "strategy": "binpack",
                    "minInputFiles": self.min_input_files,
                    "deleteFileThreshold": self.delete_file_threshold,
                }
            }
        elif kind == "retention":
            configuration["retentionConfiguration"] = {
                "icebergConfiguration": {
                    "snapshotRetentionPeriodInDays": max(1, math.ceil(self.snapshot_retention_hours / 24)),
                    "numberOfSnapshotsToRetain": self.retain_last,
                    "cleanExpiredFiles": True,
                }
            }
        elif kind == "orphan_file_deletion":
            configuration["orphanFileDeletionConfiguration"] = {
                "icebergConfiguration": {
                    "orphanFileRetentionPeriodInDays": max(1, math.ceil(self.orphan_file_age_hours / 24))
                }
            }
        return configuration


def iceberg_tables(glue: Any, databases: Iterable[str]) -> list[tuple[str, str]]:
    """(database, table) of every Iceberg table in the databases."""
    found = []
    for database in databases:
        for page in glue.get_paginator("get_tables").paginate(DatabaseName=database):
            for table in page["TableList"]:
                if str(table.get("Parameters", {}).get("table_type", "")).upper() == "ICEBERG":
                    found.append((database, table["Name"]))
    return sorted(found)


def enable(
    glue: Any, catalog_id: str, tables: list[tuple[str, str]], settings: OptimizerSettings
) -> list[str]:
    """Create each optimizer, or update it when it exists; returns what was done, a line each."""
    done = []
    for database, table in tables:
        for kind in OPTIMIZER_TYPES:
            request = {
                "CatalogId": catalog_id,
                "DatabaseName": database,
                "TableName": table,
                "Type": kind,
                "TableOptimizerConfiguration": settings.configuration(kind),
            }
            try:
                glue.create_table_optimizer(**request)
                done.append(f"created {kind} on {database}.{table}")
            except glue.exceptions.AlreadyExistsException:
                glue.update_table_optimizer(**request)
                done.append(f"updated {kind} on {database}.{table}")
    return done


def disable(glue: Any, catalog_id: str, tables: list[tuple[str, str]]) -> list[str]:
    done = []
    for database, table in tables:
        for kind in OPTIMIZER_TYPES:
            try:
                glue.delete_table_optimizer(
                    CatalogId=catalog_id, DatabaseName=database, TableName=table, Type=kind
                )
                done.append(f"deleted {kind} on {database}.{table}")
            except glue.exceptions.EntityNotFoundException:
                pass
    return done


def main(argv: Sequence[str] | None = None) -> int:
    import boto3

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack-name", default="dms-iceberg-lake")
    parser.add_argument(
        "--disable", action="store_true", help="delete the optimizers (back to MaintenanceMode=job)"
    )
    args = parser.parse_args(argv)
    stack = boto3.client("cloudformation").describe_stacks(StackName=args.stack_name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    catalog_id = boto3.client("sts").get_caller_identity()["Account"]
    glue = boto3.client("glue")
    # the histories' and the records' databases since they exist: a stack deployed before has no such output
    databases = ("CleanDatabaseName", "HistoryDatabaseName", "RecordsDatabaseName", "RefinedDatabaseName")
    tables = iceberg_tables(glue, [outputs[name] for name in databases if name in outputs])
    if args.disable:
        lines = disable(glue, catalog_id, tables)
    else:
        lines = enable(glue, catalog_id, tables, OptimizerSettings.from_stack(parameters, outputs))
    print("\n".join(lines) or "no Iceberg table yet: run this again once the jobs created them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
