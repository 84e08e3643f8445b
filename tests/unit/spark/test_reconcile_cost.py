# ruff: noqa: F811 (pg: the PostgreSQL fixture of test_reconcile, taken as an argument)
"""What reconciling costs the source: PostgreSQL reads each level's key ranges, not the table.

The rows PostgreSQL's scans of a table returned are its statistics counters (`pg_stat_user_tables`:
`seq_tup_read` + `idx_tup_fetch`), read after the reconcile's JDBC connections have closed (a backend flushes
its counters when it exits). The lake tables are written straight from Spark with the source's values."""

from __future__ import annotations

import time

import psycopg
from lakehouse.base.schema import SchemaFile
from lakehouse.reconcile.plan import ReconcileOptions, aligned_segments, x_ranges
from lakehouse.reconcile.run import reconcile
from lakehouse.reconcile.sources import PostgresJdbcSource
from pyspark.sql import functions as F

from tests.unit.spark.test_reconcile import connect, pg  # noqa: F401 (pg: the PostgreSQL fixture)
from tools.schema_gen import reflect_schema


def source_of(spark, pg, parallelism: int) -> PostgresJdbcSource:
    return PostgresJdbcSource(
        spark, f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres", {"user": "postgres"}, parallelism
    )


def schema_of(pg, schema: str, table: str) -> SchemaFile:
    url = "postgresql+psycopg://" + pg.uri.split("://", 1)[1]
    return SchemaFile.from_dict(reflect_schema(url, [schema], [f"{schema}.{table}"]))


def write_lake(spark, lake_config, name: str, frame) -> None:
    """The clean table `<schema>_<table>` holding `frame`'s rows (the pipeline's two bookkeeping columns NULL)."""
    from lakehouse.io.iceberg import ensure_namespace

    ensure_namespace(spark, lake_config.catalog_name, lake_config.clean_database)
    frame.select(
        "*",
        F.lit(None).cast("timestamp").alias("dms_commit_ts"),
        F.lit(None).cast("decimal(38,0)").alias("dms_change_seq"),
    ).writeTo(lake_config.clean_table(name)).using("iceberg").createOrReplace()


def counted(pg, *tables: str) -> dict[str, int]:
    """The rows the tables' scans have returned so far (sequential + index), once the changes' own reads are
    counted: a session's counters reach the shared ones when it is idle or ends."""
    with connect(pg) as db:
        return {table: sum(rows_read(db, table)) for table in tables}


def rows_read(db: psycopg.Connection, table: str) -> tuple[int, int]:
    """(sequential scans' rows, index scans' rows) of the table, once they stop changing."""
    last = None
    for _ in range(40):
        db.execute("SELECT pg_stat_clear_snapshot()")
        now = db.execute(
            "SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables"
            " WHERE relid = %s::regclass",
            (table,),
        ).fetchone()
        if now == last and sum(now):
            return now
        last = now
        time.sleep(1.0)
    raise AssertionError(f"{table}: the statistics counters did not settle: {last}")


def test_aligned_segments_are_the_ranges_exactly():
    """Given x ranges made of whole segments (merged when adjacent), When cut into segments of one size,
    Then the segments cover exactly the ranges, at the largest size they are all aligned to."""
    ranges = x_ranges([0, 1, 5, 9, 10, 11, 12], 4)  # [0, 31], [80, 95], [144, 207]
    assert ranges == [(0, 31), (80, 95), (144, 207)]

    shift, segments = aligned_segments(ranges)

    assert shift == 4
    assert segments == [0, 1, 5, 9, 10, 11, 12]
    assert aligned_segments([(0, (1 << 60) - 1)]) == (60, [0])
    assert aligned_segments([(64, 127), (256, 511)]) == (6, [1, 4, 5, 6, 7])


