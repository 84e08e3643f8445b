"""A real DMS-format corpus (tests/corpus/dms): quotes, commas and newlines inside values, null vs
empty string (CsvNullValue=NULL), unicode, microsecond timestamps, decimals, bits, binary as hex,
and LOAD files numbered in hex (…09 before …0A)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.run import ApplyOptions
from lakehouse.dms.reader import ReaderOptions

from tests.support import manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "dms"
SCHEMA = schema_of(
    {
        "crm.contact": (
            ["contact_id"],
            [
                ("contact_id", "int"),
                ("full_name", "nvarchar(100)"),
                ("note", "nvarchar(max)"),
                ("balance", "decimal(10,2)"),
                ("is_active", "bit"),
                ("born_on", "date"),
                ("updated_at", "datetime2(6)"),
                ("avatar", "varbinary(16)"),
                ("score", "float"),
            ],
        )
    },
    dialect="mssql",
)
OPTIONS = ApplyOptions(reader=ReaderOptions(csv_null_value="NULL"))
COLUMNS = [
    "contact_id",
    "full_name",
    "note",
    "balance",
    "is_active",
    "born_on",
    "updated_at",
    "avatar",
    "score",
]


def test_full_load_then_cdc_of_the_corpus(spark, lake_config):
    """Given the corpus's LOAD files (three, hex-numbered) and one CDC file,
    When the full load and then the CDC file are applied,
    Then every value arrives exactly as the source held it."""
    load = full_load(spark, lake_config, SCHEMA, str(CORPUS), options=OPTIONS)
    assert not load.failed and load.tables[0].files == 3 and load.tables[0].quarantined_records == 0

    cdc = apply_cdc(
        spark, lake_config, SCHEMA, manifest(str(CORPUS / "crm/contact/20261121-093000123.csv")), OPTIONS
    )
    assert not cdc.failed and cdc.tables[0].quarantined_records == 0

    assert rows_of(spark, lake_config.clean_table("crm_contact"), COLUMNS) == [
        (
            1,
            "Zoë O'Brien",
            'said "bye"\nand left, finally',
            Decimal("1234.57"),
            False,
            date(1990, 2, 28),
            datetime(2026, 11, 21, 9, 29, 59, 123456),
            bytearray.fromhex("CAFE"),
            1.5,
        ),
        (3, "李小龍", "", Decimal("0.00"), True, None, None, None, None),
        (
            4,
            "",
            "",
            Decimal("99999999.99"),
            False,
            date(2000, 1, 1),
            datetime(2000, 1, 1),
            bytearray.fromhex("00FF"),
            0.0,
        ),
        (5, "😀 emoji", None, Decimal("0.50"), True, None, datetime(2026, 11, 21, 9, 29, 59), None, None),
        (
            9,
            "Nine",
            "ends with newline\n",
            Decimal("9.09"),
            True,
            date(1999, 9, 9),
            datetime(1999, 9, 9, 9, 9, 9, 90909),
            bytearray.fromhex("09"),
            9.0,
        ),
        (
            10,
            "Ten, after nine",
            "tab\tinside",
            Decimal("10.10"),
            True,
            date(1970, 1, 1),
            datetime(1970, 1, 1, 0, 0, 0, 1),
            bytearray(),
            10.0,
        ),
    ]
    commit_ts = (
        spark.table(lake_config.clean_table("crm_contact")).where("contact_id = 5").first()["dms_commit_ts"]
    )
    assert commit_ts == datetime(2026, 11, 21, 9, 29, 59, 323456)
