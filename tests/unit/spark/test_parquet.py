"""DMS Parquet output (DataFormat=parquet): the same contract and guarantees as CSV, on whole tables."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

CONTACT = "crm.contact"
COLUMNS = ["id", "name", "balance", "active", "born", "seen_at", "avatar", "score"]
SOURCE_TYPES = [
    ("id", "int"),
    ("name", "varchar(40)"),
    ("balance", "decimal(10,2)"),
    ("active", "boolean"),
    ("born", "date"),
    ("seen_at", "datetime(6)"),
    ("avatar", "varbinary(16)"),
    ("score", "double"),
]
SCHEMA = schema_of({CONTACT: (["id"], SOURCE_TYPES)})
# What DMS writes for those types (Qlik/DMS's Parquet mapping: INT4 → INT32, NUMERIC → DECIMAL, ...).
TYPES = {
    "id": pa.int32(),
    "name": pa.string(),
    "balance": pa.decimal128(10, 2),
    "active": pa.bool_(),
    "born": pa.date32(),
    "seen_at": pa.timestamp("us"),
    "avatar": pa.binary(),
    "score": pa.float64(),
}
SEEN = datetime(2026, 11, 22, 9, 30, 0, 123456)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms", parquet_types=dict(TYPES))


def contact(config) -> str:
    return config.clean_table("crm_contact")


def row(
    key, name, balance="1.00", active=True, born=date(1990, 2, 28), seen=SEEN, avatar=b"\xca\xfe", score=1.5
):
    return (key, name, Decimal(balance), active, born, seen, avatar, score)


def test_parquet_full_load_then_cdc_keeps_every_type_and_null_apart_from_text(spark, lake_config, dms):
    """Given Parquet LOAD files and a Parquet CDC file with every type, nulls, an empty string and the
    text "NULL" (a real surname: Parquet has real nulls, no CsvNullValue ambiguity),
    When loaded and applied,
    Then the table holds exactly those values."""
    dms.load(
        CONTACT, COLUMNS, [row(1, "NULL"), row(2, "", balance="0.00", avatar=b""), row(3, None, active=None)]
    )
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    change = dms.cdc(
        CONTACT,
        COLUMNS,
        [
            ("U", row(2, "two", balance="12345678.99", score=float("inf"))),
            ("D", row(3, None)),
            ("I", (4, "four", None, None, None, None, None, None)),
        ],
    )

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(change))

    assert report.ok, report.failed
    assert rows_of(spark, contact(lake_config), COLUMNS) == [
        (1, "NULL", Decimal("1.00"), True, date(1990, 2, 28), SEEN, bytearray(b"\xca\xfe"), 1.5),
        (
            2,
            "two",
            Decimal("12345678.99"),
            True,
            date(1990, 2, 28),
            SEEN,
            bytearray(b"\xca\xfe"),
            float("inf"),
        ),
        (4, "four", None, None, None, None, None, None),
    ]


def test_a_batch_mixing_csv_and_parquet_files_of_one_table_applies_in_order(spark, lake_config, tmp_path):
    """Given a table whose DMS endpoint switched from CSV (with CsvNullValue) to Parquet between two
    files of one batch, When the batch is applied, Then both files apply, the later one wins."""
    from lakehouse.apply.run import ApplyOptions
    from lakehouse.dms.reader import ReaderOptions

    from tools.dms_csv import CsvFormat

    root = tmp_path / "raw" / "dms"
    csv = DmsWriter(root, CsvFormat(csv_null_value="NULL"))
    parquet = DmsWriter(root, parquet_types=dict(TYPES))
    parquet._clock = csv._clock  # one clock: file names keep the order they are written in
    parquet._seq = csv._seq
    options = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))
    csv.load(CONTACT, COLUMNS, [row(1, "a"), row(2, "b")])
    assert full_load(spark, lake_config, SCHEMA, str(root), options=options).ok
    first = csv.cdc(CONTACT, COLUMNS, [("U", row(1, "csv")), ("U", row(2, None, balance="2.00"))])
    second = parquet.cdc(CONTACT, COLUMNS, [("U", row(1, "NULL", balance="9.99"))])

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(second, first), options)

    assert report.ok, report.failed
    assert rows_of(spark, contact(lake_config), ["id", "name", "balance"]) == [
        (1, "NULL", Decimal("9.99")),
        (2, None, Decimal("2.00")),
    ]


def test_parquet_files_with_an_added_column_and_a_widened_type(spark, lake_config, dms, tmp_path):
    """Given a schema file that still says `id int`, and a later Parquet file where DMS writes `id` as
    INT64 (the source widened it) and a new column `tier`,
    When the batch with an older and that newer file is applied,
    Then `id` is widened, `tier` is added (null for the older file's rows), every row lands."""
    with_tier = schema_of({CONTACT: (["id"], [*SOURCE_TYPES, ("tier", "smallint")])})
    dms.load(CONTACT, COLUMNS, [row(1, "a")])
    assert full_load(spark, lake_config, with_tier, str(dms.root)).ok
    older = dms.cdc(CONTACT, COLUMNS, [("U", row(1, "older"))])
    newer_writer = DmsWriter(dms.root, parquet_types=dict(TYPES, id=pa.int64(), tier=pa.int32()))
    newer_writer._clock = dms._clock
    newer = newer_writer.cdc(CONTACT, [*COLUMNS, "tier"], [("I", (*row(5_000_000_000, "big"), 2))])

    report = apply_cdc(spark, lake_config, with_tier, manifest(older, newer))

    assert report.ok, report.failed
    assert spark.table(contact(lake_config)).schema["id"].dataType.simpleString() == "bigint"
    assert rows_of(spark, contact(lake_config), ["id", "name", "tier"]) == [
        (1, "older", None),
        (5_000_000_000, "big", 2),
    ]


def test_a_corrupt_parquet_file_is_quarantined_and_the_rest_applies(spark, lake_config, dms):
    """Given a good Parquet CDC file and one that is not Parquet at all, When applied, Then the bad one
    is quarantined with its reason and the good one applies."""
    from pathlib import Path

    dms.load(CONTACT, COLUMNS, [row(1, "a")])
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    good = dms.cdc(CONTACT, COLUMNS, [("U", row(1, "good"))])
    bad = Path(good).with_name("20261122-235959000.parquet")
    bad.write_bytes(b"this is not parquet")

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(good, str(bad)))

    assert report.ok, report.failed
    assert rows_of(spark, contact(lake_config), ["id", "name"]) == [(1, "good")]
    (reason,) = rows_of(spark, lake_config.quarantine, ["reason"])
    assert reason[0].startswith("unreadable file")


