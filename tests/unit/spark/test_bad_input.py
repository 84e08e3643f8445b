"""Bad input gets a clear reason in quarantine, loses nothing, and never stops the rest."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.run import ApplyOptions
from pyspark.sql import functions as F

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

COLUMNS = ["id", "name", "balance"]
TABLES = {
    "sales.customer": (["id"], [("id", "int"), ("name", "varchar(40)"), ("balance", "decimal(10,2)")]),
    "sales.item": (["sku"], [("sku", "varchar(10)"), ("price", "decimal(7,2)")]),
}
SCHEMA = schema_of(TABLES)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def quarantine(spark, config):
    return rows_of(spark, config.quarantine, ["source_table", "record_number", "reason"])


QUARANTINE_MISMATCHES = ApplyOptions(type_mismatch="quarantine")


def test_malformed_records_are_quarantined_with_file_record_and_reason(spark, lake_config, dms):
    """Given a CDC file whose 2nd record has a field too many, 3rd an invalid Op, 4th a non-numeric
    decimal, 5th a null key, 6th a bad change sequence, and good records around them,
    When applied with type mismatches quarantined (not the default, see test_type_mismatches_...),
    Then the good records are in the table and each bad one is quarantined with its record number."""
    path = dms.cdc("sales.customer", COLUMNS, [("I", (1, "good", 1))])
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("I,2026-11-22 10:00:01.000000,00000000000000000000000000000000100,2,x,1,extra\n")
        handle.write("X,2026-11-22 10:00:01.000000,00000000000000000000000000000000101,3,bad op,1\n")
        handle.write("I,2026-11-22 10:00:01.000000,00000000000000000000000000000000102,4,bad money,12abc\n")
        handle.write("I,2026-11-22 10:00:01.000000,00000000000000000000000000000000103,,no key,1\n")
        handle.write("I,2026-11-22 10:00:01.000000,not-a-number,6,bad seq,1\n")
        handle.write('I,2026-11-22 10:00:01.000000,00000000000000000000000000000000105,7,"also good",7\n')

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(path), QUARANTINE_MISMATCHES)

    assert rows_of(spark, lake_config.clean_table("sales_customer")) == [
        (1, "good", Decimal("1.00")),
        (7, "also good", Decimal("7.00")),
    ]
    assert quarantine(spark, lake_config) == [
        ("sales.customer", 2, "malformed CSV record (field count differs from header)"),
        ("sales.customer", 3, "invalid Op X"),
        ("sales.customer", 4, "balance: 12abc is not a valid decimal(10,2)"),
        ("sales.customer", 5, "primary key column id is null or missing"),
        ("sales.customer", 6, "AR_H_CHANGE_SEQ is not a number: not-a-number"),
    ]
    assert report.tables[0].quarantined_records == 5
    raw = spark.table(lake_config.quarantine).where("record_number = 4").first()["record"]
    assert '"balance":"12abc"' in raw  # the raw record is kept, so it can be fixed and replayed


def test_unreadable_files_are_quarantined_and_a_table_the_schema_file_lacks_stops_only_itself(
    spark, lake_config, dms, tmp_path
):
    """Given a manifest with a file without header, a key outside the DMS layout, a file of a table the
    schema file does not know (added on the source since it was generated), and good files,
    When applied,
    Then the good files are applied, each bad file is quarantined with its reason, and the unknown
    table's file is not quarantined (it is not bad data): its table fails, saying to regenerate the
    schema file, so the batch stays pending; once the file knows the table, a retry applies it."""
    good = dms.cdc("sales.item", ["sku", "price"], [("I", ("A-1", 9.99))])
    empty = dms.table_dir("sales.item") / "20261122-100000002.csv"
    empty.write_text("")
    unknown = dms.cdc("sales.ghost", ["id"], [("I", (1,))])
    stray = tmp_path / "notes.txt"
    stray.write_text("hello")
    batch = manifest(str(empty), unknown, str(stray), good)

    report = apply_cdc(spark, lake_config, SCHEMA, batch)

    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("A-1", Decimal("9.99"))]
    reasons = {
        uri.rsplit("/", 1)[-1]: reason
        for uri, reason in rows_of(spark, lake_config.quarantine, ["source_uri", "reason"])
    }
    assert (
        reasons.pop("20261122-100000002.csv")
        == "missing or blank header row (DMS AddColumnName=true is required)"
    )
    assert "neither a LOAD file nor a timestamp-named CDC file" in reasons.pop("notes.txt")
    assert reasons == {}
    assert report.totals()["quarantined_files"] == 1  # the table's own unreadable file
    (failed,) = report.failed
    assert failed.table == "sales.ghost" and failed.files == 1
    assert "not in the schema file" in failed.error and "schema_gen" in failed.error

    regenerated = schema_of(TABLES | {"sales.ghost": (["id"], [("id", "int")])})
    retry = apply_cdc(spark, lake_config, regenerated, batch)
    assert retry.ok, retry.failed
    assert rows_of(spark, lake_config.clean_table("sales_ghost")) == [(1,)]
    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("A-1", Decimal("9.99"))]


def test_a_retry_reports_what_its_failed_attempt_quarantined(spark, lake_config, dms):
    """Given a batch whose first attempt quarantines a bad record of one table and fails on another
    (a file that does not exist yet),
    When the batch is retried after the file is back (same run id) and the first table is skipped as
    applied,
    Then the retry's report still counts the run's quarantined record (run_quarantined_records=1), so the
    acknowledge publishes it, while its own per-table totals count only what it did."""
    bad = dms.cdc("sales.customer", COLUMNS, [("I", (1, "ok", 1)), ("I", (2, "bad", "1.2.3"))])
    late = Path(dms.cdc("sales.item", ["sku", "price"], [("I", ("A-1", 9.99))]))
    held = late.read_bytes()
    late.unlink()
    batch = manifest(bad, str(late), run_id="run-1")

    first = apply_cdc(spark, lake_config, SCHEMA, batch, QUARANTINE_MISMATCHES)
    late.write_bytes(held)
    retry = apply_cdc(spark, lake_config, SCHEMA, batch, QUARANTINE_MISMATCHES)

    assert [t.table for t in first.failed] == ["sales.item"]
    assert retry.ok and retry.totals()["quarantined_records"] == 0
    assert (retry.run_quarantined_records, retry.run_quarantined_files) == (1, 0)
    assert retry.to_dict()["run_quarantined_records"] == 1
    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("A-1", Decimal("9.99"))]


def test_a_file_the_manifest_names_that_does_not_exist_stops_its_table_only(spark, lake_config, dms):
    """Given a manifest naming a file that does not exist (removed from the raw zone) and a good file of
    another table,
    When applied,
    Then the missing file's table fails with a clear error and nothing of it is applied or quarantined,
    and the other table is applied."""
    good = dms.cdc("sales.item", ["sku", "price"], [("I", ("A-1", 9.99))])
    present = dms.cdc("sales.customer", COLUMNS, [("I", (1, "a", 1))])
    missing = str(dms.table_dir("sales.customer") / "20261122-235959001.csv")

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(present, missing, good))

    (failed,) = report.failed
    assert failed.table == "sales.customer"
    assert "do not exist" in failed.error and missing in failed.error
    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("A-1", Decimal("9.99"))]
    assert rows_of(spark, lake_config.clean_table("sales_customer")) == []
    assert not spark.catalog.tableExists(lake_config.quarantine)


def test_quarantine_keeps_one_row_per_record_when_a_batch_is_retried(spark, lake_config, dms):
    """Given a file with one bad record, When the batch runs twice, Then the record is quarantined once."""
    path = dms.cdc("sales.customer", COLUMNS, [("I", (1, "ok", 1)), ("I", (2, "bad", "1.2.3"))])

    apply_cdc(spark, lake_config, SCHEMA, manifest(path), QUARANTINE_MISMATCHES)
    apply_cdc(spark, lake_config, SCHEMA, manifest(path, run_id="retry"), QUARANTINE_MISMATCHES)

    assert quarantine(spark, lake_config) == [
        ("sales.customer", 2, "balance: 1.2.3 is not a valid decimal(10,2)")
    ]


def test_gzip_compressed_dms_files_are_read_like_plain_ones(spark, lake_config, dms):
    """Given a CDC file compressed by DMS (CompressionType=GZIP, `.csv.gz`),
    When applied, Then its changes land like those of a plain file."""
    import gzip
    from pathlib import Path

    plain = Path(dms.cdc("sales.item", ["sku", "price"], [("I", ("Z-9", 1.25))]))
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()

    apply_cdc(spark, lake_config, SCHEMA, manifest(str(packed)))

    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("Z-9", Decimal("1.25"))]


def test_a_garbage_file_in_a_table_folder_never_changes_the_table(spark, lake_config, dms):
    """Given a file in a table's folder whose "header" is garbage (no key column, unbalanced quote),
    When applied with a good file, Then the garbage is quarantined and the table's columns are unchanged."""
    from pathlib import Path

    good = dms.cdc("sales.item", ["sku", "price"], [("I", ("A-1", 1))])
    garbage = Path(good).with_name("20261122-235959000.csv")
    garbage.write_bytes(b'Op,"unterminated\n\x00\x01 garbage')

    apply_cdc(spark, lake_config, SCHEMA, manifest(good, str(garbage)))

    table = lake_config.clean_table("sales_item")
    assert [f.name for f in spark.table(table).schema.fields] == [
        "sku",
        "price",
        "dms_commit_ts",
        "dms_change_seq",
    ]
    assert rows_of(spark, table) == [("A-1", Decimal("1.00"))]
    assert rows_of(spark, lake_config.quarantine, ["reason"]) == [
        ("malformed header row: 'Op,\"unterminated'",)
    ]


