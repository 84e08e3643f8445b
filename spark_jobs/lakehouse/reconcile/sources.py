"""The source side of the reconcile: PostgreSQL through Spark's JDBC source (hashes and sums computed in the
database), and SQLite (a test-only source, hashed in Spark)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import quote
from lakehouse.reconcile.plan import (
    HASH_BITS,
    INTEGER_TYPES,
    SEPARATOR,
    Level,
    SideCounters,
    SourceStatistics,
    TablePlan,
    aligned_segments,
    hash_sums,
    lake_field,
    lake_row_hash,
    lake_text,
    pg_field,
    pg_ident,
    pg_row_hash,
    pg_text,
    rows_within,
    split_ranges,
)

log = logging.getLogger(__name__)


def _payload(row: Sequence[Any]) -> int:
    return sum(len(str(v)) for v in row if v is not None)


class JdbcSqlSource:
    """A source read through Spark's JDBC data source whose database computes the canonical row hashes and
    (for segments) their sums; key ranges go to `parallelism` concurrent queries. A dialect gives the SQL
    pieces: `_table`, `_key_texts`, `_x` (a row's position), `_row_hash`, `_from_where`, `_bounds_sql` and
    `_segment_sums_sql`."""

    url: str
    properties: dict[str, str]

    def __init__(self, spark: SparkSession, parallelism: int) -> None:
        self.spark = spark
        self.parallelism = parallelism
        self.counters = SideCounters()

    def _table(self, plan: TablePlan) -> str:
        raise NotImplementedError

    def _key_texts(self, plan: TablePlan) -> list[str]:
        raise NotImplementedError

    def _x(self, plan: TablePlan, lo: int) -> str:
        raise NotImplementedError

    def _row_hash(self, plan: TablePlan) -> str:
        raise NotImplementedError

    def _from_where(self, plan: TablePlan, lo: int, ranges: Sequence[tuple[int, int]] | None) -> str:
        raise NotImplementedError

    def _bounds_sql(self, plan: TablePlan) -> str:
        """SELECT lo, hi: the integer key's smallest and largest value, as bigints."""
        raise NotImplementedError

    def _segment_sums_sql(self, rows_sql: str, shift: int) -> str:
        """SELECT seg, n, h over `rows_sql` (columns x, h): rows and the sum of hashes per segment x >> shift."""
        raise NotImplementedError

    def _read(self, queries: Sequence[str]) -> list[Any]:
        frames = [
            self.spark.read.jdbc(self.url, f"({sql}) AS q", properties=self.properties) for sql in queries
        ]
        self.counters.queries += len(frames)
        frame = frames[0]
        for other in frames[1:]:
            frame = frame.unionByName(other)
        return frame.collect()

    def _groups(self, plan: TablePlan, level: Level) -> list[list[tuple[int, int]] | None]:
        """One query per group of key ranges. A hash key's level is one query: each would scan the whole
        table (PostgreSQL's parallel workers share that scan instead)."""
        if level.within is None:
            return [None]
        if not plan.integer_key:
            return [list(level.within)]
        return list(split_ranges(level.within, self.parallelism))

    # -- the SourceSide protocol
    def bounds(self, plan: TablePlan) -> tuple[int, int] | None:
        rows = self._read([self._bounds_sql(plan)])
        self.counters.bytes_moved += _payload(rows[0])
        lo, hi = rows[0]["lo"], rows[0]["hi"]
        return None if lo is None else (int(lo), int(hi))

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]:
        x = self._x(plan, level.lo)
        queries = [
            self._segment_sums_sql(
                f"SELECT {x} AS x, {self._row_hash(plan)} AS h {self._from_where(plan, level.lo, group)}",
                level.shift,
            )
            for group in self._groups(plan, level)
        ]
        sums: dict[int, tuple[int, int]] = {}
        for row in self._read(queries):
            self.counters.bytes_moved += _payload(row)
            n, h = sums.get(int(row["seg"]), (0, 0))
            sums[int(row["seg"])] = (n + int(row["n"]), h + int(row["h"]))
        self.counters.rows_hashed += sum(n for n, _ in sums.values())
        return sums

    def row_hashes(self, plan: TablePlan, level: Level) -> dict[tuple[str, ...], int]:
        keys = ", ".join(f"{text} AS k{i}" for i, text in enumerate(self._key_texts(plan)))
        queries = [
            f"SELECT {keys}, {self._row_hash(plan)} AS h {self._from_where(plan, level.lo, group)}"
            for group in self._groups(plan, level)
        ]
        found: dict[tuple[str, ...], int] = {}
        for row in self._read(queries):
            self.counters.bytes_moved += _payload(row)
            found[tuple(row[f"k{i}"] for i in range(len(plan.keys)))] = int(row["h"])
        self.counters.rows_fetched += len(found)
        self.counters.rows_hashed += len(found)
        return found


