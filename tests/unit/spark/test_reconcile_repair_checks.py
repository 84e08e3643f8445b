"""A reconcile repair that deletes or replaces rows needs a second signal that it is right: the source's own
statistics agree with what the reconcile's reader saw, and nothing hides rows from that reader (PostgreSQL
row-level security). A reload asked of DMS is not asked again while it is pending. An emptied table whose
change sequences are a log position (the local DMS's LSNs), not DMS's time-shaped ones, is still emptied."""

from __future__ import annotations

from datetime import UTC, datetime

from lakehouse.apply.cdc import apply_cdc
from lakehouse.io.iceberg import LOAD_FLOOR, LOAD_STARTED, table_properties
from lakehouse.reconcile.plan import ReconcileOptions, SourceStatistics
from lakehouse.reconcile.repair_checks import refusal_to_empty, refusal_to_reload
from lakehouse.reconcile.run import dms_reloader, reconcile
from lakehouse.reconcile.sources import PostgresJdbcSource

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
READER = "rc_reader"  # LOGIN, neither owner, superuser nor BYPASSRLS


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _create(db, s: str, tables: list[str], rows: int = 20) -> None:
    db.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
    db.execute(f"CREATE SCHEMA {s}")
    for table in tables:
        db.execute(f"CREATE TABLE {s}.{table} (id int PRIMARY KEY, v text)")
        db.execute(f"INSERT INTO {s}.{table} SELECT i, 'v' || i FROM generate_series(1, {rows}) i")


def _flush_statistics(db) -> None:
    """This session's row counts reach pg_stat_all_tables now (not up to a second later)."""
    db.execute("SELECT pg_stat_force_next_flush()")
    db.execute("SELECT 1")


def test_rows_hidden_from_the_reader_are_never_emptied_nor_reloaded_and_the_run_names_the_check(
    spark,
    lake_config,
    pg,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """Given four clean tables of 20 rows and a reconcile reader without BYPASSRLS: on the source, `locked`
    has row-level security on and no policy for it (it reads 0 rows), `veiled` a policy that shows it ids up
    to 12, `truncated` was TRUNCATEd and `fewer` lost ids 16-20 (deletes DMS never sent),
    When the reconcile runs with repair_mode reload,
    Then `truncated` is emptied and `fewer` reloaded (their statistics agree with the reader), while `locked`
    keeps its 20 rows and `veiled` is not reloaded: each repair refused by the visibility check, named in the
    table's result and in the run's error (the run fails, alarming), their differences still reported."""
    s = "rc_veiled"
    with connect(pg) as db:
        _create(db, s, ["locked", "veiled", "truncated", "fewer"])
    schema = load_lake(
        spark, lake_config, pg, s, ["locked", "veiled", "truncated", "fewer"], tmp_path / "raw"
    )
    with connect(pg) as db:
        db.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{READER}') THEN"
            f" CREATE ROLE {READER} LOGIN; END IF; END $$"
        )
        db.execute(f"GRANT USAGE ON SCHEMA {s} TO {READER}")
        db.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {READER}")
        db.execute(f"ALTER TABLE {s}.locked ENABLE ROW LEVEL SECURITY")
        db.execute(f"ALTER TABLE {s}.veiled ENABLE ROW LEVEL SECURITY")
        db.execute(f"CREATE POLICY up_to_12 ON {s}.veiled FOR SELECT TO {READER} USING (id <= 12)")
        db.execute(f"TRUNCATE {s}.truncated")
        db.execute(f"DELETE FROM {s}.fewer WHERE id > 15")
        _flush_statistics(db)
    reader = PostgresJdbcSource(
        spark, f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres", {"user": READER}, SMALL.parallelism
    )
    dms = FakeDms()

    report = reconcile(
        spark, lake_config, schema, reader, RELOAD, run_id="v1", reload_tables=dms_reloader(dms, "arn:t")
    )

    results = [
        (t.table, t.extra, t.source_rows, t.emptied, t.repaired, t.repair_refused) for t in report.tables
    ]
    visibility = (
        "refused by the visibility check: row-level security: the table's policies filter what rc_reader"
    )
    assert [r[:5] for r in results] == [
        (f"{s}.fewer", 5, 15, False, True),
        (f"{s}.locked", 20, 0, False, False),
        (f"{s}.truncated", 20, 0, True, True),
        (f"{s}.veiled", 8, 12, False, False),
    ]
    assert [r[5] is not None and r[5].startswith(f"{r[0]}: {kind} {visibility}") for r, kind in zip(
        results, ("", "emptying", "", "reload"), strict=True)] == [False, True, False, True]  # fmt: skip
    assert report.error is not None and report.error.startswith("repair: RepairRefused: ")
    assert f"{s}.locked: emptying {visibility}" in report.error and f"{s}.veiled: reload" in report.error
    assert dms.calls == [
        {
            "ReplicationTaskArn": "arn:t",
            "TablesToReload": [{"SchemaName": s, "TableName": "fewer"}],
            "ReloadOption": "data-reload",
        }
    ]
    assert report.repairs == 2
    assert len(rows_of(spark, lake_config.clean_table(schema.tables[f"{s}.locked"].iceberg_name))) == 20
    assert rows_of(spark, lake_config.clean_table(schema.tables[f"{s}.truncated"].iceberg_name)) == []


