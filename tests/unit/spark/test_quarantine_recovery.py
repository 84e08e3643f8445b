"""Quarantine is not a dead end: its rows survive a crash around the commit, a fixed file is applied again
exactly once (tools.reapply_quarantined), and a header without the key stops the table instead."""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path

import pytest
from lakehouse.apply import cdc as cdc_apply
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.reapply import reapply_quarantined
from lakehouse.apply.run import ApplyOptions

from tests.support import DmsWriter, manifest, rows_of, schema_of, snapshot_count
from tools.reapply_quarantined import main as reapply_main

pytestmark = pytest.mark.spark

CUSTOMER, ITEM, EVENTS = "sales.customer", "sales.item", "sales.events"
COLUMNS = ["id", "name", "balance"]
SCHEMA = schema_of(
    {
        CUSTOMER: (["id"], [("id", "int"), ("name", "varchar(40)"), ("balance", "decimal(10,2)")]),
        ITEM: (["sku"], [("sku", "varchar(10)"), ("price", "decimal(7,2)")]),
        EVENTS: ([], [("id", "int"), ("what", "varchar(20)")]),
    }
)
QUARANTINE_MISMATCHES = ApplyOptions(type_mismatch="quarantine")


class Crash(BaseException):
    """The process dies (no `except Exception` catches it): what a killed driver leaves behind."""


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def d(value: str) -> Decimal:
    return Decimal(value)


def quarantine(spark, config) -> list[tuple]:
    return rows_of(spark, config.quarantine, ["run_id", "source_uri", "record_number", "reason"])


def customers(spark, config) -> list[tuple]:
    return rows_of(spark, config.clean_table("sales_customer"))


def items(spark, config) -> list[tuple]:
    return rows_of(spark, config.clean_table("sales_item"))


def events(spark, config) -> list[tuple]:
    return rows_of(spark, config.clean_table("sales_events"))


def append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


# ------------------------------------------------------------------------------- order: before the commit


def test_a_crash_right_after_the_data_commit_loses_no_quarantine_row(spark, lake_config, dms, monkeypatch):
    """Given a batch with a bad record, whose driver dies right after the table's data commit,
    When the batch is retried (same run id; the commit names the file, so the retry skips it),
    Then the quarantine holds the bad record once and the table holds the good ones."""
    bad = dms.cdc(ITEM, ["sku", "price"], [("I", ("A-1", 1)), ("I", ("A-2", "1.2.3")), ("I", ("A-3", 3))])
    real_merge = cdc_apply.merge_changes

    def merge_then_die(*args, **kwargs):
        real_merge(*args, **kwargs)
        raise Crash("driver killed after the commit")

    monkeypatch.setattr(cdc_apply, "merge_changes", merge_then_die)
    with pytest.raises(Crash):
        apply_cdc(spark, lake_config, SCHEMA, manifest(bad, run_id="run-1"), QUARANTINE_MISMATCHES)
    monkeypatch.undo()

    retry = apply_cdc(spark, lake_config, SCHEMA, manifest(bad, run_id="run-1"), QUARANTINE_MISMATCHES)

    assert retry.ok and retry.tables[0].skipped_already_applied == 1
    assert items(spark, lake_config) == [("A-1", d("1.00")), ("A-3", d("3.00"))]
    assert quarantine(spark, lake_config) == [
        ("run-1", bad, 2, "price: 1.2.3 is not a valid decimal(7,2)"),
    ]
    assert (retry.run_quarantined_records, retry.run_quarantined_files) == (1, 0)