class PostgresJdbcSource(JdbcSqlSource):
    """A PostgreSQL source through Spark's JDBC data source: every query computes canonical row hashes and
    (for segments) their sums inside PostgreSQL; key ranges go to `parallelism` concurrent queries."""

    def __init__(
        self,
        spark: SparkSession,
        url: str,
        properties: dict[str, str],
        parallelism: int = 4,
    ) -> None:
        super().__init__(spark, parallelism)
        self.url = url
        self.properties = {"driver": "org.postgresql.Driver", **properties}

    # -- SQL pieces
    def _table(self, plan: TablePlan) -> str:
        return f"{pg_ident(plan.spec.source_schema)}.{pg_ident(plan.spec.name)}"

    def _key_texts(self, plan: TablePlan) -> list[str]:
        return [pg_text(k.name, k.data_type, k.source_type) for k in plan.keys]

    def _x(self, plan: TablePlan, lo: int) -> str:
        if plan.integer_key:
            return f"({pg_ident(plan.keys[0].name)}::bigint - ({lo}))"
        text = "concat_ws(chr(31), " + ", ".join(self._key_texts(plan)) + ")"
        return f"('x' || substr(md5({text}), 1, 15))::bit({HASH_BITS})::bigint"

    def _row_hash(self, plan: TablePlan) -> str:
        fields = [
            pg_field(pg_text(c.name, c.data_type, c.source_type), c not in plan.keys) for c in plan.columns
        ]
        return pg_row_hash(fields)

    def _from_where(self, plan: TablePlan, lo: int, ranges: Sequence[tuple[int, int]] | None) -> str:
        """FROM … WHERE x in the ranges, read in time proportional to the rows of the ranges.

        An integer key: one index range scan per range. The ranges are a LATERAL subquery's parameters
        behind `OFFSET 0`: joined to the table directly, PostgreSQL estimates each parameterised range at
        0.5 % of the table and, for a few hundred ranges, prefers one sequential scan that tests every row
        against every range (10M rows by 200 ranges: minutes). A hash key (no index on its hash): one
        scan, each row's segment looked up in a hashed array (not one OR arm, each re-hashing the key, per
        range)."""
        table = self._table(plan)
        if ranges is None:
            return f"FROM {table} t"
        if plan.integer_key:
            key = f"t.{pg_ident(plan.keys[0].name)}"
            if len(ranges) == 1:
                a, b = ranges[0]
                return f"FROM {table} t WHERE {key} BETWEEN {lo + a} AND {lo + b}"
            starts = ",".join(str(lo + a) for a, _ in ranges)
            ends = ",".join(str(lo + b) for _, b in ranges)
            return (  # the outer subquery shows the table's columns only (a column may be named a or b)
                f"FROM (SELECT t.* FROM unnest('{{{starts}}}'::bigint[], '{{{ends}}}'::bigint[]) AS r(a, b)"
                f" CROSS JOIN LATERAL (SELECT * FROM {table} t WHERE {key} BETWEEN r.a AND r.b OFFSET 0) t) t"
            )
        shift, segments = aligned_segments(ranges)
        ids = ",".join(map(str, segments))
        return f"FROM {table} t WHERE ({self._x(plan, lo)} >> {shift}) = ANY('{{{ids}}}'::bigint[])"

    def _bounds_sql(self, plan: TablePlan) -> str:
        key = pg_ident(plan.keys[0].name)
        return f"SELECT min({key})::bigint AS lo, max({key})::bigint AS hi FROM {self._table(plan)}"

    def statistics(self, plan: TablePlan) -> SourceStatistics:
        """PostgreSQL's own count of the table's rows, neither filtered by what the reader may see:
        `pg_stat_all_tables.n_live_tup` (kept as rows change; a TRUNCATE sets it to 0; lost with the statistics
        after a crash), else `pg_class.reltuples` (the last VACUUM/ANALYZE; -1: never; a TRUNCATE sets -1), the
        larger of the two as the highest recorded; and whether row-level security filters the reader's rows
        (`row_security_active`: policies on, the reader neither owner, superuser nor BYPASSRLS)."""
        name = "'" + self._table(plan).replace("'", "''") + "'"
        rows = self._read(
            [
                "SELECT coalesce(s.n_live_tup, nullif(greatest(c.reltuples, -1), -1))::bigint AS estimate,"
                " greatest(coalesce(s.n_live_tup, 0), c.reltuples)::bigint AS highest,"
                " row_security_active(c.oid) AS rls, current_user::text AS reader"
                f" FROM pg_class c LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid WHERE c.oid = {name}::regclass"
            ]
        )
        row = rows[0]
        hidden = (
            f"row-level security: the table's policies filter what {row['reader']} reads (it is not the"
            " table's owner, a superuser or BYPASSRLS)"
            if row["rls"]
            else None
        )
        estimate = row["estimate"]
        return SourceStatistics(
            None if estimate is None else int(estimate),
            0.1,
            hidden,
            "pg_stat_all_tables.n_live_tup / pg_class.reltuples",
            max(0, int(row["highest"])),
        )

    def _segment_sums_sql(self, rows_sql: str, shift: int) -> str:
        return f"SELECT (x >> {shift}) AS seg, count(*) AS n, sum(h)::numeric(38,0) AS h FROM ({rows_sql}) s GROUP BY 1"