ODD_TABLE_NAMES = ["order lines", "per%2Bcent", "plus+sign", "hash#tag", "déjà vu", "a%20b"]


def test_records_keep_their_file_and_order_whatever_the_path_holds(spark, dms):
    """Given files under folders whose names hold spaces, %, +, # and accents (Spark lists them as
    encoded URIs), When they are read, Then every record carries its own file's URI and position."""
    from lake_contracts.dms_files import parse_dms_key
    from lakehouse.dms.reader import FILE_ORDER, read_dms_files

    paths = [
        dms.cdc(f"sales.{table}", COLUMNS, [("I", (n * 10 + i, table, "1.00")) for i in range(3)])
        for n, table in enumerate(ODD_TABLE_NAMES)
    ]
    files = [parse_dms_key(path) for path in paths]

    raw = read_dms_files(spark, files, {f.uri: f.uri for f in files})

    assert raw.rejected == []
    assert sorted(tuple(r) for r in raw.rows.select("id", raw.file_uri(), FILE_ORDER).collect()) == sorted(
        (str(n * 10 + i), path, n) for n, path in enumerate(paths) for i in range(3)
    )


def test_a_record_carries_its_files_position_and_names_the_file_only_when_rejected(spark, lake_config, dms):
    """Given two CDC files without change sequences, the second holding an invalid Op,
    When they are read and typed,
    Then no record carries its file's URI through the pass, only the file's position; each change's
    sequence is its file's synthesized base plus its place in the file; the rejected change alone names
    its file."""
    from lake_contracts.dms_files import parse_dms_key
    from lakehouse.apply.run import ApplyRun
    from lakehouse.dms import changes as C
    from lakehouse.dms.reader import FILE_ORDER

    first = dms.cdc(
        "sales.customer", COLUMNS, [("I", (1, "a", "1")), ("U", (1, "b", "2"))], seqs=[None, None]
    )
    second = dms.cdc(
        "sales.customer", COLUMNS, [("I", (2, "c", "3")), ("X", (3, "d", "4"))], seqs=[None, None]
    )
    files = [parse_dms_key(path) for path in (first, second)]
    run = ApplyRun(spark, lake_config, SCHEMA, ApplyOptions(), "run-1", "cdc")

    raw, typed = run.read_typed(SCHEMA.tables["sales.customer"], files)

    assert not [value for row in raw.collect() for value in row if value in (first, second)]
    changes = typed.select("id", FILE_ORDER, C.SEQ, C.FILE_URI).orderBy(C.SEQ).collect()
    assert [(id_, order, uri) for id_, order, _, uri in changes] == [
        (1, 0, None),
        (1, 0, None),
        (2, 1, None),
        (3, 1, second),
    ]
    within_file = [int(seq) - files[order].sequence_base for _, order, seq, _ in changes]
    assert within_file[0] < within_file[1] and within_file[2] < within_file[3]
    assert all(0 <= place < 4 for place in within_file)


