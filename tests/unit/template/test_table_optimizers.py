"""deploy/table_optimizers.py: Glue's managed optimizers on every Iceberg table, from the stack's settings."""

from __future__ import annotations

from typing import Any

import pytest

from deploy import table_optimizers

ROLE = "arn:aws:iam::123456789012:role/dev-table-optimizer"


class AlreadyExistsError(Exception):
    pass


class EntityNotFoundError(Exception):
    pass


class FakeGlue:
    """The Glue calls the script makes (moto has no table optimizers)."""

    class exceptions:
        AlreadyExistsException = AlreadyExistsError
        EntityNotFoundException = EntityNotFoundError

    def __init__(self, tables: dict[str, list[dict[str, Any]]], existing: set[tuple[str, str, str]]) -> None:
        self.tables, self.optimizers = tables, {k: {} for k in existing}
        self.calls: list[tuple[str, str, str, str]] = []

    def get_paginator(self, name: str) -> Any:
        assert name == "get_tables"
        tables = self.tables

        class Pages:
            def paginate(self, DatabaseName: str) -> list[dict[str, Any]]:
                return [{"TableList": tables.get(DatabaseName, [])}]

        return Pages()

    def create_table_optimizer(self, **request: Any) -> None:
        key = (request["DatabaseName"], request["TableName"], request["Type"])
        self.calls.append(("create", *key))
        if key in self.optimizers:
            raise AlreadyExistsError(key)
        self.optimizers[key] = request["TableOptimizerConfiguration"]

    def update_table_optimizer(self, **request: Any) -> None:
        key = (request["DatabaseName"], request["TableName"], request["Type"])
        self.calls.append(("update", *key))
        self.optimizers[key] = request["TableOptimizerConfiguration"]

    def delete_table_optimizer(self, **request: Any) -> None:
        key = (request["DatabaseName"], request["TableName"], request["Type"])
        if key not in self.optimizers:
            raise EntityNotFoundError(key)
        del self.optimizers[key]


def _table(name: str, kind: str = "ICEBERG") -> dict[str, Any]:
    return {"Name": name, "Parameters": {"table_type": kind}}


def test_every_iceberg_table_gets_the_three_optimizers_configured_from_the_stack() -> None:
    """Given a clean and a refined database with Iceberg tables (and one that is not Iceberg), and a
    compaction optimizer already on one table, When the optimizers are enabled, Then every Iceberg table
    has compaction, retention and orphan-file deletion, run by the stack's role, compaction choosing files by the
    stack's thresholds (not Glue's default of one delete file, which rewrites every file a batch touched), with
    retention and orphan age in whole days rounded up from the stack's hours, the existing one updated rather
    than duplicated."""
    glue = FakeGlue(
        {
            "dev_clean": [_table("customer"), _table("legacy_view", "VIRTUAL_VIEW")],
            "dev_refined": [_table("sales_enriched")],
        },
        existing={("dev_clean", "customer", "compaction")},
    )
    settings = table_optimizers.OptimizerSettings.from_stack(
        {
            "SnapshotRetentionHours": "30",
            "RetainLastSnapshots": "5",
            "OrphanFileAgeHours": "72",
            "CompactionMinInputFiles": "5",
            "DeleteFileThreshold": "100",
        },
        {"TableOptimizerRoleArn": ROLE},
    )
    tables = table_optimizers.iceberg_tables(glue, ["dev_clean", "dev_refined"])
    done = table_optimizers.enable(glue, "123456789012", tables, settings)

    assert tables == [("dev_clean", "customer"), ("dev_refined", "sales_enriched")]
    assert sorted(glue.optimizers) == sorted(
        (db, t, kind) for db, t in tables for kind in ("compaction", "retention", "orphan_file_deletion")
    )
    assert all(c["roleArn"] == ROLE and c["enabled"] for c in glue.optimizers.values())
    retention = glue.optimizers[("dev_clean", "customer", "retention")]["retentionConfiguration"][
        "icebergConfiguration"
    ]
    assert retention == {
        "snapshotRetentionPeriodInDays": 2,
        "numberOfSnapshotsToRetain": 5,
        "cleanExpiredFiles": True,
    }
    compaction = glue.optimizers[("dev_clean", "customer", "compaction")]["compactionConfiguration"]
    assert compaction == {
        "icebergConfiguration": {"strategy": "binpack", "minInputFiles": 5, "deleteFileThreshold": 100}
    }
    orphans = glue.optimizers[("dev_refined", "sales_enriched", "orphan_file_deletion")]
    assert (
        orphans["orphanFileDeletionConfiguration"]["icebergConfiguration"]["orphanFileRetentionPeriodInDays"]
        == 3
    )
    assert "updated compaction on dev_clean.customer" in done and len(done) == 6


def test_disable_removes_them_and_a_stack_without_the_role_is_refused() -> None:
    glue = FakeGlue({"dev_clean": [_table("customer")]}, existing={("dev_clean", "customer", "compaction")})
    done = table_optimizers.disable(glue, "123456789012", [("dev_clean", "customer")])
    assert glue.optimizers == {} and done == ["deleted compaction on dev_clean.customer"]
    with pytest.raises(SystemExit, match="MaintenanceMode=glue-optimizers"):
        table_optimizers.OptimizerSettings.from_stack({}, {})