class SqliteReconcileSource:
    """SQLite (the local demo's other source; no MD5 in SQLite): the rows of the key ranges asked for are
    read by Python's sqlite3, typed as the lake's columns and hashed by the same Spark expressions. Rows
    cross for every level: a test-only source."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path
        self.counters = SideCounters()

    def _frame(self, plan: TablePlan, lo: int, ranges: Sequence[tuple[int, int]] | None) -> DataFrame:
        names = ", ".join(pg_ident(c.name) for c in plan.columns)
        sql = f"SELECT {names} FROM {pg_ident(plan.spec.source_schema)}.{pg_ident(plan.spec.name)}"
        parameters: list[int] = []
        if ranges is not None and plan.integer_key:
            key = pg_ident(plan.keys[0].name)
            sql += " WHERE " + " OR ".join(f"({key} BETWEEN ? AND ?)" for _ in ranges)
            for a, b in ranges:
                parameters += [lo + a, lo + b]
        with sqlite3.connect(self.path) as db:
            rows = db.execute(sql, parameters).fetchall()
        self.counters.queries += 1
        self.counters.bytes_moved += sum(_payload(r) for r in rows)
        schema = T.StructType([T.StructField(c.name, c.data_type) for c in plan.columns])
        typed = [
            tuple(_python_value(v, c.data_type) for v, c in zip(r, plan.columns, strict=True)) for r in rows
        ]
        return self.spark.createDataFrame(typed, schema)

    def _sides(self, plan: TablePlan, level: Level) -> DataFrame:
        frame = self._frame(plan, level.lo, level.within)
        fields = [lake_field(lake_text(frame[quote(c.name)], c.data_type)) for c in plan.columns]
        keys = [lake_text(frame[quote(k.name)], k.data_type) for k in plan.keys]
        if plan.integer_key:
            x = frame[quote(plan.keys[0].name)].cast("bigint") - F.lit(level.lo)
        else:
            x = F.conv(F.substring(F.md5(F.concat_ws(SEPARATOR, *keys)), 1, 15), 16, 10).cast("bigint")
        hashed = frame.select(
            x.alias("x"), *[k.alias(f"k{i}") for i, k in enumerate(keys)], lake_row_hash(fields).alias("h")
        )
        return rows_within(hashed, level, None)

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None:
        key = pg_ident(plan.keys[0].name)
        with sqlite3.connect(self.path) as db:
            lo, hi = db.execute(
                f"SELECT min({key}), max({key}) FROM {pg_ident(plan.spec.source_schema)}.{pg_ident(plan.spec.name)}"
            ).fetchone()
        return None if lo is None else (int(lo), int(hi))

    def statistics(self, plan: TablePlan) -> SourceStatistics:
        """A test-only source: SQLite keeps no row statistics, its count(*) stands in (the same file)."""
        with sqlite3.connect(self.path) as db:
            (count,) = db.execute(
                f"SELECT count(*) FROM {pg_ident(plan.spec.source_schema)}.{pg_ident(plan.spec.name)}"
            ).fetchone()
        return SourceStatistics(int(count), 0.0, None, "SQLite count(*)")

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]:
        rows = (
            self._sides(plan, level)
            .groupBy(F.shiftright("x", level.shift).alias("seg"))
            .agg(*hash_sums())
            .collect()
        )
        sums = {int(r["seg"]): (int(r["n"]), (int(r["hi"]) << 32) + int(r["lo"])) for r in rows}
        self.counters.rows_hashed += sum(n for n, _ in sums.values())
        self.counters.rows_fetched += sum(n for n, _ in sums.values())
        return sums

    def row_hashes(self, plan: TablePlan, level: Level) -> dict[tuple[str, ...], int]:
        columns = [f"k{i}" for i in range(len(plan.keys))]
        rows = self._sides(plan, level).select(*columns, "h").collect()
        found = {tuple(r[c] for c in columns): int(r["h"]) for r in rows}
        self.counters.rows_fetched += len(found)
        self.counters.rows_hashed += len(found)
        return found


def _python_value(value: Any, data_type: T.DataType) -> Any:
    """A SQLite value as the lake's column type holds it."""
    if value is None:
        return None
    if isinstance(data_type, INTEGER_TYPES):
        return int(value)
    if isinstance(data_type, T.DecimalType):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
        return number.quantize(Decimal(1).scaleb(-data_type.scale))
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return float(value)
    if isinstance(data_type, T.BooleanType):
        return value in (1, "1", True) or str(value).lower() in ("true", "t")
    if isinstance(data_type, T.DateType):
        return datetime.fromisoformat(str(value)[:10]).date()
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        moment = datetime.fromisoformat(str(value))
        return (
            moment.replace(tzinfo=None)
            if isinstance(data_type, T.TimestampNTZType)
            else moment.replace(tzinfo=moment.tzinfo or UTC)
        )
    if isinstance(data_type, T.BinaryType):
        return bytes(value) if not isinstance(value, str) else bytes.fromhex(value)
    return str(value)
