"""Readers other than Spark read a clean table the pipeline wrote (a full load, then a CDC batch whose update and
delete are merge-on-read delete files): DuckDB's Iceberg extension and PyIceberg, through the table's current
metadata (what docs/DEPLOY.md's recipes do) and through a metadata.json a reader was pinned to before later
commits (DuckDB's `iceberg_scan` of a file, Snowflake's `METADATA_FILE_PATH`)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

# The source's names in mixed case, as PostgreSQL (quoted) and MySQL allow: the clean table's are lower case.
SOURCE_COLUMNS = ["Id", "Name", "Amount"]
SCHEMA = schema_of(
    {"sales.customer": (["Id"], [("Id", "int"), ("Name", "varchar(20)"), ("Amount", "decimal(7,2)")])}
)
COLUMNS = ["id", "name", "amount"]
LOADED = [(1, "Ann", Decimal("1.50")), (2, "Bob", Decimal("2.00")), (3, "Cy", Decimal("3.00"))]
CHANGED = [(1, "Ann", Decimal("1.50")), (2, "Bob", Decimal("20.00")), (4, "Di", Decimal("4.00"))]


def _write(spark: Any, config: Any, raw: Path) -> str:
    """The pipeline's full load of LOADED, then one CDC batch (update 2, delete 3, insert 4): CHANGED."""
    dms = DmsWriter(raw)
    dms.load("sales.customer", SOURCE_COLUMNS, LOADED, snapshot_seq=10)
    full_load(spark, config, SCHEMA, str(dms.root))
    return dms.cdc(
        "sales.customer",
        SOURCE_COLUMNS,
        [("U", (2, "Bob", 20)), ("D", (3, "Cy", 3)), ("I", (4, "Di", 4))],
        seqs=[20, 21, 22],
    )


def _current_metadata(spark: Any, table: str) -> str:
    """The table's current metadata.json (its newest metadata log entry), as a path."""
    row = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()
    return str(row["file"]).removeprefix("file:")


def _table_folder(metadata_file: str) -> str:
    return str(Path(metadata_file).parent.parent)


def _duckdb() -> Any:
    """DuckDB with its Iceberg extension (and Avro, which it reads manifests with) loaded from their PyPI
    wheels' files: nothing is downloaded."""
    import duckdb

    connection = duckdb.connect(config={"autoinstall_known_extensions": "false"})
    for extension in ("avro", "iceberg"):
        connection.load_extension(_extension_file(extension))
    return connection


def _extension_file(name: str) -> str:
    """The extension's file in its wheel (`duckdb-extension-<name>`, the same version as `duckdb`)."""
    from importlib import import_module

    import duckdb

    package = Path(str(import_module(f"duckdb_extension_{name}").__file__)).parent
    return str(package / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension")


def _duckdb_rows(scan: str) -> list[tuple]:
    query = f"SELECT id, name, amount FROM iceberg_scan('{scan}') ORDER BY id"
    return [tuple(row) for row in _duckdb().execute(query).fetchall()]


def _pyiceberg_rows(metadata_file: str) -> list[tuple]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_file)
    arrow = table.scan(selected_fields=tuple(COLUMNS)).to_arrow().sort_by("id")
    return list(zip(*(arrow.column(c).to_pylist() for c in COLUMNS), strict=True))


@pytest.fixture(scope="module")
def written(spark, base_config, tmp_path_factory) -> tuple[str, str]:
    """(clean table, its current metadata.json) after the pipeline wrote LOADED then CHANGED."""
    config = replace(base_config, clean_database="readers")
    change = _write(spark, config, tmp_path_factory.mktemp("readers-raw") / "dms")
    assert apply_cdc(spark, config, SCHEMA, manifest(change)).ok
    table = config.clean_table("sales_customer")
    assert rows_of(spark, table, COLUMNS) == CHANGED
    return table, _current_metadata(spark, table)


def test_duckdb_reads_the_current_table_through_its_folder(written):
    """Given a clean table the pipeline wrote locally, When DuckDB scans its folder (the current metadata, through
    the version hint a local warehouse keeps), Then it reads the table as Spark does, deletes applied."""
    _, metadata = written
    assert _duckdb_rows(_table_folder(metadata)) == CHANGED
    assert _duckdb_rows(metadata) == CHANGED


def test_pyiceberg_reads_the_current_table_from_its_metadata(written):
    """Given the same table, When PyIceberg reads its current metadata.json (on AWS: the Glue catalog's
    `metadata_location`, what `load_catalog("glue").load_table` reads), Then it reads the same rows, under
    lower-case column names whatever the source's case (Athena lower-cases every name it is asked for)."""
    from pyiceberg.table import StaticTable

    _, metadata = written
    assert _pyiceberg_rows(metadata) == CHANGED
    names = StaticTable.from_metadata(metadata).schema().column_names
    assert [n for n in names if not n.startswith("dms_")] == COLUMNS


def test_a_reader_pinned_to_a_metadata_file_still_reads_it_an_hour_of_commits_later(
    spark, base_config, tmp_path
):
    """Given a table the pipeline loaded and a reader pinned to its metadata.json then, When 60 more commits follow
    (an hour of batches; metadata-only commits here, to keep the test cheap) and a CDC batch, Then the file is
    still there and DuckDB and PyIceberg read the table as it was through it (Iceberg deleted it 50 commits
    later before), while the current metadata reads the change; the table keeps the newest 1440."""
    config = replace(base_config, clean_database="pinned_readers")
    change = _write(spark, config, tmp_path / "dms")
    table = config.clean_table("sales_customer")
    pinned = _current_metadata(spark, table)
    for number in range(60):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('readers.test-commit'='{number}')")
    assert apply_cdc(spark, config, SCHEMA, manifest(change)).ok

    assert Path(pinned).is_file()
    assert _duckdb_rows(pinned) == LOADED
    assert _pyiceberg_rows(pinned) == LOADED
    assert _duckdb_rows(_current_metadata(spark, table)) == CHANGED
    properties = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    assert {r["key"]: r["value"] for r in properties}["write.metadata.previous-versions-max"] == "1440"
