"""The source-vs-clean checksum: same values from SQLite and from Iceberg give the same text."""

from datetime import date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from tools.verify import TableCheck, canonical


@pytest.mark.parametrize(
    ("from_source", "from_iceberg", "data_type"),
    [
        (12.5, Decimal("12.50"), T.DecimalType(7, 2)),
        ("12.50", Decimal("12.50"), T.DecimalType(7, 2)),
        (7, 7, T.LongType()),
        ("2024-02-29", date(2024, 2, 29), T.DateType()),
        ("2024-02-29 10:11:12", datetime(2024, 2, 29, 10, 11, 12), T.TimestampNTZType()),
        ("2024-02-29 10:11:12.000001", datetime(2024, 2, 29, 10, 11, 12, 1), T.TimestampNTZType()),
        (1, True, T.BooleanType()),
        (b"\x00\xff", bytearray(b"\x00\xff"), T.BinaryType()),
        (None, None, T.StringType()),
        ("", "", T.StringType()),
    ],
)
def test_values_from_both_sides_canonicalise_alike(from_source, from_iceberg, data_type):
    assert canonical(from_source, data_type) == canonical(from_iceberg, data_type)


def test_null_and_empty_string_and_different_values_stay_apart():
    assert canonical(None, T.StringType()) != canonical("", T.StringType())
    assert canonical(Decimal("1.01"), T.DecimalType(7, 2)) != canonical(Decimal("1.10"), T.DecimalType(7, 2))


def test_a_check_matches_only_when_counts_and_checksums_agree():
    assert TableCheck("t", 2, 2, "ab", "ab").matches
    assert not TableCheck("t", 2, 2, "ab", "ac").matches
    assert "MISMATCH" in TableCheck("t", 2, 3, "ab", "ab").line()


def test_the_table_checksum_ignores_row_order_and_sees_every_value():
    """Given rows of canonical fields, When checksummed (the reconcile's function), Then the same rows in another
    order check alike, and one value changed, a value moved to another column, or a row dropped do not."""
    from lakehouse.reconcile.plan import table_checksum

    rows = [["1", "a", "\\N"], ["2", "b", ""], ["3", "c", "x"]]
    assert table_checksum(rows) == table_checksum(list(reversed(rows)))
    assert table_checksum(rows) != table_checksum([["1", "a", "\\N"], ["2", "b", ""], ["3", "c", "y"]])
    assert table_checksum(rows) != table_checksum([["1", "a", "\\N"], ["2", "", "b"], ["3", "c", "x"]])
    assert table_checksum(rows) != table_checksum(rows[:2])
    assert len(table_checksum(rows)) == 32 and table_checksum([]) == "0" * 32
