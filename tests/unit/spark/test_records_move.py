"""A lake written by the releases that kept the pipeline's records in the clean namespace moves them into
the records namespace once, on a job's start, without losing a row; a source table named like a record is a
replica and never moves."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.audit.freshness import after_cdc_run
from lakehouse.base.config import LakeConfig
from lakehouse.io.iceberg import append_rows, create_table
from lakehouse.jobs.cdc import main as cdc_main
from lakehouse.maintenance.records_move import is_replica, move_records
from lakehouse.reconcile.report import ReconcileReport, TableResult, write_divergence

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

COLUMNS = ["id", "v"]
BODY = (["id"], [("id", "int"), ("v", "varchar(10)")])
ORDERS = "shop.orders"
SCHEMA = schema_of({ORDERS: BODY})


@dataclass(frozen=True)
class TodaysLayout(LakeConfig):
    """The layout of the releases before the records namespace: every record beside the replicas."""

    @property
    def records_database(self) -> str:
        return self.clean_database


def every_row(spark, table: str) -> list[tuple]:
    return rows_of(spark, table, spark.table(table).columns)


def test_a_replica_is_told_from_a_record_by_its_recorded_source_or_its_metadata_columns() -> None:
    """Given tables named like records, When judged, Then one recording a source table (property, or the
    comment of older releases) or carrying the replicas' metadata columns is a replica; a ledger is not."""
    ledger = ["source_table", "file_name", "file_uri", "run_id", "snapshot_id", "applied_at"]
    assert is_replica({"dms.source-table": "dms.applied_files"}, ["id"])
    assert is_replica({"comment": "DMS replica of dms.applied_files"}, ["id"])
    assert is_replica({}, ["source_table", "DMS_COMMIT_TS", "dms_change_seq"])
    assert not is_replica({"comment": "CDC files applied to each clean table (exactly once)"}, ledger)


def test_a_lake_of_todays_layout_moves_its_records_once_without_losing_a_row(spark, lake_config, tmp_path):
    """Given a lake written with the records in the clean namespace (a full load; a CDC run with an update,
    a delete and a bad record; freshness, a consistent point and a divergence recorded), and a move stopped
    half-way (the new ledger already holds one of the old ledger's rows),
    When the CDC job runs a new file and a replay of the applied one,
    Then every record is in the records namespace holding every old row once plus the run's own, the old
    tables are gone from the clean namespace, the replayed file is skipped (the ledger and tombstones came
    along), and the replica is untouched by the move; a second move finds nothing."""
    old = TodaysLayout(**{f.name: getattr(lake_config, f.name) for f in fields(LakeConfig)})
    dms = DmsWriter(tmp_path / "raw")
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    dms.load(ORDERS, COLUMNS, [(1, "a"), (2, "b"), (3, "c")])
    assert full_load(spark, old, SCHEMA, str(dms.root)).ok
    first = dms.cdc(ORDERS, COLUMNS, [("U", (1, "A")), ("D", (2, None)), ("X", (9, "bad"))])
    assert apply_cdc(spark, old, SCHEMA, manifest(first, run_id="cdc-1")).ok
    assert after_cdc_run(spark, old, SCHEMA, [first], "cdc-1", str(dms.root), 0)["error"] is None
    diverged = TableResult(ORDERS, samples={"missing": [{"id": 7}]})
    assert write_divergence(
        spark, old, ReconcileReport("reconcile-1", tables=[diverged]), datetime(2026, 1, 1)
    )
    before = {name: every_row(spark, old.clean_table(name)) for name in lake_config.record_names}
    assert all(before.values()), before
    ledger_columns = spark.table(old.ledger).columns
    create_table(spark, lake_config.ledger, spark.table(old.ledger).schema)
    append_rows(spark, lake_config.ledger, spark.table(old.ledger).limit(1), {})

    second = dms.cdc(ORDERS, COLUMNS, [("I", (4, "d"))])
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps(manifest(second, first, run_id="cdc-2").to_dict()))
    common = ["--warehouse", lake_config.warehouse, "--clean_database", lake_config.clean_database]
    report = tmp_path / "report.json"
    arguments = ["--schema_file", str(schema_file), "--manifest", str(batch), "--report_uri", str(report)]
    assert cdc_main([*common, *arguments]) == 0

    (table,) = json.loads(report.read_text())["tables"]
    assert (table["skipped_already_applied"], table["inserted_or_updated"]) == (1, 1)
    assert rows_of(spark, lake_config.clean_table("shop_orders")) == [(1, "A"), (3, "c"), (4, "d")]
    for name in lake_config.record_names:
        assert not spark.catalog.tableExists(lake_config.clean_table(name)), name
    ledger = every_row(spark, lake_config.ledger)
    assert [r for r in ledger if r[ledger_columns.index("run_id")] != "cdc-2"] == before["dms_applied_files"]
    assert [r[1] for r in ledger if r[ledger_columns.index("run_id")] == "cdc-2"] == [
        second.rsplit("/", 1)[1]
    ]
    for name in ("dms_tombstones", "dms_quarantine", "dms_divergence"):
        assert every_row(spark, lake_config.record_table(name)) == before[name], name
    points = every_row(spark, lake_config.consistent_points)
    assert all(row in points for row in before["consistent_points"])
    assert rows_of(spark, lake_config.freshness, ["source_table", "run_id"]) == [(ORDERS, "cdc-2")]
    assert move_records(spark, lake_config) == []


def test_a_source_table_named_like_a_record_is_never_moved(spark, lake_config, tmp_path):
    """Given the source tables `dms.applied_files` and `dms.divergence` loaded into the clean tables of those
    names (the records live in their own namespace), When a job starts (the move runs), Then nothing is
    moved and both replicas keep their rows."""
    dms = DmsWriter(tmp_path / "raw")
    schema = schema_of({"dms.applied_files": BODY, "dms.divergence": BODY})
    for name in ("dms.applied_files", "dms.divergence"):
        dms.load(name, COLUMNS, [(1, "a")])
    assert full_load(spark, lake_config, schema, str(dms.root)).ok
    assert move_records(spark, lake_config) == []
    for name in ("dms_applied_files", "dms_divergence"):
        assert rows_of(spark, lake_config.clean_table(name)) == [(1, "a")]
    assert rows_of(spark, lake_config.ledger) == []