def test_a_parquet_full_load_reads_its_files_again_instead_of_keeping_them(
    spark, lake_config, tmp_path, monkeypatch
):
    """Given Parquet LOAD files where DMS writes `id` as INT64 (the source widened it; the schema file still
    says `int`) and one record has no key,
    When the table is fully loaded,
    Then its first pass keeps no rows (the commit reads and types the files again), yet the figures of
    that pass hold: `id` is widened, every good row is loaded exactly, the keyless record is quarantined
    once, and the report counts it."""
    from lakehouse.apply import full_load as full_load_module

    kept = []
    monkeypatch.setattr(full_load_module, "cached", lambda frame: kept.append(frame) or frame)
    dms = DmsWriter(tmp_path / "raw" / "dms", parquet_types=dict(TYPES, id=pa.int64()))
    dms.load(CONTACT, COLUMNS, [row(1, "a"), row(None, "no key"), row(5_000_000_000, "big", balance="2.50")])
    dms.load(CONTACT, COLUMNS, [row(2, "b")], counter=2)

    report = full_load(spark, lake_config, SCHEMA, str(dms.root))

    assert not kept
    assert report.totals()["quarantined_records"] == 1, report.tables
    assert spark.table(contact(lake_config)).schema["id"].dataType.simpleString() == "bigint"
    assert rows_of(spark, contact(lake_config), ["id", "name", "balance"]) == [
        (1, "a", Decimal("1.00")),
        (2, "b", Decimal("1.00")),
        (5_000_000_000, "big", Decimal("2.50")),
    ]
    assert [reason for (reason,) in rows_of(spark, lake_config.quarantine, ["reason"])] == [
        "primary key column id is null or missing"
    ]
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_a_parquet_full_load_of_a_new_table_reads_its_files_once_and_commits_its_facts_right_after(
    spark, lake_config, dms, monkeypatch
):
    """Given two Parquet LOAD files of a new table, DMS's reads of them at two moments, one file stamped
    with the snapshot's sequence,
    When the table is fully loaded,
    Then no first pass runs (its figures are observed on the commit's own pass), the rows are committed
    (marked pending), then a commit without data files sets the load's facts from those figures: done,
    its floor (the lowest sequence), when DMS started and ended it, and the summary of a full load."""
    from lakehouse.apply import full_load as full_load_module
    from lakehouse.audit.consistent import SOURCE_TS_MAX
    from lakehouse.io import iceberg

    passes = []
    monkeypatch.setattr(full_load_module, "counted", lambda frame: passes.append(frame) or frame)
    monkeypatch.setattr(full_load_module, "cached", lambda frame: passes.append(frame) or frame)
    first, last = datetime(2026, 11, 22, 8, 0, 0), datetime(2026, 11, 22, 8, 5, 0, 250000)
    dms.load(CONTACT, COLUMNS, [row(1, "a"), row(2, "b")], moment=first)
    dms.load(CONTACT, COLUMNS, [row(3, "c")], counter=2, snapshot_seq=7, moment=last)

    report = full_load(spark, lake_config, SCHEMA, str(dms.root))

    assert report.ok, report.failed
    assert not passes
    assert rows_of(spark, contact(lake_config), ["id", "name"]) == [(1, "a"), (2, "b"), (3, "c")]
    properties = iceberg.table_properties(spark, contact(lake_config))
    assert properties[iceberg.LOAD_DONE] == "2"
    assert properties[iceberg.LOAD_STARTED] == first.isoformat()
    assert properties[iceberg.LOAD_ENDED] == last.isoformat()
    assert Decimal(properties[iceberg.LOAD_FLOOR]) == Decimal(
        spark.table(contact(lake_config)).agg({"dms_change_seq": "min"}).first()[0]
    )
    facts = iceberg.iceberg_table(spark, contact(lake_config)).currentSnapshot()
    rows_commit = iceberg.iceberg_table(spark, contact(lake_config)).snapshot(facts.parentId())
    assert iceberg.java_dict(facts.summary())[iceberg.FULL_LOAD_DONE] == "2"
    assert iceberg.java_dict(facts.summary())[SOURCE_TS_MAX] == last.isoformat()
    assert (
        facts.addedDataFiles(iceberg.iceberg_table(spark, contact(lake_config)).io()).iterator().hasNext()
        is False
    )
    assert iceberg.java_dict(rows_commit.summary())[iceberg.FULL_LOAD_PENDING] == "2"
    assert report.totals()["records"] == 3, report.tables