def test_a_bisect_level_reads_only_the_rows_of_its_key_ranges(spark, lake_config, pg):
    """Given a 200,000-row table with an integer key, equal in the lake, then 300 rows changed on the source
    spread over the whole key range (so 300 first-level segments of 64 keys differ: 300 ranges), and a
    PostgreSQL whose work_mem is small for the table (the planner then prefers sorting the whole table for
    a join with the ranges: what it chose for 200 ranges of a 10M-row table with the default work_mem),
    When reconciled, Then exactly the 300 keys differ, and PostgreSQL's scans of the table returned the
    table once (the first level) plus the rows of the differing ranges (never the table once per query)."""
    rows, changed = 200_000, 300
    with connect(pg) as db:
        db.execute("DROP SCHEMA IF EXISTS rc_cost CASCADE")
        db.execute("CREATE SCHEMA rc_cost")
        db.execute("CREATE TABLE rc_cost.wide (id bigint PRIMARY KEY, v integer, s text)")
        db.execute(
            f"INSERT INTO rc_cost.wide SELECT i, i % 1000, 'row ' || i FROM generate_series(1, {rows}) i"
        )
        db.execute("VACUUM ANALYZE rc_cost.wide")
    write_lake(
        spark,
        lake_config,
        "rc_cost_wide",
        spark.range(1, rows + 1).select(
            F.col("id"),
            (F.col("id") % 1000).cast("int").alias("v"),
            F.concat(F.lit("row "), F.col("id").cast("string")).alias("s"),
        ),
    )
    schema = schema_of(pg, "rc_cost", "wide")
    # one query per level: the first level's scan of the whole table counts once, however PostgreSQL plans it
    options = ReconcileOptions(segment_rows=64, bisect_factor=4, leaf_rows=8, parallelism=1, sample_keys=1000)
    source = source_of(spark, pg, options.parallelism)
    step = rows // changed
    keys = [1 + step * i for i in range(changed)]
    with connect(pg) as db:
        db.execute("UPDATE rc_cost.wide SET v = v + 1 WHERE id = ANY(%s)", (keys,))
        db.execute("VACUUM ANALYZE rc_cost.wide")  # the updated rows' old versions gone
    before = counted(pg, "rc_cost.wide")

    with connect(pg) as db:  # a table far larger than work_mem, as 10M rows are for the default 4MB
        db.execute("ALTER DATABASE postgres SET work_mem = '64kB'")
    try:
        report = reconcile(spark, lake_config, schema, source, options, run_id="cost")
    finally:
        with connect(pg) as db:
            db.execute("ALTER DATABASE postgres RESET work_mem")

    (table,) = report.tables
    assert (table.missing, table.extra, table.differing, table.error) == (0, 0, changed, None)
    assert table.samples["differing"] == [{"id": k} for k in keys]
    assert table.segments == 3_125 and table.levels == 3  # segments of 64 keys; then 16, then 4
    read = counted(pg, "rc_cost.wide")["rc_cost.wide"] - before["rc_cost.wide"]
    # level 1: the table; level 2: 300 segments of 64 keys; level 3: 300 of 16; leaves: 300 of 4 keys
    assert read == rows + changed * (64 + 16 + 4)


