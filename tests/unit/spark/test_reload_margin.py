"""A reload whose LOAD rows carry no change sequence, placed by the time DMS started it (the margin)."""

from __future__ import annotations

from datetime import datetime

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.clean_table import sequence_at
from lakehouse.apply.full_load import full_load

from tests.support import BASE_TIME, DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

ORDERS = "shop.orders"
COLUMNS = ["id", "note"]
SCHEMA = schema_of({ORDERS: (["id"], [("id", "int"), ("note", "varchar(40)")])})


def at(hour: int, minute: int, second: int = 0) -> int:
    return int(sequence_at(datetime(2026, 11, 22, hour, minute, second)))


def orders(config) -> str:
    return config.clean_table("shop_orders")


def applied(spark, config, path, run_id):
    report = apply_cdc(spark, config, SCHEMA, manifest(path, run_id=run_id))
    assert report.ok, (report.failed, report.error)
    return report


def test_no_row_stays_stale_when_the_reload_removed_the_file_of_its_newer_change(
    spark, lake_config, tmp_path
):
    """Given rows 1-4 loaded, and CDC applied before DMS reloads the table at 10:00 (its LOAD rows carry no
    sequence; margin 300 s): 1 and 2 changed at 09:58, 3 changed at 10:06; then 1 changed again at 09:59
    and 2 deleted at 09:59:30, in files the reload removed before they were applied (DROP_AND_CREATE),
    When the reload is applied, then a late file changes 4 at 09:54 and 1 at 10:01,
    Then 1 and 4 hold the LOAD rows (read after 09:59), 1 then its 10:01 change; 2 is gone (absent from
    the LOAD rows); 3 keeps its 10:06 change (later than the reload's start plus the margin); the 09:54
    change is older than the reload and ignored."""
    dms = DmsWriter(tmp_path / "raw" / "dms")
    dms.load(ORDERS, COLUMNS, [(1, "a"), (2, "b"), (3, "c"), (4, "d")], moment=datetime(2026, 11, 22, 8, 0))
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    before = dms.cdc(
        ORDERS,
        COLUMNS,
        [("U", (1, "1 at 09:58")), ("U", (2, "2 at 09:58")), ("U", (3, "3 at 10:06"))],
        seqs=[at(9, 58), at(9, 58, 1), at(10, 6)],
    )
    applied(spark, lake_config, before, "b1")
    # DMS reads the table at 10:00:00.123456 (BASE_TIME): 1 as changed at 09:59, 2 deleted at 09:59:30.
    dms.load(ORDERS, COLUMNS, [(1, "1 at 09:59"), (3, "3 read"), (4, "4 read")], moment=BASE_TIME)

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")
    assert report.ok, report.failed
    reloaded = rows_of(spark, orders(lake_config))
    late = dms.cdc(
        ORDERS, COLUMNS, [("U", (4, "4 at 09:54")), ("U", (1, "1 at 10:01"))], seqs=[at(9, 54), at(10, 1)]
    )
    applied(spark, lake_config, late, "b2")

    assert reloaded == [(1, "1 at 09:59"), (3, "3 at 10:06"), (4, "4 read")]
    assert rows_of(spark, orders(lake_config)) == [(1, "1 at 10:01"), (3, "3 at 10:06"), (4, "4 read")]