def test_a_crash_between_a_loads_rows_and_its_facts_leaves_the_table_unloaded_and_the_next_load_completes_it(
    spark, lake_config, dms, monkeypatch
):
    """Given a Parquet full load of a new table that crashes after its rows' commit, before its facts',
    When the full load runs again,
    Then the crash left a table that is not loaded (no LOAD_DONE, no full load's summary) and the next run
    replaces the pending rows as a new table: every row once, the table loaded, nothing merged as a reload."""
    from lakehouse.apply import single_pass_load
    from lakehouse.io.iceberg import (
        FULL_LOAD_DONE,
        LOAD_DONE,
        REPLACED_SNAPSHOT,
        snapshot_properties,
        table_properties,
    )

    dms.load(CONTACT, COLUMNS, [row(1, "a"), row(2, "b")])
    dms.load(CONTACT, COLUMNS, [row(3, "c")], counter=2)

    def crash(*_args, **_kwargs):
        raise RuntimeError("the driver died between the two commits")

    with monkeypatch.context() as patched:
        patched.setattr(single_pass_load, "commit_load_facts", crash)
        assert not full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    table = contact(lake_config)
    assert LOAD_DONE not in table_properties(spark, table)
    assert not any(FULL_LOAD_DONE in summary for summary in snapshot_properties(spark, table))

    report = full_load(spark, lake_config, SCHEMA, str(dms.root))

    assert report.ok, report.failed
    assert rows_of(spark, table, ["id", "name"]) == [(1, "a"), (2, "b"), (3, "c")]
    assert table_properties(spark, table)[LOAD_DONE] == "2"
    assert not any(REPLACED_SNAPSHOT in summary for summary in snapshot_properties(spark, table))
