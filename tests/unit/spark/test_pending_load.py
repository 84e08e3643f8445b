"""A full load that committed its rows and never its facts (lakehouse.apply.pending_load), then other commits
before the next full load: the table stays pending and is told, and the next load ends equal to the source,
no change applied twice or dropped."""

from __future__ import annotations

import argparse
import logging
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from lake_contracts.run_report import RunReport
from lakehouse.apply import single_pass_load
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.pending_load import LOAD_PENDING_SINCE, pending_load
from lakehouse.io.iceberg import LOAD_DONE, iceberg_table, table_properties
from lakehouse.jobs.arguments import finish
from lakehouse.maintenance.inspect import inspect_table
from lakehouse.maintenance.options import MaintenanceOptions
from lakehouse.maintenance.run import _expiry_cutoffs
from lakehouse.reconcile.run import empty_clean_table

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

CONTACT, NOTE = "crm.contact", "crm.note"
COLUMNS = ["id", "name"]
SOURCE_TYPES = [("id", "int"), ("name", "varchar(40)")]
SCHEMA = schema_of({CONTACT: (["id"], SOURCE_TYPES), NOTE: ([], SOURCE_TYPES)})


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms", parquet_types={"id": pa.int32(), "name": pa.string()})


def _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, table: str):
    def crash(*_args, **_kwargs):
        raise RuntimeError("the driver died between the two commits")

    with monkeypatch.context() as patched:
        patched.setattr(single_pass_load, "commit_load_facts", crash)
        return full_load(spark, lake_config, SCHEMA, str(dms.root), tables=[table])


def _loaded_and_not_pending(spark, table: str) -> bool:
    properties = table_properties(spark, table)
    return (
        LOAD_DONE in properties
        and LOAD_PENDING_SINCE not in properties
        and pending_load(spark, table) is None
    )


def test_a_pending_table_compacted_before_the_next_load_is_still_pending_and_loaded_as_new(
    spark, lake_config, dms, monkeypatch
):
    """Given a table without a primary key whose full load (two LOAD files DMS stamped with two sequences)
    crashed between its rows and its facts, the crashed run's report naming it pending,
    When a compaction rewrites its files (a newest snapshot without the pending mark) and the full load runs
    again,
    Then the table was still pending (its rows unchanged since) and the load replaces it as new: every row
    once (merging it as a reload would keep its own rows newer than the floor beside the LOAD rows), the
    table loaded, its report naming no pending load."""
    dms.load(NOTE, COLUMNS, [(1, "a"), (2, "b")], snapshot_seq=5)
    dms.load(NOTE, COLUMNS, [(3, "c")], counter=2, snapshot_seq=7)
    table = lake_config.clean_table("crm_note")
    crashed = _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, NOTE)
    assert not crashed.ok
    assert [(p["table"], p["rows_changed_since"]) for p in crashed.pending_loads] == [(NOTE, False)]
    assert crashed.pending_loads[0]["pending_seconds"] >= 0

    spark.sql(
        f"CALL {lake_config.catalog_name}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
        "options => map('rewrite-all', 'true'))"
    )
    assert iceberg_table(spark, table).currentSnapshot().operation() == "replace"
    compacted = pending_load(spark, table)
    assert compacted is not None and not compacted.rows_changed_since

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), tables=[NOTE])

    assert report.ok, report.failed
    assert rows_of(spark, table, COLUMNS) == [(1, "a"), (2, "b"), (3, "c")]
    assert _loaded_and_not_pending(spark, table)
    assert report.pending_loads == []


def test_cdc_applied_to_a_pending_table_is_kept_by_the_next_load(spark, lake_config, dms, monkeypatch):
    """Given a table whose full load (DMS's snapshot at sequence 10) crashed between its rows and its facts,
    When a CDC batch applies to it (an update, a delete, an insert, all newer than the load, and an insert
    older than the load of a key the load does not hold), then the full load runs again,
    Then the CDC run's report names the table pending with rows changed since; CDC ignored the change the
    load's floor rules out, as it would once the table is loaded; and the next load merges the pending rows
    as a reload does rather than replacing them: each change applied once, none lost (the ledger will never
    apply that batch again), the table loaded and no longer pending."""
    dms.load(CONTACT, COLUMNS, [(1, "a"), (2, "b"), (3, "c")], snapshot_seq=10)
    table = lake_config.clean_table("crm_contact")
    assert not _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, CONTACT).ok
    change = dms.cdc(
        CONTACT,
        COLUMNS,
        [("U", (2, "two")), ("D", (3, "c")), ("I", (4, "four")), ("I", (9, "old"))],
        seqs=[11, 12, 13, 3],
    )

    applied = apply_cdc(spark, lake_config, SCHEMA, manifest(change))

    assert applied.ok, applied.failed
    assert applied.totals()["ignored_older"] == 1
    assert [(p["table"], p["rows_changed_since"]) for p in applied.pending_loads] == [(CONTACT, True)]
    assert rows_of(spark, table, COLUMNS) == [(1, "a"), (2, "two"), (4, "four")]

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), tables=[CONTACT])

    assert report.ok, report.failed
    assert rows_of(spark, table, COLUMNS) == [(1, "a"), (2, "two"), (4, "four")]
    assert _loaded_and_not_pending(spark, table)
    assert report.pending_loads == []
    again = apply_cdc(spark, lake_config, SCHEMA, manifest(change, run_id="redelivered"))
    assert again.ok and again.totals()["skipped_already_applied"] == 1
    assert rows_of(spark, table, COLUMNS) == [(1, "a"), (2, "two"), (4, "four")]


