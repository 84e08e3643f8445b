"""The full-load job and the job entry points (arguments in, report out, exit code)."""

from __future__ import annotations

import json
from decimal import Decimal
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.io.iceberg import table_properties
from lakehouse.jobs.cdc import main as cdc_main
from lakehouse.jobs.full_load import main as full_load_main

from tests.support import DmsWriter, manifest, rows_of, schema_of, snapshot_count

pytestmark = pytest.mark.spark

SCHEMA = schema_of(
    {
        "sales.item": (["sku"], [("sku", "varchar(10)"), ("price", "decimal(7,2)")]),
        "sales.region": (["code"], [("code", "char(2)"), ("name", "varchar(20)")]),
    }
)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def test_full_load_reads_every_load_file_of_every_table(spark, lake_config, dms):
    """Given two tables, one with its rows over three LOAD files,
    When the full load runs,
    Then both tables hold all their rows with source types, in zstd data files written at level 1 (the
    level of pyarrow's floor; Parquet's default 3 cost the full load's write more CPU)."""
    dms.load("sales.item", ["sku", "price"], [("A", 1.5)], counter=1)
    dms.load("sales.item", ["sku", "price"], [("B", 2)], counter=2)
    dms.load("sales.item", ["sku", "price"], [("C", 3.25)], counter=10)
    dms.load("sales.region", ["code", "name"], [("NY", "New York"), ("CA", "California")])

    report = full_load(spark, lake_config, SCHEMA, str(dms.root))

    assert rows_of(spark, lake_config.clean_table("sales_item")) == [
        ("A", Decimal("1.50")),
        ("B", Decimal("2.00")),
        ("C", Decimal("3.25")),
    ]
    assert rows_of(spark, lake_config.clean_table("sales_region")) == [
        ("CA", "California"),
        ("NY", "New York"),
    ]
    assert {t.table: t.files for t in report.tables} == {"sales.item": 3, "sales.region": 1}
    item = lake_config.clean_table("sales_item")
    assert table_properties(spark, item)["write.parquet.compression-level"] == "1"
    data_files = [path for (path,) in spark.sql(f"SELECT file_path FROM {item}.files").collect()]
    codecs = {
        pq.ParquetFile(urlparse(p).path).metadata.row_group(0).column(0).compression for p in data_files
    }
    assert codecs == {"ZSTD"}


def test_rerunning_the_full_load_keeps_cdc_changes_and_a_reload_takes_the_new_load_files(
    spark, lake_config, dms
):
    """Given a loaded table (snapshot at change 10) with a CDC change applied (20),
    When the full load runs again, Then nothing changes (no new snapshot);
    When DMS reloads the table (new LOAD files at change 30) and the job runs with reload,
    Then the table is the new LOAD files."""
    dms.load("sales.item", ["sku", "price"], [("A", 1), ("Z", 26)], snapshot_seq=10)
    full_load(spark, lake_config, SCHEMA, str(dms.root), tables=["sales.item"])
    change = dms.cdc("sales.item", ["sku", "price"], [("U", ("A", 9))], seqs=[20])
    apply_cdc(spark, lake_config, SCHEMA, manifest(change))
    table = lake_config.clean_table("sales_item")
    snapshots = snapshot_count(spark, table)

    full_load(spark, lake_config, SCHEMA, str(dms.root), tables=["sales.item"])
    assert rows_of(spark, table) == [("A", Decimal("9.00")), ("Z", Decimal("26.00"))]
    assert snapshot_count(spark, table) == snapshots

    dms.load("sales.item", ["sku", "price"], [("A", 9), ("B", 2)], snapshot_seq=30)
    full_load(spark, lake_config, SCHEMA, str(dms.root), tables=["sales.item"], reload=True)
    assert rows_of(spark, table) == [("A", Decimal("9.00")), ("B", Decimal("2.00"))]


def test_job_entry_points_take_glue_arguments_and_report(spark, lake_config, dms, tmp_path):
    """Given a schema file, LOAD files and a manifest on disk,
    When the full-load and CDC entry points run with Glue-style arguments (plus Glue's own extras),
    Then they exit 0, write their JSON reports, and the table holds the changes."""
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    dms.load("sales.region", ["code", "name"], [("NY", "New York")])
    change = dms.cdc("sales.region", ["code", "name"], [("I", ("TX", "Texas")), ("D", ("NY", None))])
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest(change, run_id="run-7").to_dict()))
    common = [
        "--catalog_type",
        "hadoop",
        "--warehouse",
        lake_config.warehouse,
        "--clean_database",
        lake_config.clean_database,
        "--schema_file",
        str(schema_file),
        "--JOB_ID",
        "j_1",
        "--job-bookmark-option",
        "job-bookmark-disable",
    ]

    assert full_load_main([*common, "--raw_path", str(dms.root), "--tables", "sales.region"]) == 0
    assert (
        cdc_main([*common, "--manifest", str(manifest_file), "--report_uri", str(tmp_path / "r.json")]) == 0
    )

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run_id"] == "run-7"
    assert report["totals"]["inserted_or_updated"] == 1 and report["totals"]["deleted"] == 1
    assert rows_of(spark, lake_config.clean_table("sales_region")) == [("TX", "Texas")]


def test_a_raw_path_without_load_files_is_an_error_not_empty_tables(spark, lake_config, tmp_path):
    """Given a --raw_path with no DMS files under it (a typo, or DMS not done), When the full-load job
    runs, Then it exits with an error saying where it looked, and creates no table."""
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    arguments = ["--warehouse", lake_config.warehouse, "--clean_database", lake_config.clean_database]

    with pytest.raises(SystemExit, match="no DMS LOAD files under"):
        full_load_main([*arguments, "--schema_file", str(schema_file), "--raw_path", str(empty)])

    assert not spark.catalog.tableExists(lake_config.clean_table("sales_item"))


def test_a_table_without_load_files_keeps_what_cdc_applied_and_counts_as_loaded(spark, lake_config, dms):
    """Given a table DMS wrote no LOAD files for (empty at the source when loaded) whose first rows came
    by CDC, When the full load runs, Then the rows stay and the table counts as loaded (a re-run skips it)."""
    dms.load("sales.item", ["sku", "price"], [("A", 1)])
    change = dms.cdc("sales.region", ["code", "name"], [("I", ("NY", "New York"))])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(change)).ok

    report = full_load(spark, lake_config, SCHEMA, str(dms.root))

    assert report.ok, report.failed
    region = lake_config.clean_table("sales_region")
    assert rows_of(spark, region) == [("NY", "New York")]
    snapshots = snapshot_count(spark, region)
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    assert snapshot_count(spark, region) == snapshots