def test_a_commit_that_fails_after_the_quarantine_write_is_retried_without_duplicates(
    spark, lake_config, dms, monkeypatch
):
    """Given a batch with a bad record and an unreadable file of the same table, whose data commit fails
    (the driver dies) after the quarantine was written,
    When its files are re-applied before the batch ran again, Then they are refused (the pending batch
    applies them);
    When the batch is retried with the same run id,
    Then each rejected record and file is quarantined exactly once and the table is right."""
    bad = dms.cdc(ITEM, ["sku", "price"], [("I", ("A-1", 1)), ("I", ("A-2", "x"))])
    blank = dms.table_dir(ITEM) / "20261122-100000999.csv"
    blank.write_text("")

    def die(*args, **kwargs):
        raise Crash("driver killed before the commit")

    monkeypatch.setattr(cdc_apply, "merge_changes", die)
    with pytest.raises(Crash):
        apply_cdc(
            spark, lake_config, SCHEMA, manifest(bad, str(blank), run_id="run-1"), QUARANTINE_MISMATCHES
        )
    monkeypatch.undo()
    written_before_the_commit = quarantine(spark, lake_config)
    too_early = reapply_quarantined(spark, lake_config, SCHEMA, run_id="run-1")
    assert too_early.run is None and sorted(too_early.refused) == sorted([bad, str(blank)])
    assert all("not applied yet" in why for why in too_early.refused.values())

    retry = apply_cdc(
        spark, lake_config, SCHEMA, manifest(bad, str(blank), run_id="run-1"), QUARANTINE_MISMATCHES
    )

    expected = [
        ("run-1", bad, 2, "price: x is not a valid decimal(7,2)"),
        ("run-1", str(blank), None, "missing or blank header row (DMS AddColumnName=true is required)"),
    ]
    assert sorted(written_before_the_commit, key=str) == sorted(expected, key=str)
    assert retry.ok and retry.quarantine_rows_added == 0
    assert sorted(quarantine(spark, lake_config), key=str) == sorted(expected, key=str)
    assert items(spark, lake_config) == [("A-1", d("1.00"))]


# ------------------------------------------------------------------------------------- a header without the key


def test_a_header_without_the_primary_key_stops_the_table_and_quarantines_nothing(spark, lake_config, dms):
    """Given a batch with a customer file whose header lacks the key column `id` (the source's key was
    renamed) and a good item file,
    When applied,
    Then the customer table fails with a schema error naming the file, the column and what to do; nothing
    of it is quarantined, committed or recorded as applied (the batch stays pending: a retry meets the
    same error instead of skipping the file); the item table is applied."""
    keyless = dms.cdc(CUSTOMER, ["customer_id", "name", "balance"], [("I", (1, "a", 1))])
    good = dms.cdc(ITEM, ["sku", "price"], [("I", ("A-1", 9.99))])

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(keyless, good))
    retry = apply_cdc(spark, lake_config, SCHEMA, manifest(keyless, good))

    for run in (report, retry):
        (failed,) = run.failed
        assert failed.table == CUSTOMER and failed.error.startswith("SchemaOutOfDateError")
        assert keyless in failed.error and "id" in failed.error and "schema_gen" in failed.error
        assert run.totals()["quarantined_files"] == 0
    assert not spark.catalog.tableExists(lake_config.quarantine)
    assert customers(spark, lake_config) == []
    ledger = rows_of(spark, lake_config.ledger, ["file_name"])
    assert ledger == [(good.rsplit("/", 1)[-1],)]
    assert items(spark, lake_config) == [("A-1", d("9.99"))]


# ------------------------------------------------------------------------------------- re-apply after a fix


def test_a_whole_quarantined_file_fixed_and_reuploaded_is_applied_once_in_sequence_order(
    spark, lake_config, dms
):
    """Given a customer file quarantined whole (its header row was lost) holding changes 1-3, and a later
    file (changes 4-5) that updated key 1 and deleted key 2,
    When the operator re-uploads the fixed file under the same key and re-applies it,
    Then its changes apply by the sequence rule: key 1 keeps the newer update, key 2 stays deleted (its
    tombstone), key 3 is inserted;
    When the command runs again (nothing is left of the file), and the original batch is re-sent, Then
    nothing changes (no commit)."""
    changes = [("I", (1, "old", 1)), ("I", (2, "gone", 2)), ("I", (3, "new", 3))]
    broken = dms.cdc(CUSTOMER, COLUMNS, changes, seqs=[1, 2, 3])
    fixed_text = Path(broken).read_text(encoding="utf-8")
    with open(broken, "w", encoding="utf-8") as handle:
        handle.write("".join(fixed_text.splitlines(keepends=True)[1:]))  # no header row: unreadable
    later = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "newer", 10)), ("D", (2, "gone", 2))], seqs=[4, 5])
    first = apply_cdc(spark, lake_config, SCHEMA, manifest(broken, later, run_id="run-1"))
    assert first.ok and first.tables[0].quarantined_files == 1
    assert customers(spark, lake_config) == [(1, "newer", d("10.00"))]

    with open(broken, "w", encoding="utf-8") as handle:
        handle.write(fixed_text)
    report = reapply_quarantined(spark, lake_config, SCHEMA, files=[broken])

    assert report.ok and report.files == [broken] and report.run is not None
    assert report.run.totals()["ignored_older"] == 1  # key 2's insert: older than its delete
    assert customers(spark, lake_config) == [(1, "newer", d("10.00")), (3, "new", d("3.00"))]
    table = lake_config.clean_table("sales_customer")
    commits = snapshot_count(spark, table)

    again = reapply_quarantined(spark, lake_config, SCHEMA, files=[broken])
    resent = apply_cdc(spark, lake_config, SCHEMA, manifest(broken, later, run_id="run-2"))

    assert again.ok and again.run is None and again.already_applied == [broken]
    assert resent.ok and resent.tables[0].skipped_already_applied == 2
    assert snapshot_count(spark, table) == commits
    assert customers(spark, lake_config) == [(1, "newer", d("10.00")), (3, "new", d("3.00"))]
    assert [row[:3] for row in quarantine(spark, lake_config)] == [("run-1", broken, None)]


