"""Reconcile repair of a table the source left EMPTY: DMS's reload of an empty table writes no LOAD
file, so no reload ever reaches the lake; the reconcile empties the clean table itself, as a reload with no
rows would (a floor placed at the check: older changes stay out, newer ones apply)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.clean_table import sequence_at
from lakehouse.io.iceberg import LOAD_FLOOR, table_properties
from lakehouse.reconcile.plan import ReconcileOptions
from lakehouse.reconcile.run import dms_reloader, reconcile

from tests.support import DmsWriter, manifest, rows_of
from tests.unit.spark.test_reconcile import (  # noqa: F401 (pg: the module's PostgreSQL fixture)
    FMT,
    OPTIONS,
    SMALL,
    FakeDms,
    connect,
    jdbc_source,
    load_lake,
    pg,
)

RELOAD = ReconcileOptions(**{**SMALL.__dict__, "repair_mode": "reload"})


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def test_a_table_the_source_left_empty_is_emptied_and_stays_so_until_a_newer_change(
    spark,
    lake_config,
    pg,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """Given two clean tables with rows, the source's `gone` TRUNCATEd (empty) and `fewer` missing 5 rows,
    When reconcile runs with repair_mode reload,
    Then `gone` is emptied in the lake (DMS is not asked: its reload would write no LOAD file), `fewer` is
    reloaded by DMS as before, and both count as repairs;
    When a late change older than the check (an update of a deleted key) and a newer insert are applied,
    Then only the newer insert is in the table; and a second reconcile finds the table equal."""
    s = "rc_empty"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        for table in ("gone", "fewer"):
            db.execute(f"CREATE TABLE {s}.{table} (id int PRIMARY KEY, v text)")
            db.execute(f"INSERT INTO {s}.{table} SELECT i, 'v' || i FROM generate_series(1, 20) i")
    raw = tmp_path / "raw"
    schema = load_lake(spark, lake_config, pg, s, ["gone", "fewer"], raw)
    gone = lake_config.clean_table(schema.tables[f"{s}.gone"].iceberg_name)
    fewer = lake_config.clean_table(schema.tables[f"{s}.fewer"].iceberg_name)
    assert len(rows_of(spark, gone)) == 20
    with connect(pg) as db:
        db.execute(f"TRUNCATE {s}.gone")  # DMS sends no TRUNCATE from PostgreSQL
        db.execute(f"DELETE FROM {s}.fewer WHERE id > 15")  # nor these deletes (say, the task was down)
    source = jdbc_source(spark, pg)
    dms = FakeDms()
    before = _now()

    report = reconcile(
        spark, lake_config, schema, source, RELOAD, run_id="e1", reload_tables=dms_reloader(dms, "arn:t")
    )

    assert report.ok, report.to_dict()
    assert [(t.table, t.extra, t.source_empty, t.emptied, t.repaired) for t in report.tables] == [
        (f"{s}.fewer", 5, False, False, True),
        (f"{s}.gone", 20, True, True, True),
    ]
    assert report.repairs == 2 and report.totals()["repairs"] == 2
    assert dms.calls == [
        {
            "ReplicationTaskArn": "arn:t",
            "TablesToReload": [{"SchemaName": s, "TableName": "fewer"}],
            "ReloadOption": "data-reload",
        }
    ]
    assert rows_of(spark, gone) == []
    assert len(rows_of(spark, fewer)) == 20  # left to DMS's reload, as before
    floor = int(table_properties(spark, gone)[LOAD_FLOOR])
    assert int(sequence_at(before - timedelta(minutes=6))) < floor <= int(sequence_at(_now()))

    older = int(sequence_at(before - timedelta(hours=1)))  # committed before the TRUNCATE, arriving late
    newer = int(sequence_at(_now() + timedelta(seconds=1)))  # committed after the check
    writer = DmsWriter(raw, FMT)
    late = writer.cdc(f"{s}.gone", ["id", "v"], [("U", [3, "late"]), ("I", [4, "late"])], seqs=[older, older])
    fresh = writer.cdc(f"{s}.gone", ["id", "v"], [("I", [7, "new"])], seqs=[newer])
    assert apply_cdc(spark, lake_config, schema, manifest(late, fresh), OPTIONS).ok

    assert rows_of(spark, gone) == [(7, "new")]

    with connect(pg) as db:
        db.execute(f"INSERT INTO {s}.gone VALUES (7, 'new')")
    again = reconcile(
        spark,
        lake_config,
        schema,
        source,
        RELOAD,
        run_id="e2",
        tables=[f"{s}.gone"],
        reload_tables=dms_reloader(dms, "arn:t"),
    )
    assert [(t.table, t.missing, t.extra, t.differing, t.repaired) for t in again.tables] == [
        (f"{s}.gone", 0, 0, 0, False)
    ]
    assert again.repairs == 0 and len(dms.calls) == 1


def test_a_run_without_the_lease_reports_an_empty_source_but_never_writes_the_clean_table(
    spark,
    lake_config,
    pg,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """Given a clean table whose source was TRUNCATEd, When a reconcile started by hand (no pipeline lease: the
    lease function leaves it going beside the holder, so it must not write a clean table) runs with
    repair_mode reload, Then the divergence is reported, the table keeps its rows, and DMS is not asked either
    (its reload would write nothing and clear the raw folder): the loop's own reconcile empties it."""
    s = "rc_empty_hand"
    with connect(pg) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        db.execute(f"CREATE SCHEMA {s}")
        db.execute(f"CREATE TABLE {s}.gone (id int PRIMARY KEY, v text)")
        db.execute(f"INSERT INTO {s}.gone SELECT i, 'v' || i FROM generate_series(1, 20) i")
    schema = load_lake(spark, lake_config, pg, s, ["gone"], tmp_path / "raw")
    gone = lake_config.clean_table(schema.tables[f"{s}.gone"].iceberg_name)
    kept = rows_of(spark, gone)
    with connect(pg) as db:
        db.execute(f"TRUNCATE {s}.gone")
    dms = FakeDms()
    by_hand = ReconcileOptions(**{**RELOAD.__dict__, "empty_clean_tables": False})

    report = reconcile(
        spark,
        lake_config,
        schema,
        jdbc_source(spark, pg),
        by_hand,
        run_id="h1",
        reload_tables=dms_reloader(dms, "arn:t"),
    )

    assert [(t.table, t.extra, t.source_empty, t.emptied, t.repaired) for t in report.tables] == [
        (f"{s}.gone", 20, True, False, False)
    ]
    assert report.repairs == 0 and dms.calls == []
    assert rows_of(spark, gone) == kept and len(kept) == 20