def test_a_records_validity_is_decided_without_building_its_problems_texts(spark, lake_config, dms):
    """Given a CDC file with a good record, an invalid Op, a decimal with too many places and an int that
    needs a bigint,
    When it is typed and its usable records are filtered (Spark may evaluate the filter below the
    projection, a second time),
    Then the filter tests booleans only (no text is built for a record to decide it is valid), the
    good record alone passes, and each rejected record still names its problem."""
    from lake_contracts.dms_files import parse_dms_key
    from lakehouse.apply.run import ApplyRun
    from lakehouse.dms import changes as C

    path = dms.cdc(
        "sales.customer",
        COLUMNS,
        [
            ("I", (1, "a", "1.00")),
            ("X", (2, "b", "2.00")),
            ("I", (3, "c", "1.234")),
            ("I", (3000000000, "d", "4")),
        ],
    )
    run = ApplyRun(spark, lake_config, SCHEMA, ApplyOptions(), "run-1", "cdc")
    typed = run.read_typed(SCHEMA.tables["sales.customer"], [parse_dms_key(path)])[1]
    usable = typed.where(F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull())

    plan = usable._jdf.queryExecution().optimizedPlan().toString()
    filters = [line for line in plan.splitlines() if line.lstrip("+- :").startswith("Filter")]
    assert filters and not [line for line in filters if "concat" in line]
    assert [row.id for row in usable.collect()] == [1]
    problems = typed.where(~F.col("id").eqNullSafe(1)).select(C.POSITION, C.REASON, C.MISMATCH, C.WIDEN)
    assert [tuple(row)[1:] for row in problems.orderBy(C.POSITION).collect()] == [
        ("invalid Op X", None, None),
        (None, "balance: 1.234 is not a valid decimal(10,2) (more than 2 decimal places)", None),
        (None, None, f"id{C.WIDEN_TYPE_SEPARATOR}bigint"),
    ]