def test_a_reload_still_pending_is_not_asked_again_until_the_lake_applied_it(
    spark,
    lake_config,
    pg,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """Given a table that lost 3 rows DMS never sent, reconciled with repair_mode reload (DMS asked once),
    When the next run finds it still diverged (DMS's reload not applied by the lake yet) and is given the
    reloads the first run asked, Then DMS is not asked again and the table is reported reload pending;
    When the lake has then applied a load DMS started after the request, Then the next run asks again."""
    s = "rc_pending"
    with connect(pg) as db:
        _create(db, s, ["slow"], rows=12)
    schema = load_lake(spark, lake_config, pg, s, ["slow"], tmp_path / "raw")
    with connect(pg) as db:
        db.execute(f"DELETE FROM {s}.slow WHERE id > 9")
        _flush_statistics(db)
    source, dms = jdbc_source(spark, pg), FakeDms()
    reloader = dms_reloader(dms, "arn:t")

    first = reconcile(spark, lake_config, schema, source, RELOAD, run_id="p1", reload_tables=reloader)
    second = reconcile(
        spark,
        lake_config,
        schema,
        source,
        RELOAD,
        run_id="p2",
        reload_tables=reloader,
        reloads_requested=first.reload_requests,
    )

    assert [(t.extra, t.repaired, t.reload_pending) for t in first.tables] == [(3, True, False)]
    assert [(t.extra, t.repaired, t.reload_pending) for t in second.tables] == [(3, False, True)]
    assert len(dms.calls) == 1 and second.ok and second.repairs == 0
    assert (
        second.reload_requests == first.reload_requests == {f"{s}.slow": first.reload_requests[f"{s}.slow"]}
    )

    table = lake_config.clean_table(schema.tables[f"{s}.slow"].iceberg_name)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{LOAD_STARTED}' = '{_now().isoformat()}')")
    third = reconcile(
        spark,
        lake_config,
        schema,
        source,
        RELOAD,
        run_id="p3",
        reload_tables=reloader,
        reloads_requested=second.reload_requests,
    )
    assert [(t.extra, t.repaired, t.reload_pending) for t in third.tables] == [(3, True, False)]
    assert len(dms.calls) == 2


def test_a_table_whose_sequences_are_log_positions_is_emptied_placed_by_its_commit_times(
    spark,
    lake_config,
    pg,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """Given a clean table whose last change carries a log-position sequence (the local DMS's: an LSN, not AWS
    DMS's timestamp-prefixed AR_H_CHANGE_SEQ), and its source TRUNCATEd,
    When the reconcile runs with repair_mode reload, Then the table is emptied (no error), its floor at the
    newest change it removed;
    When a late change below that floor and a newer insert are applied, Then only the newer insert is there."""
    s = "rc_lsn"
    with connect(pg) as db:
        _create(db, s, ["gone"], rows=6)
    raw = tmp_path / "raw"
    schema = load_lake(spark, lake_config, pg, s, ["gone"], raw)
    writer = DmsWriter(raw, FMT)
    lsn = 71_000_000_000_000  # commit LSN 710000 x 10^8 + ordinal
    update = writer.cdc(f"{s}.gone", ["id", "v"], [("U", [2, "changed"])], seqs=[lsn])
    assert apply_cdc(spark, lake_config, schema, manifest(update), OPTIONS).ok
    with connect(pg) as db:
        db.execute(f"TRUNCATE {s}.gone")
        _flush_statistics(db)

    report = reconcile(
        spark,
        lake_config,
        schema,
        jdbc_source(spark, pg),
        RELOAD,
        run_id="l1",
        reload_tables=dms_reloader(FakeDms(), "arn:t"),
    )

    assert report.ok, report.to_dict()
    assert [(t.extra, t.source_empty, t.emptied, t.repaired) for t in report.tables] == [
        (6, True, True, True)
    ]
    table = lake_config.clean_table(schema.tables[f"{s}.gone"].iceberg_name)
    assert rows_of(spark, table) == []
    assert int(table_properties(spark, table)[LOAD_FLOOR]) == lsn
    late = writer.cdc(f"{s}.gone", ["id", "v"], [("U", [3, "late"])], seqs=[lsn - 5])
    fresh = writer.cdc(f"{s}.gone", ["id", "v"], [("I", [7, "new"])], seqs=[lsn + 100_000_000])
    assert apply_cdc(spark, lake_config, schema, manifest(late, fresh), OPTIONS).ok
    assert rows_of(spark, table) == [(7, "new")]


def test_emptying_needs_the_sources_statistics_to_count_no_row() -> None:
    """Given a reader that saw no row, When the source's statistics count 20 rows, keep none, a view may
    filter, or the current count is 0 but an older one still records 50, Then emptying is refused naming the
    check; When every count is 0, Then it may go ahead."""
    stats = "pg_stat_all_tables.n_live_tup / pg_class.reltuples"
    assert refusal_to_empty("s.t", SourceStatistics(20, 0.1, None, stats)) == (
        f"s.t: emptying refused by the source-statistics check: the reader saw no row, the source's statistics"
        f" ({stats}) count 20"
    )
    assert refusal_to_empty("s.t", SourceStatistics(None, 0.1, None, stats)) == (
        f"s.t: emptying refused by the source-statistics check: the source keeps no row count ({stats}) to"
        " confirm the reader's empty table"
    )
    assert refusal_to_empty(
        "s.t", SourceStatistics(0, 0.5, "a view in the table's place may filter rows")
    ) == ("s.t: emptying refused by the visibility check: a view in the table's place may filter rows")
    assert refusal_to_empty("s.t", SourceStatistics(0, 0.1, None, stats, highest_recorded=50)) == (
        f"s.t: emptying refused by the source-statistics check: the reader saw no row, the source's statistics"
        f" ({stats}) count 50"
    )  # n_live_tup lost with the statistics (a crash), reltuples still counting the last ANALYZE's rows
    assert refusal_to_empty("s.t", SourceStatistics(0, 0.1, None, stats)) is None


def test_a_reload_needs_the_reader_to_have_seen_about_the_rows_the_statistics_count() -> None:
    """Given statistics of 1,000 rows kept within 10 % (PostgreSQL) or 50 % (MySQL's InnoDB estimate),
    When the reader saw 895 rows (statistics a little behind) Then the reload may go ahead; When it saw 600
    of PostgreSQL's 1,000 Then it is refused naming the check, and of MySQL's 1,000 (within 50 %) it goes."""
    postgres, mysql = (
        SourceStatistics(1000, 0.1, None, "n_live_tup"),
        SourceStatistics(1000, 0.5, None, "TABLE_ROWS"),
    )
    assert refusal_to_reload("s.t", 895, postgres) is None
    assert refusal_to_reload("s.t", 600, postgres) == (
        "s.t: reload refused by the source-statistics check: the reader saw 600 rows, the source's statistics"
        " (n_live_tup) count 1000"
    )
    assert refusal_to_reload("s.t", 600, mysql) is None
