"""What reconciling a table costs: the reconcile job's comparison of a PostgreSQL table with its
clean Iceberg table, on this machine. Not a test: nothing here asserts a timing (the diverged run's counts
are checked, though: a fast wrong answer is no result).

    .venv/bin/python bench/reconcile.py --rows 200000 --runs 1      # smoke run
    .venv/bin/python bench/reconcile.py --rows 10000000 --runs 3    # the issue's figures

Data (cached in bench/data/reconcile/<rows>/): an embedded PostgreSQL 16 server (pgserver, listening on
127.0.0.1 for the JDBC driver) holding `bench.orders_rc` (bigint key 1..N, an int, a varchar, a
numeric(12,2), a timestamp, a text with 10 % NULLs), and the same rows in the clean table
`rc_<rows>.bench_orders_rc` of a local warehouse, copied through Spark's JDBC source.

Measured, each with the load average before it:
- source-sums: the source's first level alone (every row's canonical text hashed and summed per segment
  inside PostgreSQL, `parallelism` concurrent queries): source rows hashed per second;
- lake-sums: the lake's first level alone (Spark);
- match: `reconcile()` of the equal table, end to end (bounds, both sides at once, no difference);
- diverged: the same after 1,000 rows changed in the source only (600 updated, 200 deleted, 200 inserted
  beyond the key range), bisected down to rows; the changes are undone afterwards.
Bytes moved from the source are the payload of what PostgreSQL returned (values as text).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark_jobs")]

SCHEMA = "bench"
TABLE = "orders_rc"
DIVERGED = {"updated": 600, "deleted": 200, "inserted": 200}


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def ensure_source(db: Any, rows: int) -> None:
    exists = db.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
        (SCHEMA, TABLE),
    ).fetchone()[0]
    if exists and db.execute(f"SELECT max(id) FROM {SCHEMA}.{TABLE}").fetchone()[0] == rows:
        return
    started = time.perf_counter()
    db.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    db.execute(f"CREATE SCHEMA {SCHEMA}")
    db.execute(
        f"CREATE TABLE {SCHEMA}.{TABLE} (id bigint PRIMARY KEY, customer_id integer, status varchar(12),"
        " amount numeric(12,2), created_at timestamp(6), note text)"
    )
    db.execute(
        f"INSERT INTO {SCHEMA}.{TABLE} SELECT i, (i * 7919) % 100000, (ARRAY['new','paid','shipped','returned'])[1 + i % 4],"
        " ((i * 37) % 100000) / 100.0, timestamp '2026-01-01' + i * interval '1 second' + (i % 1000) * interval '1 microsecond',"
        f" CASE WHEN i % 10 = 0 THEN NULL ELSE 'note ' || (i % 977) END FROM generate_series(1::bigint, {int(rows)}) i"
    )
    db.execute(f"VACUUM ANALYZE {SCHEMA}.{TABLE}")
    print(f"source table: {rows:,} rows in {time.perf_counter() - started:.1f}s", flush=True)


def ensure_lake(spark: Any, config: Any, schema: Any, url: str, rows: int) -> None:
    from lakehouse.io.iceberg import ensure_namespace, table_exists
    from pyspark.sql import functions as F

    spec = schema.tables[f"{SCHEMA}.{TABLE}"]
    table = config.clean_table(spec.iceberg_name)
    if table_exists(spark, table) and spark.table(table).count() == rows:
        return
    started = time.perf_counter()
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    query = f"(SELECT id, customer_id, status, amount, created_at::text AS created_at, note FROM {SCHEMA}.{TABLE}) q"
    frame = spark.read.jdbc(
        url,
        query,
        column="id",
        lowerBound=1,
        upperBound=rows,
        numPartitions=8,
        properties={"user": "postgres", "driver": "org.postgresql.Driver"},
    )
    typed = frame.select(
        *[F.col(f.name).cast(f.dataType).alias(f.name) for f in spec.spark_schema().fields],
        F.lit(None).cast("timestamp").alias("dms_commit_ts"),
        F.lit(None).cast("decimal(38,0)").alias("dms_change_seq"),
    )
    typed.sortWithinPartitions("id").writeTo(table).using("iceberg").createOrReplace()
    print(f"lake table: {rows:,} rows in {time.perf_counter() - started:.1f}s", flush=True)


def diverge(db: Any, rows: int) -> list[tuple]:
    """Change 1,000 rows on the source only; returns what undo() needs."""
    step = rows // (DIVERGED["updated"] + DIVERGED["deleted"] + 1)
    updated = [step * (i + 1) for i in range(DIVERGED["updated"])]
    deleted = [step * (DIVERGED["updated"] + i + 1) + 1 for i in range(DIVERGED["deleted"])]
    saved = db.execute(f"SELECT * FROM {SCHEMA}.{TABLE} WHERE id = ANY(%s)", (deleted,)).fetchall()
    db.execute(f"UPDATE {SCHEMA}.{TABLE} SET amount = amount + 0.01 WHERE id = ANY(%s)", (updated,))
    db.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id = ANY(%s)", (deleted,))
    db.execute(
        f"INSERT INTO {SCHEMA}.{TABLE} SELECT {rows} + i, 1, 'new', 1.00, timestamp '2027-01-01', NULL"
        f" FROM generate_series(1, {DIVERGED['inserted']}) i"
    )
    return [("updated", updated), ("saved", saved)]


def undo(db: Any, rows: int, state: list[tuple]) -> None:
    changes = dict(state)
    db.execute(
        f"UPDATE {SCHEMA}.{TABLE} SET amount = amount - 0.01 WHERE id = ANY(%s)", (changes["updated"],)
    )
    db.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id > %s", (rows,))
    with db.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {SCHEMA}.{TABLE} VALUES (%s, %s, %s, %s, %s, %s)", changes["saved"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--segment_rows", type=int, default=1024)
    parser.add_argument("--only", default="source-sums,lake-sums,match,diverged")
    parser.add_argument("--prepare", action="store_true", help="only build (or check) the cached data")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if os.environ.get("RECONCILE_DEBUG"):
        for name in ("lakehouse.reconcile.run", "lakehouse.reconcile.bisect"):
            logging.getLogger(name).setLevel(logging.DEBUG)
    parts = set(args.only.split(","))

    import psycopg
    from lakehouse.base.config import LakeConfig
    from lakehouse.base.schema import SchemaFile
    from lakehouse.io.session import build_session
    from lakehouse.reconcile.bisect import first_level
    from lakehouse.reconcile.lake import LakeSide
    from lakehouse.reconcile.plan import ReconcileOptions, plan_table
    from lakehouse.reconcile.run import reconcile
    from lakehouse.reconcile.sources import PostgresJdbcSource

    from localaws.postgres import LocalPostgres
    from tools.schema_gen import reflect_schema

    folder = BENCH / "data" / "reconcile" / str(args.rows)
    folder.mkdir(parents=True, exist_ok=True)
    server = LocalPostgres(folder / "pg")
    port = free_port()
    address = server.start(tcp_port=port)
    port = address.port
    url = f"jdbc:postgresql://127.0.0.1:{port}/postgres"
    results: dict[str, Any] = {
        "rows": args.rows,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}",
        "command": " ".join(["bench/reconcile.py", *(argv if argv is not None else sys.argv[1:])]),
        "figures": {},
    }
    try:
        with psycopg.connect(address.uri, autocommit=True) as db:
            ensure_source(db, args.rows)
        sa_url = "postgresql+psycopg://" + address.uri.split("://", 1)[1]
        schema = SchemaFile.from_dict(reflect_schema(sa_url, [SCHEMA], [f"{SCHEMA}.{TABLE}"]))
        config = LakeConfig(
            warehouse=str(folder / "warehouse"),
            clean_database=f"rc_{args.rows}",
            staging_dir=str(folder / "staging"),
            shuffle_partitions=4,
        )
        spark = build_session(config, "bench-reconcile")
        ensure_lake(spark, config, schema, url, args.rows)
        if args.prepare:
            spark.stop()
            return 0
        options = ReconcileOptions(
            parallelism=args.parallelism, segment_rows=args.segment_rows, sample_keys=10
        )
        plan = plan_table(spark, config, schema.tables[f"{SCHEMA}.{TABLE}"])

        def record(name: str, seconds: float, load: float, **extra: Any) -> None:
            figure = results["figures"].setdefault(name, {"seconds": [], "load": [], "extra": []})
            figure["seconds"].append(round(seconds, 3))
            figure["load"].append(load)
            figure["extra"].append(extra)
            print(f"  {name}: {seconds:.2f}s (load {load}) {extra}", flush=True)

        def source() -> PostgresJdbcSource:
            return PostgresJdbcSource(spark, url, {"user": "postgres"}, args.parallelism)

        # a warm-up of both sides (JIT, the JDBC driver's classes, the table's pages in PostgreSQL's cache)
        reconcile(spark, config, schema, source(), options, run_id="warm-up")
        for _ in range(args.runs):
            if "source-sums" in parts:
                side, lake = source(), LakeSide(spark, cache=False)
                first = first_level(plan, side, lake, options)
                assert first is not None  # the bench's table has rows
                level = first[0]
                load, started = load_average(), time.perf_counter()
                sums = side.segment_sums(plan, level)
                seconds = time.perf_counter() - started
                record(
                    "source-sums",
                    seconds,
                    load,
                    rows=side.counters.rows_hashed,
                    rows_per_second=round(side.counters.rows_hashed / seconds),
                    segments=len(sums),
                    bytes=side.counters.bytes_moved,
                )
            if "lake-sums" in parts:
                lake = LakeSide(spark, cache=False)
                first = first_level(plan, source(), lake, options)
                assert first is not None  # the bench's table has rows
                level = first[0]
                load, started = load_average(), time.perf_counter()
                sums = lake.segment_sums(plan, level, None)
                seconds = time.perf_counter() - started
                record(
                    "lake-sums",
                    seconds,
                    load,
                    rows_per_second=round(lake.counters.rows_hashed / seconds),
                    segments=len(sums),
                )
            if "match" in parts:
                load, started = load_average(), time.perf_counter()
                report = reconcile(spark, config, schema, source(), options, run_id="match")
                seconds = time.perf_counter() - started
                (table,) = report.tables
                assert not table.diverged and not table.error, report.to_dict()
                record(
                    "match",
                    seconds,
                    load,
                    source_rows_hashed=table.source_rows_hashed,
                    source_bytes=table.source_bytes,
                    source_rows_fetched=table.source_rows_fetched,
                    segments=table.segments,
                    queries=table.source_queries,
                )
            if "diverged" in parts:
                with psycopg.connect(address.uri, autocommit=True) as db:
                    state = diverge(db, args.rows)
                try:
                    load, started = load_average(), time.perf_counter()
                    report = reconcile(spark, config, schema, source(), options, run_id="diverged")
                    seconds = time.perf_counter() - started
                finally:
                    with psycopg.connect(address.uri, autocommit=True) as db:
                        undo(db, args.rows, state)
                (table,) = report.tables
                found = (table.missing, table.extra, table.differing)
                wanted = (DIVERGED["inserted"], DIVERGED["deleted"], DIVERGED["updated"])
                assert found == wanted and not table.error, (found, wanted, table.error)
                record(
                    "diverged",
                    seconds,
                    load,
                    source_rows_hashed=table.source_rows_hashed,
                    source_bytes=table.source_bytes,
                    source_rows_fetched=table.source_rows_fetched,
                    segments=table.segments,
                    levels=table.levels,
                    queries=table.source_queries,
                    missing_extra_differing=found,
                )
        spark.stop()
    finally:
        server.stop()
    for figure in results["figures"].values():
        figure["median"] = statistics.median(figure["seconds"])
    out = BENCH / "results" / f"reconcile-{args.rows}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {out.relative_to(ROOT)}")
    for name, figure in results["figures"].items():
        print(
            f"| {name} | {', '.join(map(str, figure['seconds']))} | {figure['median']} | {figure['load']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
