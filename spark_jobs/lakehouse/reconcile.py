"""Source ↔ lake reconciliation (issue 25): is every clean table still equal to its source table?

How a table is compared (docs/CONTRACTS.md, "Reconcile"):

- Both sides reduce each row to the same canonical text (per column, by the clean table's type: integers
  and decimals as plain digits at the column's scale, floats as the bits of the double, booleans 1/0, dates
  as days and timestamps as microseconds since 1970-01-01 (UTC), binaries as lower-case hex, everything else as the source's
  text; a NULL is `~`, any value `=`+text, so NULL and '' differ) and hash it: the first 64 bits of its MD5,
  as a signed integer. The source computes this in SQL (PostgreSQL), the lake in Spark SQL.
- The key space is cut into segments of 2^shift keys: a single integer key by its value (`k - lo`), any
  other key by the first 60 bits of its own MD5. Each side sums (count, hash) per segment, inside the
  database: a matching table moves only those sums (kilobytes), never its rows.
- A segment whose sums differ is cut into `bisect_factor` smaller ones and compared again (only those key
  ranges are read again); once a differing segment holds at most `leaf_rows` rows, its keys and row
  hashes are fetched from both sides and compared: missing (in the source, not in the lake), extra (in
  the lake only), differing (both, other values).
- Changes in flight are not divergence: a difference is reported only if, after the lake has applied every
  CDC file DMS wrote before the check began (the raw zone's files of the table against what the table
  applied), the same key still differs and its source row did not change meanwhile. Otherwise it is
  counted `in_flight`.

The source is read through Spark's JDBC source (on Glue through a Glue connection), each level's key
ranges split over `parallelism` concurrent queries; SQLite, a test-only source, is read by Python's
sqlite3 and hashed in Spark (its rows cross, bounded by the key ranges asked for).
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.config import LakeConfig
from lakehouse.fence import check_before_commit, installed
from lakehouse.iceberg import (
    FULL_LOAD_DONE,
    REPLACED_SNAPSHOT,
    RUN_ID,
    append_rows,
    create_table,
    current_snapshot_id,
    ensure_namespace,
    replace_table,
    table_exists,
)
from lakehouse.names import RESERVED_COLUMNS, quote
from lakehouse.schema import SchemaFile, TableSpec

log = logging.getLogger(__name__)

RepairMode = Literal["alarm", "reload"]
KINDS = ("missing", "extra", "differing")
SEPARATOR = "\x1f"
NULL_TEXT = "~"
HASH_BITS = 60  # key hash of non-integer keys: the first 15 hex digits of the key text's MD5
DIVERGENCE_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("source_table", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("detected_at", T.TimestampType()),
    ]
)
INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


@dataclass(frozen=True)
class ReconcileOptions:
    segment_rows: int = 1024  # rows per first-level segment (a matching table moves rows/segment_rows sums)
    bisect_factor: int = 32  # a differing segment is cut into this many (a power of two)
    leaf_rows: int = 64  # a differing segment this small has its keys and row hashes fetched
    parallelism: int = 4  # concurrent source queries per level
    max_source_rows: int | None = None  # row budget of one run (tables rotate; at least one table runs)
    sample_keys: int = 100  # keys per table and kind kept in the report and dms_divergence
    recheck_wait_seconds: float = 0.0  # how long to wait for the lake to apply what DMS wrote before T0
    recheck_poll_seconds: float = 5.0
    repair_mode: RepairMode = "alarm"
    cache_lake: bool = True  # keep the lake's (segment key, hash) between bisect levels
    # a run that may write a clean table (emptying one whose source is empty): only a run under the pipeline
    # lease (the loop's); a run started by hand is unfenced and left going beside the holder, so it only reports
    empty_clean_tables: bool = True

    def __post_init__(self) -> None:
        if self.bisect_factor < 2 or self.bisect_factor & (self.bisect_factor - 1):
            raise ValueError(f"bisect_factor {self.bisect_factor}: a power of two, at least 2")
        if self.segment_rows < 1 or self.leaf_rows < 1 or self.parallelism < 1:
            raise ValueError("segment_rows, leaf_rows and parallelism must be at least 1")
        if self.repair_mode not in ("alarm", "reload"):
            raise ValueError(f"repair_mode {self.repair_mode!r}: alarm or reload")


# ---------------------------------------------------------------------------------------- canonical text
def _pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fixed_char(source_type: str) -> bool:
    name = source_type.strip().lower()
    return name.startswith(("char", "character", "bpchar", "nchar")) and not name.startswith(
        ("character varying", "char varying")
    )


def pg_text(column: str, data_type: T.DataType, source_type: str) -> str:
    """PostgreSQL SQL: the column as canonical text (NULL stays NULL), byte for byte `lake_text`'s."""
    c = _pg_ident(column)
    if isinstance(data_type, INTEGER_TYPES):
        return f"{c}::text"
    if isinstance(data_type, T.DecimalType):
        via = "::numeric" if source_type.strip().lower().startswith("money") else ""
        return f"{c}{via}::numeric({data_type.precision},{data_type.scale})::text"
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return f"('x' || encode(float8send({c}::float8), 'hex'))::bit(64)::bigint::text"
    if isinstance(data_type, T.BooleanType):
        return f"{c}::int::text"
    if isinstance(data_type, T.DateType):
        return f"({c} - DATE '1970-01-01')::text"
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        # microseconds since 1970-01-01 00:00 (UTC for a timestamptz, the wall clock for a timestamp)
        return f"(extract(epoch FROM {c}) * 1000000)::bigint::text"
    if isinstance(data_type, T.BinaryType):
        return f"encode({c}, 'hex')"
    if _fixed_char(source_type):
        return f"textin(bpcharout({c}))"  # char(n) padded, as pgoutput sends it (a cast to text trims)
    return f"{c}::text"


