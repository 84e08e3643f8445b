"""Source types → Iceberg types, and the DMS key and file-format contract (no Spark session needed)."""

from __future__ import annotations

from datetime import datetime

import pytest
from lake_contracts.dms_files import (
    NotADmsFileError,
    cdc_file_name,
    change_seq,
    load_file_name,
    parse_dms_key,
)
from lakehouse.base.schema import SchemaFile
from lakehouse.base.types import UnsupportedTypeError, can_widen, spark_type
from pyspark.sql import types as T

from tools.dms_csv import CsvFormat, write_dms_csv

D = T.DecimalType


@pytest.mark.parametrize(
    ("dialect", "source", "expected"),
    [
        ("mysql", "tinyint", T.IntegerType()),
        ("mysql", "tinyint(1)", T.BooleanType()),
        ("mysql", "smallint unsigned", T.IntegerType()),
        ("mysql", "int unsigned", T.LongType()),
        ("mysql", "bigint unsigned", D(20, 0)),
        ("mysql", "mediumint", T.IntegerType()),
        ("mysql", "decimal(7,2)", D(7, 2)),
        ("mysql", "float", T.FloatType()),
        ("mysql", "double", T.DoubleType()),
        ("mysql", "varchar(255)", T.StringType()),
        ("mysql", "longtext", T.StringType()),
        ("mysql", "datetime(6)", T.TimestampNTZType()),
        ("mysql", "timestamp", T.TimestampType()),
        ("mysql", "time", T.StringType()),
        ("mysql", "bit(1)", T.BooleanType()),
        ("mysql", "bit(8)", T.LongType()),
        ("mysql", "varbinary(16)", T.BinaryType()),
        ("mysql", "json", T.StringType()),
        ("mssql", "nvarchar(max)", T.StringType()),
        ("mssql", "datetime2(7)", T.TimestampNTZType()),
        ("mssql", "datetimeoffset", T.TimestampType()),
        ("mssql", "uniqueidentifier", T.StringType()),
        ("mssql", "money", D(19, 4)),
        ("mssql", "bit", T.BooleanType()),
        ("mssql", "timestamp", T.BinaryType()),
        ("mssql", "float(24)", T.FloatType()),
        ("mssql", "float", T.DoubleType()),
        ("postgresql", "integer", T.IntegerType()),
        ("postgresql", "bigserial", T.LongType()),
        ("postgresql", "numeric(38,10)", D(38, 10)),
        ("postgresql", "numeric", D(38, 6)),  # DMS: NUMERIC(28,6)
        ("mysql", "decimal", D(38, 0)),
        ("postgresql", "timestamp(3) without time zone", T.TimestampNTZType()),
        ("postgresql", "timestamp(6) with time zone", T.TimestampType()),
        ("postgresql", "time(3) without time zone", T.StringType()),
        ("postgresql", "tsvector", T.StringType()),
        ("postgresql", "int4range", T.StringType()),
        ("postgresql", "enum", T.StringType()),
        ("postgresql", "bit(1)", T.BooleanType()),
        ("postgresql", "bit(8)", T.StringType()),
        ("postgresql", "numeric(50,2)", T.StringType()),
        ("postgresql", "double precision", T.DoubleType()),
        ("postgresql", "character varying(20)", T.StringType()),
        ("postgresql", "timestamp without time zone", T.TimestampNTZType()),
        ("postgresql", "timestamp with time zone", T.TimestampType()),
        ("postgresql", "uuid", T.StringType()),
        ("postgresql", "jsonb", T.StringType()),
        ("postgresql", "bytea", T.BinaryType()),
        ("postgresql", "boolean", T.BooleanType()),
        ("postgresql", "integer[]", T.StringType()),
        ("sqlite", "INTEGER", T.LongType()),
        ("sqlite", "DECIMAL(7,2)", D(7, 2)),
        ("sqlite", "VARCHAR(50)", T.StringType()),
        ("sqlite", "DATE", T.DateType()),
        ("sqlite", "TIMESTAMP", T.TimestampNTZType()),
        ("sqlite", "REAL", T.DoubleType()),
        ("sqlite", "BLOB", T.BinaryType()),
        ("sqlite", "UNSIGNED BIG INT", T.LongType()),
    ],
)
def test_source_types_map_to_iceberg_types(dialect, source, expected):
    """Given a source column type, When mapped, Then it becomes the Iceberg type that holds it exactly."""
    assert spark_type(source, dialect) == expected


