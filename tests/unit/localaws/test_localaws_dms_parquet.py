"""The local DMS's Parquet output (DataFormat=parquet): DMS's columns, typed from the source's DDL."""

from __future__ import annotations

import io
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from localaws_plugin.dms_format import AddedColumn, ChangeRow, FileLayout, S3TargetSettings
from localaws_plugin.dms_parquet import arrow_type, parquet_files

DECLARED = {
    "id": "INTEGER",
    "big": "BIGINT",
    "price": "DECIMAL(7,2)",
    "born": "DATE",
    "seen": "TIMESTAMP",
    "name": "VARCHAR(40)",
    "ratio": "REAL",
    "avatar": "BLOB",
}
AT = datetime(2026, 11, 24, 10, 0, 0, 123456)


def test_source_types_map_to_the_parquet_types_dms_writes() -> None:
    assert arrow_type("DECIMAL(7,2)") == pa.decimal128(7, 2)
    assert arrow_type("numeric(10)") == pa.decimal128(10, 0)
    assert arrow_type("INTEGER") == pa.int32() and arrow_type("BIGINT") == pa.int64()
    assert arrow_type("DATE") == pa.date32() and arrow_type("DATETIME") == pa.timestamp("us")
    assert arrow_type("CHAR(16)") == pa.string() and arrow_type("BLOB") == pa.binary()


def test_a_cdc_file_holds_ops_as_text_and_values_typed_with_nulls_as_nulls() -> None:
    """Given an insert, an update and a delete of rows holding every kind of value (SQLite's text dates and
    REAL decimals among them), When they are written as Parquet, Then Op, the timestamp column and the change
    sequence are strings, each data column has its source's Parquet type, and a null is a null — an empty
    string stays an empty string (Parquet needs no CsvNullValue)."""
    layout = FileLayout(
        include_op=True,
        timestamp_column="dms_timestamp",
        data_columns=tuple(DECLARED),
        before_image_columns=(("BI_id", "id"),),
        added_columns=(AddedColumn("AR_H_CHANGE_SEQ", "$AR_H_CHANGE_SEQ"),),
    )
    full = {
        "id": 1,
        "big": 2**40,
        "price": 12.3,
        "born": "1990-02-28",
        "seen": "2026-11-24 09:59:59.500000",
        "name": "",
        "ratio": 0.25,
        "avatar": b"\xca\xfe",
    }
    rows = [
        ChangeRow("I", 7, AT, full),
        # a BLOB as the captures hand it over: hex digits (SQLite's hex() in its change log, PostgreSQL's bytea)
        ChangeRow("U", 8, AT, full | {"name": None, "price": "9.99", "avatar": "CAFE"}, {"id": 1}),
        ChangeRow("D", 9, AT, dict.fromkeys(DECLARED) | {"id": 1}),
    ]
    (body,) = parquet_files(layout, rows, S3TargetSettings(bucket_name="raw"), DECLARED)
    table = pq.read_table(io.BytesIO(body))

    assert table.schema.field("Op").type == pa.string()
    assert table.schema.field("AR_H_CHANGE_SEQ").type == pa.string()
    assert table.schema.field("price").type == pa.decimal128(7, 2)
    assert table.schema.field("BI_id").type == pa.int32()
    assert table.to_pylist() == [
        {
            "Op": "I",
            "dms_timestamp": "2026-11-24 10:00:00.123456",
            "id": 1,
            "big": 2**40,
            "price": Decimal("12.30"),
            "born": date(1990, 2, 28),
            "seen": datetime(2026, 11, 24, 9, 59, 59, 500000),
            "name": "",
            "ratio": 0.25,
            "avatar": b"\xca\xfe",
            "BI_id": None,
            "AR_H_CHANGE_SEQ": "00000000000000000000000000000000007",
        },
        {
            "Op": "U",
            "dms_timestamp": "2026-11-24 10:00:00.123456",
            "id": 1,
            "big": 2**40,
            "price": Decimal("9.99"),
            "born": date(1990, 2, 28),
            "seen": datetime(2026, 11, 24, 9, 59, 59, 500000),
            "name": None,
            "ratio": 0.25,
            "avatar": b"\xca\xfe",
            "BI_id": 1,
            "AR_H_CHANGE_SEQ": "00000000000000000000000000000000008",
        },
        {
            "Op": "D",
            "dms_timestamp": "2026-11-24 10:00:00.123456",
            "id": 1,
            **dict.fromkeys(("big", "price", "born", "seen", "name", "ratio", "avatar", "BI_id")),
            "AR_H_CHANGE_SEQ": "00000000000000000000000000000000009",
        },
    ]


def test_max_rows_splits_files() -> None:
    layout = FileLayout(include_op=True, timestamp_column="", data_columns=("id",))
    rows = [ChangeRow("I", n, AT, {"id": n}) for n in range(5)]
    files = parquet_files(layout, rows, S3TargetSettings(bucket_name="raw"), {"id": "INTEGER"}, max_rows=2)
    assert [pq.read_table(io.BytesIO(f)).num_rows for f in files] == [2, 2, 1]