def test_quarantined_records_are_applied_after_a_fix_without_applying_the_good_ones_twice(
    spark, lake_config, dms
):
    """Given a customer file whose record 3 is malformed (a field too many) among good records 1-2, then a
    later file updating key 1,
    When a first fix leaves record 3 bad in another way and is re-applied (run id of the fix),
    Then record 3 is quarantined again with its new reason under the re-apply's run id, nothing else changes;
    When a second fix is re-applied (selected by the original run id),
    Then key 3 is inserted once, key 1 keeps its newer update and key 2 its row."""
    path = dms.cdc(CUSTOMER, COLUMNS, [("I", (1, "a", 1)), ("I", (2, "b", 2))], seqs=[1, 2])
    append_line(path, "I,2026-11-22 10:00:01.000000,00000000000000000000000000000000003,3,c,3,extra")
    later = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "a2", 11))], seqs=[9])
    first = apply_cdc(spark, lake_config, SCHEMA, manifest(path, later, run_id="run-1"))
    assert first.ok and first.tables[0].quarantined_records == 1
    good_lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)[:-1]

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            "".join(good_lines) + "X,2026-11-22 10:00:01.000000,00000000000000000000000000000000003,3,c,3\n"
        )
    half_fixed = reapply_quarantined(spark, lake_config, SCHEMA, files=[path])

    assert half_fixed.run is not None and half_fixed.run.ok
    assert half_fixed.run.tables[0].quarantined_records == 1
    assert quarantine(spark, lake_config) == sorted(
        [
            ("run-1", path, 3, "malformed CSV record (field count differs from header)"),
            (half_fixed.run_id, path, 3, "invalid Op X"),
        ]
    )
    assert customers(spark, lake_config) == [(1, "a2", d("11.00")), (2, "b", d("2.00"))]

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            "".join(good_lines) + "I,2026-11-22 10:00:01.000000,00000000000000000000000000000000003,3,c,3\n"
        )
    fixed = reapply_quarantined(spark, lake_config, SCHEMA, run_id="run-1")

    assert fixed.ok and fixed.files == [path] and fixed.run_id != half_fixed.run_id
    assert fixed.run is not None and fixed.run.totals()["quarantined_records"] == 0
    assert customers(spark, lake_config) == [(1, "a2", d("11.00")), (2, "b", d("2.00")), (3, "c", d("3.00"))]
    again = reapply_quarantined(spark, lake_config, SCHEMA, run_id="run-1")
    assert again.ok and again.run is None and again.already_applied == [path]
    assert customers(spark, lake_config) == [(1, "a2", d("11.00")), (2, "b", d("2.00")), (3, "c", d("3.00"))]


