"""A job writes a clean table only for the source table it records: another source reaching the same clean
name is refused with the table, the recorded and the asked source named; a table recording none is adopted."""

from __future__ import annotations

from datetime import datetime

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.recorded_source import SourceMismatchError, recorded_source, source_to_adopt
from lakehouse.io.iceberg import SOURCE_TABLE, table_properties
from lakehouse.reconcile.run import empty_clean_table

from tests.support import DmsWriter, manifest, rows_of, schema_of

COLUMNS = ["id", "v"]
BODY = (["id"], [("id", "int"), ("v", "varchar(10)")])
FIRST, SECOND = "sales.order_details", "sales.Order Details"  # both are the clean table sales_order_details


def test_a_table_recording_another_source_is_refused_and_one_recording_none_is_adopted() -> None:
    """Given a table's properties, When asked to write it for a source table, Then: recording that source,
    nothing to do; recording none, the source is to be recorded (also when only the comment of an older
    release names it); recording another (property or comment), an error naming table, recorded and asked."""
    table = "lake.clean.sales_order_details"
    assert source_to_adopt(table, {SOURCE_TABLE: FIRST}, FIRST) == {}
    assert source_to_adopt(table, {}, FIRST) == {SOURCE_TABLE: FIRST}
    assert source_to_adopt(table, {"comment": f"DMS replica of {FIRST}"}, FIRST) == {SOURCE_TABLE: FIRST}
    assert source_to_adopt(table, {"comment": "made by hand"}, FIRST) == {SOURCE_TABLE: FIRST}
    for properties in ({SOURCE_TABLE: FIRST}, {"comment": f"DMS replica of {FIRST}"}):
        with pytest.raises(SourceMismatchError) as refused:
            source_to_adopt(table, properties, SECOND)
        assert all(text in str(refused.value) for text in (table, repr(FIRST), repr(SECOND)))
    assert recorded_source({SOURCE_TABLE: " a.b ", "comment": "DMS replica of x.y"}) == " a.b "


@pytest.mark.spark
def test_a_second_source_reaching_a_clean_name_is_refused_by_cdc_and_reload(spark, lake_config, tmp_path):
    """Given `sales.order_details` loaded into `sales_order_details`, and then a schema file that names
    `sales.Order Details` instead (the same clean name),
    When CDC applies a file of `sales.Order Details`, a reload loads its LOAD file and a reconcile empties it,
    Then all fail for that table with an error naming the table, the recorded and the asked source, and the
    table holds the first source's rows; once the table records no source (an older release's), CDC of its
    own source adopts it: the source is recorded and the change applied."""
    dms = DmsWriter(tmp_path / "raw")
    dms.load(FIRST, COLUMNS, [(1, "a")])
    assert full_load(spark, lake_config, schema_of({FIRST: BODY}), str(dms.root)).ok
    table = lake_config.clean_table("sales_order_details")

    other = schema_of({SECOND: BODY})
    change = dms.cdc(SECOND, COLUMNS, [("I", (2, "intruder"))])
    report = apply_cdc(spark, lake_config, other, manifest(change, run_id="cdc-other"))
    dms.load(SECOND, COLUMNS, [(3, "intruder")])
    reload = full_load(spark, lake_config, other, str(dms.root), reload=True, run_id="reload-other")

    for refused in (report, reload):
        assert not refused.ok
        (error,) = [t.error for t in refused.tables if t.table == SECOND]
        assert error is not None and "SourceMismatchError" in error
        assert table in error and repr(FIRST) in error and repr(SECOND) in error
    assert rows_of(spark, table) == [(1, "a")]
    assert table_properties(spark, table)[SOURCE_TABLE] == FIRST
    with pytest.raises(SourceMismatchError, match="sales_order_details"):  # the reconcile's emptying too
        empty_clean_table(spark, lake_config, other.tables[SECOND], datetime(2026, 11, 22), "reconcile-other")
    assert rows_of(spark, table) == [(1, "a")]

    spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('{SOURCE_TABLE}', 'comment')")
    own = dms.cdc(FIRST, COLUMNS, [("U", (1, "A"))])
    assert apply_cdc(spark, lake_config, schema_of({FIRST: BODY}), manifest(own, run_id="cdc-own")).ok
    assert rows_of(spark, table) == [(1, "A")]
    assert table_properties(spark, table)[SOURCE_TABLE] == FIRST