def test_rows_appended_to_a_pending_table_without_a_key_are_kept_once_by_the_next_load(
    spark, lake_config, dms, monkeypatch
):
    """Given a table without a primary key whose full load (two LOAD files DMS stamped with sequences 5 and 7)
    crashed between its rows and its facts, twice (the first attempt's snapshot older, out of the lineage),
    When a CDC batch appends a row to it (sequence 8), maintenance's expiry takes every snapshot it may
    (retention 0, one kept), and the full load runs again,
    Then the pending rows' snapshot outlived the expiry (the older attempt's did not), and the load merges what was appended since with
    the LOAD rows: every LOAD row once (not also the pending copy of those newer than the floor) and the
    appended row once."""
    dms.load(NOTE, COLUMNS, [(1, "a"), (2, "b")], snapshot_seq=5)
    dms.load(NOTE, COLUMNS, [(3, "c")], counter=2, snapshot_seq=7)
    table = lake_config.clean_table("crm_note")
    assert not _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, NOTE).ok
    first = iceberg_table(spark, table).currentSnapshot().snapshotId()
    assert not _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, NOTE).ok
    change = dms.cdc(NOTE, COLUMNS, [("I", (4, "d"))], seqs=[8])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(change)).ok
    pending = pending_load(spark, table)
    assert pending is not None and pending.snapshot_id is not None
    expire_all = MaintenanceOptions(
        snapshot_retention_hours=0, retain_last=1, expire_every_hours=0, remove_orphans=False
    )
    moment = datetime.utcnow() + timedelta(minutes=1)
    states = {table: inspect_table(spark, table, expire_all)}
    cutoff = _expiry_cutoffs(spark, lake_config, [], states, expire_all, moment)[table]
    # what maintenance's expire_snapshots procedure does, through the Iceberg API (no Spark job)
    older_than = int(cutoff.replace(tzinfo=UTC).timestamp() * 1000)
    iceberg_table(spark, table).expireSnapshots().expireOlderThan(older_than).retainLast(1).commit()
    assert iceberg_table(spark, table).snapshot(pending.snapshot_id) is not None
    assert iceberg_table(spark, table).snapshot(first) is None

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), tables=[NOTE])

    assert report.ok, report.failed
    assert rows_of(spark, table, COLUMNS) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert _loaded_and_not_pending(spark, table)


def test_a_pending_table_the_reconcile_empties_is_loaded_and_the_next_load_leaves_it_empty(
    spark, lake_config, dms, monkeypatch
):
    """Given a table whose full load crashed between its rows and its facts,
    When the reconcile empties it (its source TRUNCATEd, which DMS does not replicate) and the full load runs
    again,
    Then the emptying settled it as a reload with no LOAD rows would: not pending any more (its mark gone,
    a replace keeping properties), and the next load leaves it empty rather than loading the old LOAD rows
    back, its report naming no pending load."""
    dms.load(CONTACT, COLUMNS, [(1, "a"), (2, "b")], snapshot_seq=10)
    table = lake_config.clean_table("crm_contact")
    assert not _crash_between_rows_and_facts(spark, lake_config, dms, monkeypatch, CONTACT).ok

    empty_clean_table(spark, lake_config, SCHEMA.tables[CONTACT], datetime.utcnow(), "reconcile-1")

    assert rows_of(spark, table, COLUMNS) == []
    assert LOAD_PENDING_SINCE not in table_properties(spark, table)
    assert pending_load(spark, table) is None
    report = full_load(spark, lake_config, SCHEMA, str(dms.root), tables=[CONTACT])
    assert report.ok, report.failed
    assert report.pending_loads == []
    assert rows_of(spark, table, COLUMNS) == []


def test_the_jobs_summary_warns_of_each_table_left_pending(base_config, caplog):
    """Given a run report naming a table whose full load was left pending,
    When the job finishes with it,
    Then its log warns, naming the table, since when, and the full load that cures it; the run itself is
    not failed by it (the table's own error, if any, does that)."""
    report = RunReport(
        "r1",
        "cdc",
        pending_loads=[
            {"table": CONTACT, "pending_since": "2026-11-30T01:00:00+00:00", "pending_seconds": 60}
        ],
    )

    with caplog.at_level(logging.WARNING, logger="lakehouse.jobs.arguments"):
        code = finish(report, argparse.Namespace(report_uri=None), base_config)

    assert code == 0
    [warning] = [r.getMessage() for r in caplog.records if CONTACT in r.getMessage()]
    assert "2026-11-30T01:00:00+00:00 and never its facts" in warning
    assert f"--tables {CONTACT}" in warning