def lake_text(column: Column, data_type: T.DataType) -> Column:
    """Spark: the column as canonical text (NULL stays NULL)."""
    if isinstance(data_type, (*INTEGER_TYPES, T.DecimalType)):
        return column.cast("string")
    if isinstance(data_type, T.FloatType | T.DoubleType):
        bits = F.call_function(
            "reflect", F.lit("java.lang.Double"), F.lit("doubleToLongBits"), column.cast("double")
        )
        return F.when(column.isNotNull(), bits)
    if isinstance(data_type, T.BooleanType):
        return column.cast("int").cast("string")
    if isinstance(data_type, T.DateType):
        return F.call_function("unix_date", column).cast("string")
    if isinstance(data_type, T.TimestampNTZType):  # the wall clock read as UTC (the session's time zone)
        return F.call_function("unix_micros", column.cast("timestamp")).cast("string")
    if isinstance(data_type, T.TimestampType):
        return F.call_function("unix_micros", column).cast("string")
    if isinstance(data_type, T.BinaryType):
        return F.lower(F.hex(column))
    return column.cast("string")


def _pg_field(text_sql: str, nullable: bool = True) -> str:
    return f"coalesce('=' || {text_sql}, '{NULL_TEXT}')" if nullable else f"'=' || {text_sql}"


def _lake_field(text: Column) -> Column:
    return F.coalesce(F.concat(F.lit("="), text), F.lit(NULL_TEXT))


def pg_row_hash(fields: Sequence[str]) -> str:
    """PostgreSQL: the row hash (signed 64 bits of the row text's MD5) of canonical fields."""
    text = "concat_ws(chr(31), " + ", ".join(fields) + ")"
    return f"('x' || substr(md5({text}), 1, 16))::bit(64)::bigint"


def lake_row_hash(fields: Sequence[Column]) -> Column:
    text = F.concat_ws(SEPARATOR, *fields)
    return F.conv(F.substring(F.md5(text), 1, 16), 16, -10).cast("bigint")


def _hash_sums() -> list[Column]:
    """count and the exact sum of the row hashes, as two long sums (high 32 bits, arithmetic shift; low 32
    bits, unsigned): h = hi·2^32 + lo, and neither sum can overflow below 2^31 rows per segment. A sum of
    decimal(38,0) is the same number at the cost of BigDecimal arithmetic per row."""
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(F.shiftright("h", 32)).alias("hi"),
        F.sum(F.col("h").bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
    ]