def test_spark_spells_a_local_files_uri_as_one_of_the_exact_spellings(spark, tmp_path):
    """Given a file named by its `file:///` URI (how local runs and the benches name files),
    When Spark reads it,
    Then the path Spark gives its records is one of the spellings the reader matches exactly: a miss
    sends every record through the decoding lookup (7 CPU-s per 10M records, bench/RESULTS.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from lakehouse.dms import reader

    path = tmp_path / "LOAD00000001.parquet"
    pq.write_table(pa.table({"id": [1]}), path)
    uri = path.as_uri()
    (spark_path,) = {row[0] for row in spark.read.parquet(uri).select("_metadata.file_path").collect()}

    assert uri.startswith("file:///") and spark_path in reader._spellings(uri)


def test_a_records_change_sequence_is_parsed_once_and_typed_as_before(spark, lake_config, dms):
    """Given a CDC file with a sequence of 35 digits, one with spaces around it, an empty one and one that is
    not a number,
    When it is typed, observed and its usable records filtered as the CDC first pass does,
    Then the plan casts the sequence's text to a decimal once (not in the sequence, its check and the
    rejected record's columns each), the sequences are the numbers written (the empty one the record's
    synthesized sequence), and the one that is not a number is rejected and named."""
    import re

    from lake_contracts.dms_files import change_seq, parse_dms_key
    from lakehouse.apply.run import ApplyRun
    from lakehouse.dms import changes as C
    from pyspark.sql import Observation

    path = dms.cdc("sales.customer", COLUMNS, [("I", (1, "a", 1))], seqs=[7])
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("I,2026-11-22 10:00:01.000000, 20261122100001000000000000000000042 ,2,b,2\n")
        handle.write("I,2026-11-22 10:00:01.000000,,3,c,3\n")
        handle.write("I,2026-11-22 10:00:01.000000,not-a-number,4,d,4\n")
    run = ApplyRun(spark, lake_config, SCHEMA, ApplyOptions(), "run-1", "cdc")
    file = parse_dms_key(path)
    typed = run.read_typed(SCHEMA.tables["sales.customer"], [file])[1]
    usable = F.col(C.REASON).isNull() & F.col(C.MISMATCH).isNull() & F.col(C.WIDEN).isNull()
    observed = typed.observe(Observation("figures"), F.count(F.lit(1)).alias("records"))
    fresh = observed.where(usable).drop(C.REASON, C.MISMATCH, C.WIDEN, C.RAW)

    plan = fresh._jdf.queryExecution().optimizedPlan().toString()
    parses = re.findall(r"cast\((?:trim\([^()]*\)|_dms_text_\d+#\d+) as decimal\(38,0\)\)", plan)
    assert len(parses) == 1, parses
    rows = {row.id: row for row in fresh.collect()}
    assert {number: row[C.SEQ] for number, row in rows.items()} == {
        1: Decimal(change_seq(7)),
        2: Decimal("20261122100001000000000000000000042"),
        3: file.sequence_base + (rows[3][C.POSITION] & ((1 << 33) - 1)),  # none written: the record's own
    }
    assert [
        tuple(row) for row in typed.where(F.col(C.REASON).isNotNull()).select("id", C.REASON).collect()
    ] == [(4, "AR_H_CHANGE_SEQ is not a number: not-a-number")]


def test_a_record_spark_reads_from_an_unexpected_path_is_quarantined_not_dropped(
    spark, lake_config, dms, monkeypatch
):
    """Given Spark names a file in a way the reader cannot match to the batch (simulated), When the
    batch is applied, Then its records go to quarantine with that reason and none is applied."""
    from lakehouse.dms import reader as dms_reader

    path = dms.cdc("sales.customer", COLUMNS, [("I", (1, "a", "1.00")), ("I", (2, "b", "2.00"))])
    monkeypatch.setattr(dms_reader, "_spellings", lambda path: set())
    monkeypatch.setattr(dms_reader, "_normalise", lambda path: f"elsewhere:{path}")

    report = apply_cdc(spark, lake_config, SCHEMA, manifest(path))

    assert (report.totals()["quarantined_records"], report.totals()["inserted_or_updated"]) == (2, 0)
    assert [
        (table, number, reason.split(":")[0]) for table, number, reason in quarantine(spark, lake_config)
    ] == [
        ("sales.customer", 1, "record not matched to a file of the batch"),
        ("sales.customer", 2, "record not matched to a file of the batch"),
    ]


def test_a_file_the_job_may_not_read_stops_its_table_and_is_neither_quarantined_nor_counted_applied(
    spark, lake_config, dms, monkeypatch
):
    """Given a CDC file S3 refuses to hand over (AccessDenied: a bucket policy or a KMS key the job role
    may not use; likewise throttling or a broken connection), and a good file of another table,
    When the batch is applied,
    Then that table fails naming the file and the cause, nothing of it is quarantined or recorded as
    applied (it is not bad data), the other table is applied; once access is back, the retried batch
    applies the file."""
    import lakehouse.dms.reader as reader
    from botocore.exceptions import ClientError

    denied = dms.cdc("sales.customer", COLUMNS, [("I", (1, "a", 1))])
    good = dms.cdc("sales.item", ["sku", "price"], [("I", ("A-1", 9.99))])
    real_first_line = reader.read_first_line

    def refusing(uri: str, *args):
        if uri.endswith(Path(denied).name):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
        return real_first_line(uri, *args)

    monkeypatch.setattr(reader, "read_first_line", refusing)
    report = apply_cdc(spark, lake_config, SCHEMA, manifest(denied, good, run_id="run-1"))

    (failed,) = report.failed
    assert failed.table == "sales.customer" and "AccessDenied" in failed.error and denied in failed.error
    assert rows_of(spark, lake_config.clean_table("sales_item")) == [("A-1", Decimal("9.99"))]
    assert not spark.catalog.tableExists(lake_config.quarantine)

    monkeypatch.setattr(reader, "read_first_line", real_first_line)
    retry = apply_cdc(spark, lake_config, SCHEMA, manifest(denied, good, run_id="run-1"))

    assert retry.ok, retry.failed
    assert rows_of(spark, lake_config.clean_table("sales_customer")) == [(1, "a", Decimal("1.00"))]
