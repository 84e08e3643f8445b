import csv
import io
from datetime import datetime

from lake_contracts.dms_files import cdc_file_name, change_seq, load_file_name, object_key
from localaws_plugin.dms_format import (
    AddedColumn,
    ChangeRow,
    FileLayout,
    S3TargetSettings,
    TableMapping,
    csv_line,
    split_into_files,
)

SETTINGS = S3TargetSettings(bucket_name="raw")
MOMENT = datetime(2026, 11, 22, 10, 10, 1, 123456)


def test_load_file_names_count_in_upper_case_hex() -> None:
    assert load_file_name(1) == "LOAD00000001.csv"
    assert load_file_name(9) == "LOAD00000009.csv"
    assert load_file_name(10) == "LOAD0000000A.csv"
    assert load_file_name(255) == "LOAD000000FF.csv"


def test_cdc_file_name_is_commit_time_to_the_millisecond() -> None:
    assert cdc_file_name(MOMENT) == "20261122-101001123.csv"


def test_change_seq_is_35_zero_padded_digits() -> None:
    assert change_seq(42) == "0" * 33 + "42"
    assert len(change_seq(10**20)) == 35
    assert change_seq(9) < change_seq(10)


def test_object_key_joins_folder_schema_table() -> None:
    assert (
        object_key("/dms/", "sales", "customer", "LOAD00000001.csv") == "dms/sales/customer/LOAD00000001.csv"
    )
    assert object_key("", "main", "t", "x.csv") == "main/t/x.csv"


def test_csv_quotes_quotes_delimiters_and_newlines_and_reads_back() -> None:
    values = ['say "hi"', "a,b", "line1\nline2", "plain", None, 7, 1.5]
    line = csv_line(values, SETTINGS)
    assert line == '"say ""hi""","a,b","line1\nline2",plain,,7,1.5\n'
    assert next(csv.reader(io.StringIO(line))) == ['say "hi"', "a,b", "line1\nline2", "plain", "", "7", "1.5"]


def test_csv_null_value_keeps_null_and_empty_string_apart() -> None:
    with_marker = S3TargetSettings(bucket_name="raw", csv_null_value="NULL")
    assert csv_line([None, ""], with_marker) == 'NULL,""\n'
    assert csv_line([None, ""], SETTINGS) == ",\n"


def test_layout_orders_op_timestamp_data_before_image_and_added_columns() -> None:
    layout = FileLayout(
        include_op=True,
        timestamp_column="dms_timestamp",
        data_columns=("id", "name"),
        before_image_columns=(("BI_id", "id"),),
        added_columns=(AddedColumn("AR_H_CHANGE_SEQ", "$AR_H_CHANGE_SEQ"),),
    )
    row = ChangeRow("U", 5, MOMENT, {"id": 2, "name": "x"}, {"id": 1})
    assert layout.header() == ["Op", "dms_timestamp", "id", "name", "BI_id", "AR_H_CHANGE_SEQ"]
    assert layout.record(row) == ["U", "2026-11-22 10:10:01.123456", 2, "x", 1, change_seq(5)]


def test_split_into_files_honours_max_rows_and_repeats_the_header() -> None:
    layout = FileLayout(include_op=False, timestamp_column="", data_columns=("id",))
    rows = [ChangeRow("I", 1, MOMENT, {"id": i}) for i in range(5)]
    files = split_into_files(layout, rows, SETTINGS, max_rows=2)
    assert files == ["id\n0\n1\n", "id\n2\n3\n", "id\n4\n"]


def test_split_into_files_honours_max_file_size() -> None:
    layout = FileLayout(include_op=False, timestamp_column="", data_columns=("v",))
    rows = [ChangeRow("I", 1, MOMENT, {"v": "x" * 600}) for _ in range(4)]
    files = split_into_files(layout, rows, S3TargetSettings(bucket_name="b", max_file_size_kb=1))
    assert len(files) == 4
    assert all(f.startswith("v\n") for f in files)


def test_settings_from_s3_settings_and_extra_connection_attributes() -> None:
    settings = S3TargetSettings.from_endpoint(
        {"BucketName": "raw", "BucketFolder": "dms", "CdcMaxBatchInterval": 2, "IncludeOpForFullLoad": True},
        "addColumnName=true;timestampColumnName=dms_timestamp;csvNullValue=NULL",
    )
    assert settings.bucket_name == "raw"
    assert settings.bucket_folder == "dms"
    assert settings.include_op_for_full_load is True
    assert settings.timestamp_column_name == "dms_timestamp"
    assert settings.csv_null_value == "NULL"
    assert settings.cdc_max_batch_interval_seconds == 2


def test_table_mapping_selection_wildcards_and_added_columns() -> None:
    mapping = TableMapping.parse(
        {
            "rules": [
                {
                    "rule-type": "selection",
                    "rule-id": "1",
                    "rule-name": "all",
                    "rule-action": "include",
                    "object-locator": {"schema-name": "sales", "table-name": "%"},
                },
                {
                    "rule-type": "selection",
                    "rule-id": "2",
                    "rule-name": "tmp",
                    "rule-action": "exclude",
                    "object-locator": {"schema-name": "sales", "table-name": "tmp_%"},
                },
                {
                    "rule-type": "transformation",
                    "rule-id": "3",
                    "rule-name": "seq",
                    "rule-action": "add-column",
                    "rule-target": "column",
                    "object-locator": {"schema-name": "%", "table-name": "%"},
                    "value": "AR_H_CHANGE_SEQ",
                    "expression": "$AR_H_CHANGE_SEQ",
                    "data-type": {"type": "string", "length": 50},
                },
            ]
        }
    )
    assert mapping.selects("sales", "customer")
    assert not mapping.selects("sales", "tmp_x")
    assert not mapping.selects("other", "customer")
    assert [c.name for c in mapping.added_columns_for("sales", "customer")] == ["AR_H_CHANGE_SEQ"]