def python_row_hash(fields: Sequence[str]) -> int:
    """The same hash from already canonical fields (tests; the SQLite source goes through Spark)."""
    import hashlib

    value = int(hashlib.md5(SEPARATOR.join(fields).encode("utf-8")).hexdigest()[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


# ---------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class CompareColumn:
    name: str
    data_type: T.DataType  # the clean table's type (a widened column: the wider type, on both sides)
    source_type: str
    in_lake: bool


@dataclass(frozen=True)
class TablePlan:
    """What is compared: the table's key columns and the source's columns, typed as the lake holds them."""

    spec: TableSpec
    lake_table: str
    keys: tuple[CompareColumn, ...]
    columns: tuple[CompareColumn, ...]

    @property
    def integer_key(self) -> bool:
        return len(self.keys) == 1 and isinstance(self.keys[0].data_type, INTEGER_TYPES)


def plan_table(spark: SparkSession, config: LakeConfig, spec: TableSpec) -> TablePlan:
    lake_table = config.clean_table(spec.iceberg_name)
    lake_types = {f.name.lower(): f.dataType for f in spark.table(lake_table).schema.fields}
    columns = []
    for column in spec.columns:
        if column.name.lower() in RESERVED_COLUMNS:
            continue
        wanted = spec.spark_type_of(column.name)
        assert wanted is not None
        lake_type = lake_types.get(column.name.lower())
        columns.append(
            CompareColumn(column.name, lake_type or wanted, column.source_type, lake_type is not None)
        )
    by_name = {c.name.lower(): c for c in columns}
    keys = tuple(by_name[k.lower()] for k in spec.primary_key)
    return TablePlan(spec, lake_table, keys, tuple(columns))


# A segment level: segment j holds the keys whose x (`k - lo`, or the key hash) is in [j << shift,
# ((j + 1) << shift) - 1]; `within` limits the level to some segments of the level above (None: all).
@dataclass(frozen=True)
class Level:
    shift: int
    lo: int
    within: tuple[tuple[int, int], ...] | None  # x ranges [a, b], sorted, disjoint


def x_ranges(segments: Iterable[int], shift: int) -> list[tuple[int, int]]:
    """Sorted, merged x ranges covering the given segments of a level."""
    ranges: list[tuple[int, int]] = []
    for j in sorted(set(segments)):
        a, b = j << shift, ((j + 1) << shift) - 1
        if ranges and ranges[-1][1] + 1 == a:
            ranges[-1] = (ranges[-1][0], b)
        else:
            ranges.append((a, b))
    return ranges


def aligned_segments(ranges: Sequence[tuple[int, int]]) -> tuple[int, list[int]]:
    """The ranges as whole segments of one size: (shift, segment numbers), the largest shift that every
    range's bounds are aligned to (ranges made by `x_ranges` of one level: at least that level's shift)."""
    shift = HASH_BITS + 4
    for a, b in ranges:
        for bound in (a, b + 1):
            if bound:
                shift = min(shift, (bound & -bound).bit_length() - 1)
    return shift, [j for a, b in ranges for j in range(a >> shift, (b >> shift) + 1)]


def split_ranges(ranges: Sequence[tuple[int, int]], parts: int) -> list[list[tuple[int, int]]]:
    """Cut x ranges into at most `parts` groups of about equal span (one source query each)."""
    if not ranges:
        return []
    total = sum(b - a + 1 for a, b in ranges)
    share = max(1, math.ceil(total / parts))
    groups: list[list[tuple[int, int]]] = [[]]
    room = share
    for a, b in ranges:
        while a <= b:
            take = min(b - a + 1, room)
            groups[-1].append((a, a + take - 1))
            a += take
            room -= take
            if room == 0 and len(groups) < parts:
                groups.append([])
                room = share
            elif room == 0:
                room = total  # the last group takes the rest
    return [g for g in groups if g]


# ---------------------------------------------------------------------------------------- the two sides
@dataclass
class SideCounters:
    rows_hashed: int = 0
    rows_fetched: int = 0  # rows (key + hash) moved to the comparison, not sums
    bytes_moved: int = 0  # payload bytes of what the source returned (values as text)
    queries: int = 0


class SourceSide(Protocol):
    counters: SideCounters

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None: ...

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]: ...

    def row_hashes(self, plan: TablePlan, level: Level) -> dict[tuple[str, ...], int]: ...


def _payload(row: Sequence[Any]) -> int:
    return sum(len(str(v)) for v in row if v is not None)


class PostgresJdbcSource:
    """A PostgreSQL source through Spark's JDBC data source: every query computes canonical row hashes and
    (for segments) their sums inside PostgreSQL; key ranges go to `parallelism` concurrent queries."""

    def __init__(
        self,
        spark: SparkSession,
        url: str,
        properties: dict[str, str],
        parallelism: int = 4,
    ) -> None:
        self.spark = spark
        self.url = url
        self.properties = {"driver": "org.postgresql.Driver", **properties}
        self.parallelism = parallelism
        self.counters = SideCounters()

    # -- SQL pieces
    def _table(self, plan: TablePlan) -> str:
        return f"{_pg_ident(plan.spec.source_schema)}.{_pg_ident(plan.spec.name)}"

    def _key_texts(self, plan: TablePlan) -> list[str]:
        return [pg_text(k.name, k.data_type, k.source_type) for k in plan.keys]

    def _x(self, plan: TablePlan, lo: int) -> str:
        if plan.integer_key:
            return f"({_pg_ident(plan.keys[0].name)}::bigint - ({lo}))"
        text = "concat_ws(chr(31), " + ", ".join(self._key_texts(plan)) + ")"
        return f"('x' || substr(md5({text}), 1, 15))::bit({HASH_BITS})::bigint"

    def _row_hash(self, plan: TablePlan) -> str:
        fields = [
            _pg_field(pg_text(c.name, c.data_type, c.source_type), c not in plan.keys) for c in plan.columns
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
            key = f"t.{_pg_ident(plan.keys[0].name)}"
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
        key = _pg_ident(plan.keys[0].name)
        rows = self._read(
            [f"SELECT min({key})::bigint AS lo, max({key})::bigint AS hi FROM {self._table(plan)}"]
        )
        self.counters.bytes_moved += _payload(rows[0])
        lo, hi = rows[0]["lo"], rows[0]["hi"]
        return None if lo is None else (int(lo), int(hi))

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]:
        x = self._x(plan, level.lo)
        queries = [
            f"SELECT (x >> {level.shift}) AS seg, count(*) AS n, sum(h)::numeric(38,0) AS h FROM ("
            f"SELECT {x} AS x, {self._row_hash(plan)} AS h {self._from_where(plan, level.lo, group)}"
            ") s GROUP BY 1"
            for group in self._groups(plan, level)
        ]
        sums: dict[int, tuple[int, int]] = {}
        for row in self._read(queries):
            self.counters.bytes_moved += _payload(row)
            n, h = sums.get(row["seg"], (0, 0))
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


class LakeSide:
    """The clean table's side, in Spark: the same canonical text and hashes, summed per segment."""

    def __init__(self, spark: SparkSession, cache: bool = True) -> None:
        self.spark = spark
        self.cache = cache
        self.counters = SideCounters()
        self._cached: dict[tuple[str, int], DataFrame] = {}

    def _key_texts(self, plan: TablePlan, frame: DataFrame) -> list[Column]:
        return [lake_text(frame[quote(k.name)], k.data_type) for k in plan.keys]

    def hashed(self, plan: TablePlan, lo: int, span: tuple[int, int] | None = None) -> DataFrame:
        """`x`, `k0…`, `h` of every row of the clean table (an integer key: of its rows with x in `span`,
        a filter on the key column itself, which Iceberg prunes data files and row groups by)."""
        frame = self.spark.table(plan.lake_table)
        if span is not None and plan.integer_key:
            frame = frame.where(F.col(quote(plan.keys[0].name)).between(lo + span[0], lo + span[1]))
        fields = [
            _lake_field(lake_text(frame[quote(c.name)], c.data_type) if c.in_lake else F.lit(None))
            for c in plan.columns
        ]
        keys = self._key_texts(plan, frame)
        if plan.integer_key:
            x = frame[quote(plan.keys[0].name)].cast("bigint") - F.lit(lo)
        else:
            x = F.conv(F.substring(F.md5(F.concat_ws(SEPARATOR, *keys)), 1, 15), 16, 10).cast("bigint")
        return frame.select(
            x.alias("x"), *[k.alias(f"k{i}") for i, k in enumerate(keys)], lake_row_hash(fields).alias("h")
        )

    def _rows(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool, may_cache: bool
    ) -> DataFrame:
        """The hashed rows of a level's segments. The first level reads the table (a matching table is read
        once, nothing cached); the first bisect level keeps its rows (the differing segments' only) in
        Spark's cache, and every later level of the comparison, being inside them, reads the cache."""
        cached = None if fresh else self._cached.get((plan.lake_table, level.lo))
        if cached is not None:
            return self._within(cached, level, parent_shift)
        span = None
        if level.within is not None:
            span = (min(a for a, _ in level.within), max(b for _, b in level.within))
        frame = self._within(self.hashed(plan, level.lo, span), level, parent_shift)
        if self.cache and may_cache and not fresh and parent_shift is not None:
            frame = frame.cache()
            self._cached[(plan.lake_table, level.lo)] = frame
        return frame

    def release(self) -> None:
        for frame in self._cached.values():
            frame.unpersist()
        self._cached.clear()

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None:
        key = plan.keys[0].name
        row = (
            self.spark.table(plan.lake_table)
            .agg(
                F.min(F.col(quote(key)).cast("bigint")).alias("lo"),
                F.max(F.col(quote(key)).cast("bigint")).alias("hi"),
            )
            .first()
        )
        return None if row is None or row["lo"] is None else (int(row["lo"]), int(row["hi"]))

    def estimated_rows(self, plan: TablePlan) -> int:
        """Rows of the current snapshot, from its summary (no scan); a count when the summary lacks it."""
        row = self.spark.sql(
            f"SELECT summary FROM {plan.lake_table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        summary = dict(row["summary"]) if row else {}
        try:
            return max(0, int(summary["total-records"]) - int(summary.get("total-position-deletes", 0)))
        except (KeyError, ValueError):
            return self.spark.table(plan.lake_table).count()

    @staticmethod
    def _within(frame: DataFrame, level: Level, parent_shift: int | None) -> DataFrame:
        if level.within is None:
            return frame
        lo = min(a for a, _ in level.within)
        hi = max(b for _, b in level.within)
        frame = frame.where(F.col("x").between(lo, hi))
        if parent_shift is None:
            return frame
        parents = sorted(
            {j for a, b in level.within for j in range(a >> parent_shift, (b >> parent_shift) + 1)}
        )
        return frame.where(F.shiftright("x", parent_shift).isin(parents))

    def segment_sums(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool = False
    ) -> dict[int, tuple[int, int]]:
        frame = self._rows(plan, level, parent_shift, fresh, may_cache=True)
        rows = frame.groupBy(F.shiftright("x", level.shift).alias("seg")).agg(*_hash_sums()).collect()
        sums = {int(r["seg"]): (int(r["n"]), (int(r["hi"]) << 32) + int(r["lo"])) for r in rows}
        self.counters.rows_hashed += sum(n for n, _ in sums.values())
        return sums

    def row_hashes(
        self, plan: TablePlan, level: Level, parent_shift: int | None, fresh: bool = False
    ) -> dict[tuple[str, ...], int]:
        frame = self._rows(plan, level, parent_shift, fresh, may_cache=False)
        columns = [f"k{i}" for i in range(len(plan.keys))]
        rows = frame.select(*columns, "h").collect()
        found = {tuple(r[c] for c in columns): int(r["h"]) for r in rows}
        self.counters.rows_fetched += len(found)
        self.counters.rows_hashed += len(found)
        return found


class SqliteSource:
    """SQLite (the local demo's other source; no MD5 in SQLite): the rows of the key ranges asked for are
    read by Python's sqlite3, typed as the lake's columns and hashed by the same Spark expressions. Rows
    cross for every level: a test-only source."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path
        self.counters = SideCounters()

    def _frame(self, plan: TablePlan, lo: int, ranges: Sequence[tuple[int, int]] | None) -> DataFrame:
        names = ", ".join(_pg_ident(c.name) for c in plan.columns)
        sql = f"SELECT {names} FROM {_pg_ident(plan.spec.source_schema)}.{_pg_ident(plan.spec.name)}"
        parameters: list[int] = []
        if ranges is not None and plan.integer_key:
            key = _pg_ident(plan.keys[0].name)
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
        fields = [_lake_field(lake_text(frame[quote(c.name)], c.data_type)) for c in plan.columns]
        keys = [lake_text(frame[quote(k.name)], k.data_type) for k in plan.keys]
        if plan.integer_key:
            x = frame[quote(plan.keys[0].name)].cast("bigint") - F.lit(level.lo)
        else:
            x = F.conv(F.substring(F.md5(F.concat_ws(SEPARATOR, *keys)), 1, 15), 16, 10).cast("bigint")
        hashed = frame.select(
            x.alias("x"), *[k.alias(f"k{i}") for i, k in enumerate(keys)], lake_row_hash(fields).alias("h")
        )
        return LakeSide._within(hashed, level, None)

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None:
        key = _pg_ident(plan.keys[0].name)
        with sqlite3.connect(self.path) as db:
            lo, hi = db.execute(
                f"SELECT min({key}), max({key}) FROM {_pg_ident(plan.spec.source_schema)}.{_pg_ident(plan.spec.name)}"
            ).fetchone()
        return None if lo is None else (int(lo), int(hi))

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]:
        rows = (
            self._sides(plan, level)
            .groupBy(F.shiftright("x", level.shift).alias("seg"))
            .agg(*_hash_sums())
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


# ---------------------------------------------------------------------------------------- comparing
@dataclass
class TableResult:
    table: str
    key_mode: str = ""  # "range" (one integer key) or "hash"
    segments: int = 0  # first-level segments
    levels: int = 0
    source_rows_hashed: int = 0
    lake_rows_hashed: int = 0
    source_rows_fetched: int = 0  # rows (key + row hash) moved from the source to find differing keys
    source_bytes: int = 0  # payload bytes the source returned (values as text)
    source_queries: int = 0
    missing: int = 0
    extra: int = 0
    differing: int = 0
    in_flight: int = 0  # differed at first, not confirmed after the lake applied what DMS wrote before T0
    recheck: str = ""  # "confirmed" | "lake behind" | "not needed" | "no raw path"
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    repaired: bool = False
    source_empty: bool = False  # the source held no row at the check (a TRUNCATE: DMS reloads write nothing)
    emptied: bool = False  # repaired by emptying the clean table here (a reload with no rows), not by DMS
    seconds: float = 0.0
    error: str | None = None

    @property
    def diverged(self) -> bool:
        return bool(self.missing or self.extra or self.differing)


Difference = tuple[str, tuple[str, ...], int | None]  # kind, key texts, the source's row hash


def diff_rows(
    source: dict[tuple[str, ...], int], lake: dict[tuple[str, ...], int]
) -> dict[tuple[str, ...], Difference]:
    """Keys whose rows differ: missing from the lake, extra in the lake, or with other values."""
    found: dict[tuple[str, ...], Difference] = {}
    for key, h in source.items():
        if key not in lake:
            found[key] = ("missing", key, h)
        elif lake[key] != h:
            found[key] = ("differing", key, h)
    for key in lake.keys() - source.keys():
        found[key] = ("extra", key, None)
    return found


@dataclass
class Comparison:
    differences: dict[tuple[str, ...], Difference]
    leaves: list[Level]  # the leaf segments the differences are in (to read again for the recheck)
    segments: int
    levels: int
    source_rows: int = 0  # the source's rows at the first level (all its keys)


def _first_level(
    plan: TablePlan, source: SourceSide, lake: LakeSide, options: ReconcileOptions
) -> tuple[Level, int] | None:
    """Level 0: lo and the shift that gives segments of about `segment_rows` rows. None: both empty."""
    if plan.integer_key:
        bounds = [b for b in (source.bounds(plan), lake.bounds(plan)) if b is not None]
        if not bounds:
            return None
        lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
        span = hi - lo + 1
        if span >= 1 << 62:
            raise ValueError("key span too wide for range segments")
    else:
        lo, span = 0, 1 << HASH_BITS
    rows = max(1, lake.estimated_rows(plan))
    wanted = max(1, math.ceil(rows / options.segment_rows))
    shift = max(0, math.ceil(math.log2(max(1, span / wanted))))
    if plan.integer_key:
        return Level(shift, lo, ((0, span - 1),)), shift
    return Level(shift, lo, None), shift


def compare_table(
    plan: TablePlan, source: SourceSide, lake: LakeSide, options: ReconcileOptions
) -> Comparison:
    """Segment sums on both sides, bisecting the differing segments down to rows."""
    first = _first_level(plan, source, lake, options)
    if first is None:
        return Comparison({}, [], 0, 0)
    level, _ = first
    step = int(math.log2(options.bisect_factor))
    parent_shift: int | None = None
    differences: dict[tuple[str, ...], Difference] = {}
    leaves: list[Level] = []
    segments = 0
    source_total = 0
    levels = 0
    while True:
        levels += 1
        began = time.monotonic()
        source_sums, lake_sums = _both(
            lambda lv=level: source.segment_sums(plan, lv),
            lambda lv=level, ps=parent_shift: lake.segment_sums(plan, lv, ps),
        )
        log.info(
            "%s level %d (segments of 2^%d keys, %s ranges): %d sums, %.2fs",
            plan.spec.qualified_name,
            levels,
            level.shift,
            len(level.within) if level.within is not None else "all",
            len(source_sums),
            time.monotonic() - began,
        )
        if levels == 1:
            segments = len(source_sums.keys() | lake_sums.keys())
            source_total = sum(n for n, _ in source_sums.values())
        differing = [
            j for j in source_sums.keys() | lake_sums.keys() if source_sums.get(j) != lake_sums.get(j)
        ]
        if not differing:
            break
        small = [
            j
            for j in differing
            if level.shift == 0
            or max(source_sums.get(j, (0, 0))[0], lake_sums.get(j, (0, 0))[0]) <= options.leaf_rows
        ]
        large = sorted(set(differing) - set(small))
        if small:
            began = time.monotonic()
            leaf = Level(level.shift, level.lo, tuple(x_ranges(small, level.shift)))
            source_rows, lake_rows = _both(
                lambda lv=leaf: source.row_hashes(plan, lv),
                lambda lv=leaf, s=level.shift: lake.row_hashes(plan, lv, s),
            )
            log.info(
                "%s leaves of level %d: %d segments, %d source rows, %.2fs",
                plan.spec.qualified_name,
                levels,
                len(small),
                len(source_rows),
                time.monotonic() - began,
            )
            differences.update(diff_rows(source_rows, lake_rows))
            leaves.append(leaf)
        if not large:
            break
        parent_shift = level.shift
        level = Level(max(0, level.shift - step), level.lo, tuple(x_ranges(large, level.shift)))
    return Comparison(differences, leaves, segments, levels, source_total)


def _both(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Run the source's and the lake's side at once (the source database works while Spark hashes)."""
    result: dict[str, Any] = {}
    failure: list[BaseException] = []

    began = time.monotonic()

    def run() -> None:
        try:
            result["first"] = first()
        except BaseException as error:  # re-raised below
            failure.append(error)
        log.debug("source side: %.2fs", time.monotonic() - began)

    thread = threading.Thread(target=run, name="reconcile-source")
    thread.start()
    result["second"] = second()
    log.debug("lake side: %.2fs", time.monotonic() - began)
    thread.join()
    if failure:
        raise failure[0]
    return result["first"], result["second"]


# ---------------------------------------------------------------------------------------- in flight
CaughtUp = Callable[[TableSpec, datetime], bool]


def raw_caught_up(spark: SparkSession, config: LakeConfig, raw_path: str) -> CaughtUp:
    """Has the clean table applied every CDC file DMS wrote into the raw zone before `t0`? The raw audit's
    rule (`raw_audit.applied_everything_before`: applied, quarantined as a whole file, or superseded by a
    reload), asked of the table's own folder only: another table's backlog does not hold this one up."""
    from lakehouse.names import table_folder
    from lakehouse.raw_audit import applied_everything_before

    def check(spec: TableSpec, t0: datetime) -> bool:
        folder = table_folder(raw_path, spec.source_schema, spec.name)
        return applied_everything_before(spark, config, folder, t0)

    return check


def recheck(
    plan: TablePlan,
    comparison: Comparison,
    source: SourceSide,
    lake: LakeSide,
    caught_up: CaughtUp | None,
    t0: datetime,
    options: ReconcileOptions,
) -> tuple[dict[tuple[str, ...], Difference], int, str]:
    """Confirm the differences once the lake has applied what DMS wrote before t0: (divergence, in flight,
    what the recheck did)."""
    if not comparison.differences:
        return {}, 0, "not needed"
    if caught_up is None:
        return comparison.differences, 0, "no raw path"
    deadline = time.monotonic() + options.recheck_wait_seconds
    while not caught_up(plan.spec, t0):
        if time.monotonic() >= deadline:
            return {}, len(comparison.differences), "lake behind"
        time.sleep(options.recheck_poll_seconds)
    source_rows: dict[tuple[str, ...], int] = {}
    lake_rows: dict[tuple[str, ...], int] = {}
    for leaf in comparison.leaves:
        s, lk = _both(
            lambda lv=leaf: source.row_hashes(plan, lv),
            lambda lv=leaf: lake.row_hashes(plan, lv, lv.shift, fresh=True),
        )
        source_rows.update(s)
        lake_rows.update(lk)
    now = diff_rows(source_rows, lake_rows)
    confirmed = {
        key: difference
        for key, difference in now.items()
        if key in comparison.differences and comparison.differences[key][2] == difference[2]
    }
    return confirmed, len(comparison.differences) - len(confirmed), "confirmed"


# ---------------------------------------------------------------------------------------- the run
@dataclass
class ReconcileReport:
    run_id: str
    job: str = "reconcile"
    started_at: str = ""
    tables: list[TableResult] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # the row budget was spent: next run's
    next_table: str | None = None
    repairs: int = 0
    divergence_rows_added: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def diverged(self) -> list[TableResult]:
        return [t for t in self.tables if t.diverged]

    @property
    def failed(self) -> list[TableResult]:
        return [t for t in self.tables if t.error]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.error

    def totals(self) -> dict[str, int]:
        keys = (
            "missing",
            "extra",
            "differing",
            "in_flight",
            "source_rows_hashed",
            "source_bytes",
            "source_rows_fetched",
        )
        totals = {k: sum(getattr(t, k) for t in self.tables) for k in keys}
        totals["diverged_tables"] = len(self.diverged)
        totals["repairs"] = self.repairs
        return totals

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["totals"] = self.totals()
        return document


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _key_json(plan: TablePlan, key: tuple[str, ...]) -> str:
    values = {
        k.name: int(text) if isinstance(k.data_type, INTEGER_TYPES) else text
        for k, text in zip(plan.keys, key, strict=True)
    }
    return _dumps(values)


def _order(plan: TablePlan, key: tuple[str, ...]) -> tuple:
    return tuple(
        (0, int(text), "") if isinstance(k.data_type, INTEGER_TYPES) else (1, 0, text)
        for k, text in zip(plan.keys, key, strict=True)
    )


def rotation(tables: Sequence[str], start_after: str | None) -> list[str]:
    """The tables in schema-file order, starting after the one the last run checked last."""
    if start_after in tables:
        index = tables.index(start_after) + 1
        return [*tables[index:], *tables[:index]]
    return list(tables)


def reconcile(
    spark: SparkSession,
    config: LakeConfig,
    schema: SchemaFile,
    source: SourceSide,
    options: ReconcileOptions = ReconcileOptions(),
    run_id: str = "reconcile",
    tables: Sequence[str] = (),
    caught_up: CaughtUp | None = None,
    start_after: str | None = None,
    reload_tables: Callable[[list[TableSpec]], None] | None = None,
) -> ReconcileReport:
    """Compare each table (with a primary key, loaded in the lake) with its source; record what diverged."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    if (
        zone != "UTC"
    ):  # a timestamp_ntz's canonical text reads its wall clock as UTC (lakehouse.session sets it)
        raise ValueError(f"reconcile needs spark.sql.session.timeZone UTC, not {zone!r}")
    started = time.monotonic()
    t0 = datetime.now(UTC).replace(tzinfo=None)
    report = ReconcileReport(run_id, started_at=t0.isoformat(sep=" "))
    chosen = [schema.tables[name] for name in tables] if tables else list(schema.tables.values())
    names = [spec.qualified_name for spec in chosen]
    order = rotation(names, start_after)
    by_name = {spec.qualified_name: spec for spec in chosen}
    plans: dict[str, TablePlan] = {}
    lake = LakeSide(spark, cache=options.cache_lake)
    budget = options.max_source_rows
    spent = 0
    for position, name in enumerate(order):
        spec = by_name[name]
        if not spec.has_primary_key or not table_exists(spark, config.clean_table(spec.iceberg_name)):
            continue
        plan = plans[name] = plan_table(spark, config, spec)
        if budget is not None and report.tables:
            estimate = lake.estimated_rows(plan)
            if spent + estimate > budget:
                report.not_checked = order[position:]
                break
        result = _reconcile_table(plan, source, lake, options, caught_up, t0)
        report.tables.append(result)
        spent += result.source_rows_hashed
        report.next_table = name
    if report.diverged and options.repair_mode == "reload" and reload_tables is not None:
        try:
            # an empty source: DMS's reload writes no LOAD file, so the run empties the table itself
            empty = {
                t.table for t in report.diverged if t.source_empty and source_is_empty(plans[t.table], source)
            }
            if empty and not options.empty_clean_tables:
                log.warning(
                    "%s: the source is empty; a run without the pipeline lease never writes a clean table, so"
                    " the loop's next reconcile (RepairMode=reload) empties it",
                    sorted(empty),
                )
                unrepaired, empty = empty, set()
            else:
                unrepaired = set()
            reloaded = [t for t in report.diverged if t.table not in empty | unrepaired]
            if reloaded:
                reload_tables([by_name[t.table] for t in reloaded])
                for result in reloaded:
                    result.repaired = True
                report.repairs += len(reloaded)
            for result in report.diverged:
                if result.table in empty:
                    empty_clean_table(spark, config, by_name[result.table], t0, run_id)
                    result.emptied = result.repaired = True
                    report.repairs += 1
        except Exception as error:  # the divergence stands recorded; the run fails, alarming
            log.exception("repairing %s failed", [t.table for t in report.diverged if not t.repaired])
            report.error = f"repair: {type(error).__name__}: {error}"[:2000]
    report.divergence_rows_added = write_divergence(spark, config, report, t0)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _reconcile_table(
    plan: TablePlan,
    source: SourceSide,
    lake: LakeSide,
    options: ReconcileOptions,
    caught_up: CaughtUp | None,
    t0: datetime,
) -> TableResult:
    started = time.monotonic()
    result = TableResult(plan.spec.qualified_name, "range" if plan.integer_key else "hash")
    before_source = asdict(source.counters)
    before_lake = asdict(lake.counters)
    try:
        comparison = compare_table(plan, source, lake, options)
        confirmed, in_flight, what = recheck(plan, comparison, source, lake, caught_up, t0, options)
        result.segments, result.levels, result.in_flight, result.recheck = (
            comparison.segments,
            comparison.levels,
            in_flight,
            what,
        )
        result.source_empty = comparison.source_rows == 0
        for kind in KINDS:
            keys = sorted((k for k, d in confirmed.items() if d[0] == kind), key=lambda k: _order(plan, k))
            setattr(result, kind, len(keys))
            if keys:
                result.samples[kind] = [json.loads(_key_json(plan, k)) for k in keys[: options.sample_keys]]
    except Exception as error:  # one table's failure does not stop the others
        log.exception("%s: reconcile failed", plan.spec.qualified_name)
        result.error = f"{type(error).__name__}: {error}"[:2000]
    finally:
        lake.release()
    after_source = asdict(source.counters)
    result.source_rows_hashed = after_source["rows_hashed"] - before_source["rows_hashed"]
    result.source_rows_fetched = after_source["rows_fetched"] - before_source["rows_fetched"]
    result.source_bytes = after_source["bytes_moved"] - before_source["bytes_moved"]
    result.source_queries = after_source["queries"] - before_source["queries"]
    result.lake_rows_hashed = lake.counters.rows_hashed - before_lake["rows_hashed"]
    result.seconds = round(time.monotonic() - started, 3)
    if result.diverged:
        log.warning(
            "%s DIVERGED: %d missing, %d extra, %d differing",
            result.table,
            result.missing,
            result.extra,
            result.differing,
        )
    return result


def divergence_table(config: LakeConfig, name: str = "dms_divergence") -> str:
    return config.clean_table(name)


def write_divergence(spark: SparkSession, config: LakeConfig, report: ReconcileReport, at: datetime) -> int:
    """Append the sample keys of every diverged table to `<clean_db>.dms_divergence`; returns the rows."""
    rows = [
        (report.run_id, result.table, _dumps(key), kind, at)
        for result in report.tables
        for kind in KINDS
        for key in result.samples.get(kind, [])
    ]
    if not rows:
        return 0
    table = divergence_table(config)
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    if not table_exists(spark, table):
        create_table(spark, table, DIVERGENCE_SCHEMA, "Keys where a clean table differs from its source")
    append_rows(
        spark, table, spark.createDataFrame(rows, DIVERGENCE_SCHEMA), {"dms.reconcile-run": report.run_id}
    )
    return len(rows)


def source_is_empty(plan: TablePlan, source: SourceSide) -> bool:
    """Asked again right before the repair: does the source table hold no row at all? (One segment sum over
    the whole key space: an empty table returns no sums.)"""
    return not source.segment_sums(plan, Level(HASH_BITS, 0, None))


def empty_clean_table(
    spark: SparkSession,
    config: LakeConfig,
    spec: TableSpec,
    t0: datetime,
    run_id: str,
    margin_seconds: int | None = None,
) -> None:
    """Repair a table whose source is empty (a TRUNCATE, which DMS does not replicate): what a reload with no
    LOAD rows makes of it (lakehouse.full_load `_replace_with_load` / `_reloaded`), read at `t0` and placed
    by time as such a reload is: the rows go, except a row holding a change newer than `t0` + the margin
    (made after the check, which its later changes follow); the table's floor becomes `t0` - the margin, so
    a late change older than the check can't bring a row back and a newer one applies. One fenced REPLACE,
    the history kept (time travel and rollback reach the rows before). DMS is not asked: its reload of an
    empty table writes no LOAD file and would remove the table's raw files (CDC not applied yet with them)."""
    from lakehouse.apply_run import ApplyOptions
    from lakehouse.changes import SEQ_TYPE
    from lakehouse.clean_table import (
        LOAD_FLOOR,
        aligned,
        check_sequences_comparable,
        load_floor,
        sequence_at,
        target_schema,
    )
    from lakehouse.names import CHANGE_SEQ_COLUMN

    table = config.clean_table(spec.iceberg_name)
    margin = timedelta(
        seconds=ApplyOptions().reload_margin_seconds if margin_seconds is None else margin_seconds
    )
    placed, settled = sequence_at(t0 - margin), sequence_at(t0 + margin)
    check_sequences_comparable(spark, table, spec, placed)
    floor = max(placed, load_floor(spark, table) or placed)
    target = target_schema(spark, table, spec, {})
    seq = F.col(quote(CHANGE_SEQ_COLUMN))
    kept = aligned(spark.table(table), target).where(
        seq.isNotNull() & (seq > F.lit(str(settled)).cast(SEQ_TYPE))
    )
    replace_table(
        spark,
        table,
        kept,
        {LOAD_FLOOR: str(floor)},
        {FULL_LOAD_DONE: "0", RUN_ID: run_id, REPLACED_SNAPSHOT: str(current_snapshot_id(spark, table))},
        f"DMS replica of {spec.qualified_name}",
    )
    log.warning("%s: the source is empty; emptied the clean table (floor %s)", spec.qualified_name, floor)


def dms_reloader(dms_client: Any, task_arn: str) -> Callable[[list[TableSpec]], None]:
    """Repair: ask DMS to reload the tables (fresh LOAD files, which the pipeline turns into the
    order-independent reload while CDC goes on)."""

    def reload(specs: list[TableSpec]) -> None:
        check_before_commit()  # a run that lost the pipeline lease asks DMS for nothing
        dms_client.reload_tables(
            ReplicationTaskArn=task_arn,
            TablesToReload=[{"SchemaName": s.source_schema, "TableName": s.name} for s in specs],
            ReloadOption="data-reload",
        )

    return reload


METRICS_NAMESPACE = "DmsIcebergLake"
METRICS_SERVICE = "reconcile"


def publish_metrics(report: ReconcileReport, cloudwatch: Any, namespace: str = METRICS_NAMESPACE) -> None:
    """The run's figures, dimension service=reconcile, zero included (the dashboard shows every run):
    `DivergedTables` and `DivergedRows` (missing + extra + differing; the alarm's metric), `RowsInFlight`,
    `Repairs`, `SourceRowsHashed`, `SourceBytes`, and `ReconcileFailedTables`."""
    totals = report.totals()
    figures = {
        "DivergedTables": totals["diverged_tables"],
        "DivergedRows": totals["missing"] + totals["extra"] + totals["differing"],
        "RowsInFlight": totals["in_flight"],
        "Repairs": totals["repairs"],
        "SourceRowsHashed": totals["source_rows_hashed"],
        "SourceBytes": totals["source_bytes"],
        "ReconcileFailedTables": len(report.failed),
    }
    dimensions = [{"Name": "service", "Value": METRICS_SERVICE}]
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": dimensions,
                "Value": float(value),
                "Unit": "Bytes" if name == "SourceBytes" else "Count",
            }
            for name, value in figures.items()
        ],
    )