def test_a_table_whose_every_segment_differs_is_reconciled_exactly_reading_each_level_once(
    spark, lake_config, pg
):
    """Given a 20,000-row table with a composite text key (segments by key hash) and one with an integer
    key, each with every row changed on the source, 100 rows deleted and 100 inserted (every segment of
    every level differs: the worst case),
    When reconciled, Then every key is reported exactly, and PostgreSQL read each table once per level
    and once for the leaves (a hash key's level is one scan of the table, not one per query)."""
    rows = 20_000
    with connect(pg) as db:
        db.execute("DROP SCHEMA IF EXISTS rc_all CASCADE")
        db.execute("CREATE SCHEMA rc_all")
        db.execute("CREATE TABLE rc_all.pairs (region text, sku int, qty int, PRIMARY KEY (region, sku))")
        db.execute(
            "INSERT INTO rc_all.pairs SELECT r, i, i * 2 FROM unnest(ARRAY['north', 'south']) r,"
            f" generate_series(1, {rows // 2}) i"
        )
        db.execute("CREATE TABLE rc_all.plain (id integer PRIMARY KEY, qty int)")
        db.execute(f"INSERT INTO rc_all.plain SELECT i, i * 2 FROM generate_series(1, {rows}) i")
    regions = spark.createDataFrame([("north",), ("south",)], "region string")
    write_lake(
        spark,
        lake_config,
        "rc_all_pairs",
        regions.crossJoin(spark.range(1, rows // 2 + 1).select(F.col("id").cast("int").alias("sku"))).select(
            "region", "sku", (F.col("sku") * 2).alias("qty")
        ),
    )
    write_lake(
        spark,
        lake_config,
        "rc_all_plain",
        spark.range(1, rows + 1).select(
            F.col("id").cast("int").alias("id"), (F.col("id") * 2).cast("int").alias("qty")
        ),
    )
    url = "postgresql+psycopg://" + pg.uri.split("://", 1)[1]
    schema = SchemaFile.from_dict(reflect_schema(url, ["rc_all"], ["rc_all.pairs", "rc_all.plain"]))
    with connect(pg) as db:
        db.execute("UPDATE rc_all.pairs SET qty = qty + 1")
        db.execute("DELETE FROM rc_all.pairs WHERE region = 'south' AND sku % 100 = 0")  # 100 rows
        db.execute("INSERT INTO rc_all.pairs SELECT 'west', i, 0 FROM generate_series(1, 100) i")  # 100 rows
        db.execute("UPDATE rc_all.plain SET qty = qty + 1")
        db.execute("DELETE FROM rc_all.plain WHERE id % 200 = 0")  # 100 rows
        db.execute(f"INSERT INTO rc_all.plain SELECT {rows} + i, 0 FROM generate_series(1, 100) i")
        db.execute("VACUUM ANALYZE rc_all.pairs")
        db.execute("VACUUM ANALYZE rc_all.plain")
    before = counted(pg, "rc_all.pairs", "rc_all.plain")
    options = ReconcileOptions(segment_rows=256, bisect_factor=4, leaf_rows=16, parallelism=3, sample_keys=5)
    source = source_of(spark, pg, options.parallelism)

    report = reconcile(spark, lake_config, schema, source, options, run_id="all")

    assert report.ok, report.to_dict()
    by_table = {t.table: t for t in report.tables}
    pairs, plain = by_table["rc_all.pairs"], by_table["rc_all.plain"]
    assert (pairs.missing, pairs.extra, pairs.differing) == (100, 100, rows - 100)
    assert pairs.samples == {
        "missing": [{"region": "west", "sku": i} for i in range(1, 6)],
        "extra": [{"region": "south", "sku": i} for i in range(100, 600, 100)],
        "differing": [{"region": "north", "sku": i} for i in range(1, 6)],
    }
    assert (plain.missing, plain.extra, plain.differing) == (100, 100, rows - 100)
    assert plain.samples == {
        "missing": [{"id": rows + i} for i in range(1, 6)],
        "extra": [{"id": i} for i in range(200, 1200, 200)],
        "differing": [{"id": i} for i in range(1, 6)],
    }
    after = counted(pg, "rc_all.pairs", "rc_all.plain")
    pairs_read, plain_read = (after[t] - before[t] for t in ("rc_all.pairs", "rc_all.plain"))
    # every segment differs: each level and each level's leaves read the table at most once (a hash key's
    # level is one scan, not one per query: 3 queries per level would read it 3 times)
    assert pairs.levels >= 3 and rows <= pairs_read <= rows * 2 * pairs.levels, (pairs_read, pairs.levels)
    assert plain.levels >= 3 and rows <= plain_read <= rows * 2 * plain.levels, (plain_read, plain.levels)