def test_unknown_types_are_an_error_not_a_string():
    """Given a type no mapping knows, When mapped, Then it fails loudly (never 'everything is a string')."""
    with pytest.raises(UnsupportedTypeError):
        spark_type("hyperloglog", "postgresql")


@pytest.mark.parametrize(
    ("current", "wanted", "allowed"),
    [
        (T.IntegerType(), T.LongType(), True),
        (T.FloatType(), T.DoubleType(), True),
        (D(7, 2), D(12, 2), True),
        (D(7, 2), D(12, 3), False),
        (T.LongType(), T.IntegerType(), False),
        (T.StringType(), T.LongType(), False),
    ],
)
def test_only_iceberg_type_promotions_count_as_widening(current, wanted, allowed):
    assert can_widen(current, wanted) is allowed


def test_load_files_count_in_hex_and_sort_by_their_number():
    """Given LOAD files 1..11, When named and parsed back, Then …09 comes before …0A and …0B."""
    names = [load_file_name(n) for n in range(1, 12)]
    assert names[8:11] == ["LOAD00000009.csv", "LOAD0000000A.csv", "LOAD0000000B.csv"]
    parsed = sorted(parse_dms_key(f"s3://raw/dms/sales/item/{n}") for n in reversed(names))
    assert [p.name for p in parsed] == names


def test_keys_name_their_schema_table_and_kind():
    cdc = parse_dms_key("s3://raw/dms/sales/web_sales/20261122-101010123.csv", 10)
    assert (cdc.source_schema, cdc.table, cdc.is_full_load, cdc.size) == ("sales", "web_sales", False, 10)
    assert cdc_file_name(datetime(2026, 11, 22, 10, 10, 10, 123999)) == "20261122-101010123.csv"
    with pytest.raises(NotADmsFileError):
        parse_dms_key("s3://raw/dms/sales/web_sales/notes.txt")
    with pytest.raises(NotADmsFileError):
        parse_dms_key("notes.csv")


def test_writer_quotes_like_dms_and_keeps_null_apart_from_empty_with_a_marker():
    """Given values with quotes, commas, newlines, null and empty strings,
    When written with and without a CsvNullValue marker,
    Then quoting is RFC 4180 and only the marker mode tells null from empty."""
    when = datetime(2026, 1, 2, 3, 4, 5, 6)
    rows = [("I", change_seq(1), when, ['say "hi", ok\nbye', None, ""])]
    assert write_dms_csv(["a", "b", "c"], rows) == (
        "Op,dms_timestamp,AR_H_CHANGE_SEQ,a,b,c\n"
        f'I,2026-01-02 03:04:05.000006,{"0" * 34}1,"say ""hi"", ok\nbye",,\n'
    )
    marked = write_dms_csv(["a", "b", "c"], rows, CsvFormat(csv_null_value="NULL"))
    assert marked.splitlines()[-1] == 'bye",NULL,""'


def test_schema_file_rejects_a_primary_key_that_is_not_a_column():
    with pytest.raises(ValueError, match="primary key"):
        SchemaFile.from_dict(
            {"tables": {"s.t": {"primary_key": ["nope"], "columns": [{"name": "a", "type": "int"}]}}}
        )


@pytest.mark.parametrize(
    ("key", "schema", "table", "order"),
    [
        # the AWS documentation's example: ten digits after the dash
        ("s3://raw/dms/hr/employee/20141029-1134010000.csv", "hr", "employee", "20141029113401000000000000"),
        (
            "s3://raw/dms/hr/employee/20261122-101010123.csv.gz",
            "hr",
            "employee",
            "20261122101010123000000000",
        ),
        # DatePartitionEnabled, with each DatePartitionSequence / delimiter
        ("s3://raw/dms/hr/employee/2026/11/22/20261122-101010123.csv", "hr", "employee", None),
        ("s3://raw/dms/hr/employee/2026/11/22/10/20261122-101010123.csv", "hr", "employee", None),
        ("s3://raw/dms/hr/employee/2026-11-22/20261122-101010123.csv", "hr", "employee", None),
        ("s3://raw/dms/hr/employee/20261122/20261122-101010123.csv", "hr", "employee", None),
    ],
)
def test_real_dms_cdc_keys_are_recognised(key, schema, table, order):
    """Given CDC keys as DMS writes them (any number of fraction digits, date partition folders),
    When parsed, Then schema and table are found and files order by their time."""
    parsed = parse_dms_key(key)
    assert (parsed.source_schema, parsed.table, parsed.is_full_load) == (schema, table, False)
    if order:
        assert parsed.order_key == order