def test_a_table_without_a_key_appends_each_quarantined_record_once_however_often_it_is_fixed(
    spark, lake_config, dms
):
    """Given a table without a primary key (appended) and four files of it quarantined: one whole (a broken
    header), one whose every record was bad, one with a bad record among good ones, one gzipped file that
    could not be read,
    When they are fixed (the first still with one bad record, the third by deleting its bad record, the
    gzipped one compressed right) and re-applied,
    Then the first's good records, the second's and the gzipped file's are appended, the first's bad record
    is quarantined under the re-apply's run, and the file repaired to fewer records is refused by the record
    count check (its record numbers no longer name the same records);
    When the first's last record is fixed and the gzipped file compressed again (new bytes, same records),
    and the command runs twice more,
    Then exactly that record is appended, once; the rest is reported applied already: every record once."""
    columns = ["id", "what"]
    whole = dms.cdc(EVENTS, columns, [("I", (1, "one")), ("I", (2, "two")), ("I", (3, "three"))])
    whole_lines = Path(whole).read_text(encoding="utf-8").splitlines(keepends=True)
    Path(whole).write_text('"id,what\n' + "".join(whole_lines[1:]), encoding="utf-8")  # malformed header
    all_bad = dms.cdc(EVENTS, columns, [("I", (4, "four")), ("I", (5, "five"))])
    all_bad_lines = Path(all_bad).read_text(encoding="utf-8").splitlines(keepends=True)
    Path(all_bad).write_text(
        "".join([all_bad_lines[0]] + [line.rstrip("\n") + ",extra\n" for line in all_bad_lines[1:]]),
        encoding="utf-8",
    )
    shrunk = dms.cdc(EVENTS, columns, [("I", (6, "six")), ("I", (7, "seven")), ("I", (8, "eight"))])
    shrunk_lines = Path(shrunk).read_text(encoding="utf-8").splitlines(keepends=True)
    Path(shrunk).write_text(
        "".join([*shrunk_lines[:2], shrunk_lines[2].rstrip("\n") + ",extra\n", *shrunk_lines[3:]]),
        encoding="utf-8",
    )
    plain = Path(dms.cdc(EVENTS, columns, [("I", (9, "nine"))]))
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(b"not gzip")
    plain_bytes = plain.read_bytes()
    plain.unlink()
    first = apply_cdc(
        spark, lake_config, SCHEMA, manifest(whole, all_bad, shrunk, str(packed), run_id="run-1")
    )
    assert first.ok and (first.totals()["quarantined_files"], first.totals()["quarantined_records"]) == (2, 3)
    assert events(spark, lake_config) == [(6, "six"), (8, "eight")]

    Path(whole).write_text(
        "".join([*whole_lines[:2], whole_lines[2].replace("I,", "X,", 1), *whole_lines[3:]]), encoding="utf-8"
    )
    Path(all_bad).write_text("".join(all_bad_lines), encoding="utf-8")
    Path(shrunk).write_text("".join(shrunk_lines[:2] + shrunk_lines[3:]), encoding="utf-8")
    packed.write_bytes(gzip.compress(plain_bytes, mtime=1))
    fixes = reapply_quarantined(spark, lake_config, SCHEMA, files=[whole, all_bad, shrunk, str(packed)])

    assert fixes.files == sorted([whole, all_bad, str(packed)]) and list(fixes.refused) == [shrunk]
    assert (
        fixes.refused[shrunk].startswith("[check: record count]")
        and "now has 2 records, 3" in (fixes.refused[shrunk])
    )
    assert fixes.run is not None and fixes.run.ok
    assert events(spark, lake_config) == [
        (1, "one"),
        (3, "three"),
        (4, "four"),
        (5, "five"),
        (6, "six"),
        (8, "eight"),
        (9, "nine"),
    ]
    assert [row for row in quarantine(spark, lake_config) if row[0] == fixes.run_id] == [
        (fixes.run_id, whole, 2, "invalid Op X")
    ]

    Path(whole).write_text("".join(whole_lines), encoding="utf-8")
    packed.write_bytes(gzip.compress(plain_bytes, mtime=2))
    last_fix = reapply_quarantined(spark, lake_config, SCHEMA, files=[whole, all_bad, str(packed)])
    again = reapply_quarantined(spark, lake_config, SCHEMA, files=[whole, all_bad, str(packed)])

    assert last_fix.ok and last_fix.files == [whole]
    assert last_fix.already_applied == sorted([all_bad, str(packed)])
    assert again.ok and again.run is None and again.already_applied == sorted([whole, all_bad, str(packed)])
    assert events(spark, lake_config) == [
        (1, "one"),
        (2, "two"),
        (3, "three"),
        (4, "four"),
        (5, "five"),
        (6, "six"),
        (8, "eight"),
        (9, "nine"),
    ]