# ---------------------------------------------------------------------------------------- the job
def reconcile_parser() -> Any:
    import argparse

    defaults = ReconcileOptions()
    parser = argparse.ArgumentParser(description="Compare every clean table with its source table")
    parser.add_argument(
        "--run_id", default="reconcile", help="names the run in the report and dms_divergence"
    )
    parser.add_argument("--source_engine", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--source_jdbc_url", default="", help="jdbc:postgresql://host:port/db")
    parser.add_argument("--source_user", default="", help="the source user (read-only: docs/DEPLOY.md)")
    parser.add_argument("--source_password", default="", help="local runs only; on AWS --source_secret_id")
    parser.add_argument(
        "--source_secret_id",
        default="",
        help="a Secrets Manager secret (username, password, and host/port/dbname when there is no URL)",
    )
    parser.add_argument("--source_sqlite_path", default="", help="--source_engine sqlite: the file")
    parser.add_argument("--tables", default="", help="comma list of schema.table (default: all)")
    parser.add_argument(
        "--max_source_rows",
        type=int,
        default=0,
        help="row budget of one run: tables rotate over runs (0: no budget; one table always runs)",
    )
    parser.add_argument("--state_uri", default="", help="where the rotation is remembered (JSON)")
    parser.add_argument("--segment_rows", type=int, default=defaults.segment_rows)
    parser.add_argument("--bisect_factor", type=int, default=defaults.bisect_factor)
    parser.add_argument("--leaf_rows", type=int, default=defaults.leaf_rows)
    parser.add_argument(
        "--parallelism", type=int, default=defaults.parallelism, help="concurrent source reads"
    )
    parser.add_argument("--sample_keys", type=int, default=defaults.sample_keys)
    parser.add_argument("--raw_path", default="", help="where DMS writes (the recheck waits for its files)")
    parser.add_argument("--recheck_wait_seconds", type=float, default=300.0)
    parser.add_argument("--repair_mode", choices=["alarm", "reload"], default="alarm")
    parser.add_argument(
        "--dms_task_arn", default="", help="--repair_mode reload: the DMS task to reload from"
    )
    parser.add_argument(
        "--fail_on_divergence",
        choices=["true", "false"],
        default="true",
        help="true: a diverged table fails the run (the failed-job alarm fires)",
    )
    parser.add_argument(
        "--metrics_namespace",
        default="",
        help="publish the run's figures to CloudWatch under this namespace (DmsIcebergLake on AWS; '': none)",
    )
    parser.add_argument("--report_uri", default=None, help="where to write the run report (JSON)")
    return parser


def source_credentials(args: Any) -> tuple[str, dict[str, str]]:
    """The JDBC URL and user/password: from the arguments, or from a Secrets Manager secret (the shape
    RDS and DMS secrets have: username, password, host, port, dbname)."""
    url, user, password = args.source_jdbc_url, args.source_user, args.source_password
    if args.source_secret_id:
        import boto3

        secret = json.loads(
            boto3.client("secretsmanager").get_secret_value(SecretId=args.source_secret_id)["SecretString"]
        )
        user = user or secret.get("username", "")
        password = secret.get("password", password)
        if not url and secret.get("host"):
            url = f"jdbc:postgresql://{secret['host']}:{secret.get('port', 5432)}/{secret.get('dbname', 'postgres')}"
    if not url:
        raise SystemExit("reconcile: --source_jdbc_url or a --source_secret_id with host is required")
    properties = {"user": user}
    if password:
        properties["password"] = password
    return url, properties


def reconcile_main(argv: Sequence[str]) -> int:
    from lakehouse.config import parse_job_arguments
    from lakehouse.jobs import _configure_logging, load_schema
    from lakehouse.session import build_session
    from lakehouse.storage import is_missing, read_json, write_text

    _configure_logging()
    parser = reconcile_parser()
    config, args = parse_job_arguments(argv, parser)
    if not config.schema_file:
        parser.error("--schema_file is required")
    schema = load_schema(config)
    options = ReconcileOptions(
        segment_rows=args.segment_rows,
        bisect_factor=args.bisect_factor,
        leaf_rows=args.leaf_rows,
        parallelism=args.parallelism,
        max_source_rows=args.max_source_rows or None,
        sample_keys=args.sample_keys,
        recheck_wait_seconds=args.recheck_wait_seconds,
        repair_mode=args.repair_mode,
        empty_clean_tables=installed() is not None,
    )
    if options.repair_mode == "reload" and not args.dms_task_arn:
        parser.error("--repair_mode reload needs --dms_task_arn")
    spark = build_session(config, "dms-reconcile")
    source: SourceSide
    if args.source_engine == "sqlite":
        if not args.source_sqlite_path:
            parser.error("--source_engine sqlite needs --source_sqlite_path")
        source = SqliteSource(spark, args.source_sqlite_path)
    else:
        url, properties = source_credentials(args)
        source = PostgresJdbcSource(spark, url, properties, options.parallelism)
    start_after = None
    if args.state_uri:
        try:
            start_after = read_json(args.state_uri, config.s3_endpoint_url).get("last_table")
        except Exception as error:
            if not is_missing(error):
                raise
    reloader = None
    if options.repair_mode == "reload":
        import boto3

        reloader = dms_reloader(boto3.client("dms"), args.dms_task_arn)
    report = reconcile(
        spark,
        config,
        schema,
        source,
        options,
        run_id=args.run_id,
        tables=[t.strip() for t in args.tables.split(",") if t.strip()],
        caught_up=raw_caught_up(spark, config, args.raw_path) if args.raw_path else None,
        start_after=start_after,
        reload_tables=reloader,
    )
    text = json.dumps(report.to_dict(), indent=2, default=str)
    print(text)
    if args.report_uri:
        write_text(args.report_uri, text, config.s3_endpoint_url)
    if args.metrics_namespace:
        import boto3

        publish_metrics(report, boto3.client("cloudwatch"), args.metrics_namespace)
    if args.state_uri and report.next_table:
        write_text(args.state_uri, json.dumps({"last_table": report.next_table}), config.s3_endpoint_url)
    for table in report.failed:
        log.error("%s: reconcile failed: %s", table.table, table.error)
    if not report.ok:
        return 1
    return 2 if report.diverged and args.fail_on_divergence == "true" else 0