def test_cdc_file_times_order_whatever_their_fraction_digits():
    """`…-1134010000` (4 fraction digits) comes after `…-113400999` (3) though it sorts before as text."""
    names = [
        "20261122-113400999.csv",
        "20261122-1134010000.csv",
        "20261122-113401.csv",
        "20261122-1134010001.csv",
    ]
    parsed = sorted(parse_dms_key(f"s3://r/dms/s/t/{n}") for n in names)
    assert [p.name for p in sorted(parsed, key=lambda p: p.order_key)] == [
        "20261122-113400999.csv",
        "20261122-113401.csv",
        "20261122-1134010000.csv",
        "20261122-1134010001.csv",
    ]


def test_a_cdc_file_without_change_sequences_gets_one_shaped_like_dms_s_from_its_time():
    """Given a CDC file of 2026-11-22 11:34:01.2345, Then its records' synthesized AR_H_CHANGE_SEQ starts with
    the time as DMS spells it (YYYYMMDDHHmmSShh) and leaves 12 digits for the record's position; LOAD
    files get none."""
    cdc = parse_dms_key("s3://r/dms/s/t/20261122-1134012345.csv")
    assert str(cdc.sequence_base) == "20261122113401234500000000000000000"
    assert cdc.written_at == datetime(2026, 11, 22, 11, 34, 1, 234500)
    assert parse_dms_key("s3://r/dms/s/t/LOAD00000001.csv").sequence_base is None


def test_parallel_load_segments_are_load_files():
    """DMS parallel load names its LOAD files per segment (LOAD_<segment>_<counter>)."""
    names = ["LOAD_2_00000001.csv", "LOAD_1_0000000A.csv", "LOAD_1_00000009.csv"]
    parsed = sorted(parse_dms_key(f"s3://r/dms/s/t/{n}") for n in names)
    assert all(p.is_full_load for p in parsed)
    assert [p.name for p in sorted(parsed, key=lambda p: p.order_key)] == [
        "LOAD_1_00000009.csv",
        "LOAD_1_0000000A.csv",
        "LOAD_2_00000001.csv",
    ]


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"s.t": {"columns": [{"name": "a\nb", "type": "int"}]}}, "control characters"),
        ({"s.t": {"columns": [{"name": "_dms_op", "type": "int"}]}}, "the jobs' own"),
        ({"s.t": {"columns": [{"name": "dms_commit_ts", "type": "int"}]}}, "rename the source column"),
        (
            {"s.t": {"columns": [{"name": "A", "type": "int"}, {"name": "a", "type": "int"}]}},
            "differ only in case",
        ),
        ({"s.t": {"columns": [{"name": "a", "type": "hyperloglog"}]}}, "s.t.a: no mapping"),
        ({"s.t": {"columns": [{"type": "int"}]}}, "malformed entry"),
        (
            {
                "s.t-1": {"columns": [{"name": "a", "type": "int"}]},
                "s.t_1": {"columns": [{"name": "a", "type": "int"}]},
            },
            "both be the clean table s_t_1",
        ),
    ],
)
def test_the_schema_file_is_checked_when_loaded(tables, message):
    """Given a schema file with a name the lake can't hold, a type no mapping knows, a malformed entry or
    two tables that would share a clean name, When loaded, Then a ValueError names the problem."""
    with pytest.raises(ValueError, match=message):
        SchemaFile.from_dict({"dialect": "mysql", "tables": tables})


def test_clean_table_names_are_what_glue_and_athena_accept():
    spec = SchemaFile.from_dict(
        {"tables": {"Sales.Order Items": {"columns": [{"name": "a", "type": "int"}]}}}
    )
    assert spec.tables["Sales.Order Items"].iceberg_name == "sales_order_items"