def test_a_keyed_table_gets_a_gzipped_file_fixed_twice_and_recompressed_once(spark, lake_config, dms):
    """Given a keyed table and a gzipped file of it that could not be read (changes 1-3), then a later file
    updating key 1,
    When it is compressed right but one record is still bad and re-applied, then that record fixed and
    re-applied, then the same records compressed again (new bytes) and re-applied,
    Then the table gets the file's changes by their sequence (key 1 keeps the newer update), the bad record
    once it is fixed, and the re-compressed file is reported applied already: no run, no commit."""
    plain = Path(dms.cdc(CUSTOMER, COLUMNS, [("I", (1, "a", 1)), ("I", (2, "b", 2)), ("I", (3, "c", 3))]))
    packed = plain.with_name(plain.name + ".gz")
    lines = plain.read_text(encoding="utf-8").splitlines(keepends=True)
    plain.unlink()
    packed.write_bytes(b"not gzip")
    later = dms.cdc(CUSTOMER, COLUMNS, [("U", (1, "a2", 11))])
    first = apply_cdc(spark, lake_config, SCHEMA, manifest(str(packed), later, run_id="run-1"))
    assert first.ok and first.tables[0].quarantined_files == 1

    half = "".join([*lines[:3], lines[3].replace("I,", "X,", 1)])
    packed.write_bytes(gzip.compress(half.encode(), mtime=1))
    half_fixed = reapply_quarantined(spark, lake_config, SCHEMA, files=[str(packed)])
    assert half_fixed.ok and half_fixed.run is not None and half_fixed.run.tables[0].quarantined_records == 1
    assert customers(spark, lake_config) == [(1, "a2", d("11.00")), (2, "b", d("2.00"))]

    packed.write_bytes(gzip.compress("".join(lines).encode(), mtime=2))
    fixed = reapply_quarantined(spark, lake_config, SCHEMA, run_id="run-1")
    table = lake_config.clean_table("sales_customer")
    commits = snapshot_count(spark, table)
    packed.write_bytes(gzip.compress("".join(lines).encode(), mtime=3))
    recompressed = reapply_quarantined(spark, lake_config, SCHEMA, files=[str(packed)])

    assert fixed.ok and fixed.files == [str(packed)] and fixed.run_id != half_fixed.run_id
    assert recompressed.ok and recompressed.run is None and recompressed.already_applied == [str(packed)]
    assert snapshot_count(spark, table) == commits
    assert customers(spark, lake_config) == [(1, "a2", d("11.00")), (2, "b", d("2.00")), (3, "c", d("3.00"))]


def test_what_the_quarantine_does_not_name_or_the_raw_zone_lacks_is_refused(spark, lake_config, dms):
    """Given a quarantined file since removed from the raw zone, and a file never quarantined,
    When both are named, Then each is refused with why and nothing is applied."""
    gone = dms.cdc(ITEM, ["sku", "price"], [("I", ("A-1", 1))])
    with open(gone, "w", encoding="utf-8") as handle:
        handle.write("")
    fine = dms.cdc(ITEM, ["sku", "price"], [("I", ("A-2", 2))])
    apply_cdc(spark, lake_config, SCHEMA, manifest(gone, fine))
    Path(gone).unlink()

    report = reapply_quarantined(spark, lake_config, SCHEMA, files=[gone, fine])

    assert report.run is None and report.files == []
    assert "not in the raw zone" in report.refused[gone]
    assert "nothing of this file" in report.refused[fine]
    assert items(spark, lake_config) == [("A-2", d("2.00"))]


def test_the_command_wants_files_or_a_run():
    """Given neither --file nor --run_id (or both), When the command runs, Then it stops with usage."""
    with pytest.raises(SystemExit) as neither:
        reapply_main(["--schema_file", "s.json", "--warehouse", "/tmp/w"])
    with pytest.raises(SystemExit) as both:
        reapply_main(["--schema_file", "s.json", "--file", "a.csv", "--run_id", "r"])
    assert neither.value.code == both.value.code == 2
