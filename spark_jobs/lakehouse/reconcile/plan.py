"""What the source <-> lake reconcile compares, and how (docs/CONTRACTS.md, "Reconcile"): its options, the
canonical text and row hash both sides compute (PostgreSQL SQL and Spark), a table's plan (its key and
columns typed as the lake holds them), the key space cut into segments, and what a side must answer."""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.config import LakeConfig
from lakehouse.base.names import RESERVED_COLUMNS
from lakehouse.base.schema import TableSpec

log = logging.getLogger(__name__)

RepairMode = Literal["alarm", "reload"]
SEPARATOR = "\x1f"
NULL_TEXT = "~"
HASH_BITS = 60  # key hash of non-integer keys: the first 15 hex digits of the key text's MD5
INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


@dataclass(frozen=True)
class ReconcileOptions:
    segment_rows: int = 1024  # rows per first-level segment (a matching table moves rows/segment_rows sums)
    bisect_factor: int = 32  # a differing segment is cut into this many (a power of two)
    leaf_rows: int = 64  # a differing segment this small has its keys and row hashes fetched
    parallelism: int = 4  # concurrent source queries per level
    max_source_rows: int | None = None  # row budget of one run (tables rotate; at least one table runs)
    sample_keys: int = 100  # keys per table and kind kept in the report and dms_divergence
    # S: a change committed at c is in a CDC file DMS named no later than c + S (capture latency,
    # CdcMaxBatchInterval, the two clocks apart). A difference is divergence only once seen S ago.
    settle_seconds: float = 0.0
    recheck_wait_seconds: float = 0.0  # > 0: the run waits S out, then this long for the lake to catch up
    recheck_poll_seconds: float = 5.0
    max_sightings: int = 100_000  # per table, carried to the next run (the oldest first)
    repair_mode: RepairMode = "alarm"
    # a reload asked of DMS is not asked again until the table applied a load started after it, or this long
    reload_patience_seconds: float = 6 * 3600.0
    # True: the DMS in use carries a MySQL FLOAT exactly (the local DMS writes the shortest text that reads back
    # as the same single), so it is compared; AWS DMS does not (`carried_lossily`): left out of the row hash
    compare_mysql_float: bool = False
    cache_lake: bool = True  # keep the lake's (segment key, hash) between bisect levels
    # a run that may write a clean table (emptying one whose source is empty): only a run under the pipeline
    # lease (the loop's); a run started by hand is unfenced and left going beside the holder, so it only reports
    empty_clean_tables: bool = True

    def __post_init__(self) -> None:
        if self.bisect_factor < 2 or self.bisect_factor & (self.bisect_factor - 1):
            raise ValueError(f"bisect_factor {self.bisect_factor}: a power of two, at least 2")
        if self.segment_rows < 1 or self.leaf_rows < 1 or self.parallelism < 1:
            raise ValueError("segment_rows, leaf_rows and parallelism must be at least 1")
        if self.settle_seconds < 0 or self.recheck_wait_seconds < 0 or self.max_sightings < 0:
            raise ValueError("settle_seconds, recheck_wait_seconds and max_sightings must not be negative")
        if self.repair_mode not in ("alarm", "reload"):
            raise ValueError(f"repair_mode {self.repair_mode!r}: alarm or reload")


DEFAULT_OPTIONS = ReconcileOptions()


# ---------------------------------------------------------------------------------------- canonical text
def pg_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fixed_char(source_type: str) -> bool:
    name = source_type.strip().lower()
    return name.startswith(("char", "character", "bpchar", "nchar")) and not name.startswith(
        ("character varying", "char varying")
    )


def pg_text(column: str, data_type: T.DataType, source_type: str) -> str:
    """PostgreSQL SQL: the column as canonical text (NULL stays NULL), byte for byte `lake_text`'s."""
    c = pg_ident(column)
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


def pg_field(text_sql: str, nullable: bool = True) -> str:
    return f"coalesce('=' || {text_sql}, '{NULL_TEXT}')" if nullable else f"'=' || {text_sql}"


def lake_field(text: Column) -> Column:
    return F.coalesce(F.concat(F.lit("="), text), F.lit(NULL_TEXT))


def pg_row_hash(fields: Sequence[str]) -> str:
    """PostgreSQL: the row hash (signed 64 bits of the row text's MD5) of canonical fields."""
    text = "concat_ws(chr(31), " + ", ".join(fields) + ")"
    return f"('x' || substr(md5({text}), 1, 16))::bit(64)::bigint"


def lake_row_hash(fields: Sequence[Column]) -> Column:
    text = F.concat_ws(SEPARATOR, *fields)
    return F.conv(F.substring(F.md5(text), 1, 16), 16, -10).cast("bigint")


def hash_sums() -> list[Column]:
    """count and the exact sum of the row hashes, as two long sums (high 32 bits, arithmetic shift; low 32
    bits, unsigned): h = hi·2^32 + lo, and neither sum can overflow below 2^31 rows per segment. A sum of
    decimal(38,0) is the same number at the cost of BigDecimal arithmetic per row."""
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(F.shiftright("h", 32)).alias("hi"),
        F.sum(F.col("h").bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
    ]


def python_row_hash(fields: Sequence[str]) -> int:
    """The same row hash, in Python, from fields already in a canonical text."""
    value = int(hashlib.md5(SEPARATOR.join(fields).encode("utf-8")).hexdigest()[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def table_checksum(rows: Iterable[Sequence[str]]) -> str:
    """A table's checksum, in Python, from each row's fields in a canonical text: the exact sum of their row
    hashes (`python_row_hash`) as 32 hex digits (modulo 2^128). Row order does not matter; every value does."""
    return f"{sum(python_row_hash(fields) for fields in rows) % (1 << 128):032x}"


# ---------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class CompareColumn:
    name: str
    data_type: T.DataType  # the clean table's type (a widened column: the wider type, on both sides)
    source_type: str
    in_lake: bool


@dataclass(frozen=True)
class TablePlan:
    """What is compared: the table's key columns and the source's columns, typed as the lake holds them;
    `not_compared`: the columns DMS carries lossily, left out of both sides' row hashes (`carried_lossily`)."""

    spec: TableSpec
    lake_table: str
    keys: tuple[CompareColumn, ...]
    columns: tuple[CompareColumn, ...]
    not_compared: tuple[str, ...] = ()

    @property
    def integer_key(self) -> bool:
        return len(self.keys) == 1 and isinstance(self.keys[0].data_type, INTEGER_TYPES)


def carried_lossily(spec: TableSpec, column: CompareColumn) -> bool:
    """A column whose value DMS does not carry exactly: a MySQL FLOAT (REAL4) reaches the files as a decimal
    text of fewer digits than the single-precision value holds (AWS DMS: "the migrated value of a FLOAT might
    not match exactly the value in the source database"), so no canonical text of the lake's value equals the
    source's. A key column is always compared."""
    return spec.dialect == "mysql" and isinstance(column.data_type, T.FloatType)


def plan_table(
    spark: SparkSession, config: LakeConfig, spec: TableSpec, compare_lossy: bool = False
) -> TablePlan:
    lake_table = config.clean_table(spec.iceberg_name)
    lake_types = {f.name.lower(): f.dataType for f in spark.table(lake_table).schema.fields}
    columns: list[CompareColumn] = []
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
    lossy = [c for c in columns if not compare_lossy and c not in keys and carried_lossily(spec, c)]
    if lossy:
        log.info(
            "%s: not compared (DMS carries them lossily): %s", spec.qualified_name, [c.name for c in lossy]
        )
    compared = tuple(c for c in columns if c not in lossy)
    return TablePlan(spec, lake_table, keys, compared, tuple(c.name for c in lossy))


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


@dataclass(frozen=True)
class SourceStatistics:
    """What the source says of a table apart from its rows as the reconcile's reader sees them: a second,
    independent signal a repair needs (lakehouse.reconcile.repair_checks).
    `estimated_rows`: the source's own row statistics (None: it keeps none); `tolerance`: how far, as a share
    of it, that estimate may be off; `hidden_by`: why the reader may not see every row (None: it sees all).
    An empty table must be empty by every count the source keeps (`highest_recorded`), not only the current."""

    estimated_rows: int | None
    tolerance: float
    hidden_by: str | None = None
    estimated_from: str = ""  # which statistics, named in a refusal
    highest_recorded: int | None = None  # the largest count any of its statistics still records (emptying)


class SourceSide(Protocol):
    counters: SideCounters

    def statistics(self, plan: TablePlan) -> SourceStatistics: ...

    def bounds(self, plan: TablePlan) -> tuple[int, int] | None: ...

    def segment_sums(self, plan: TablePlan, level: Level) -> dict[int, tuple[int, int]]: ...

    def row_hashes(self, plan: TablePlan, level: Level) -> dict[tuple[str, ...], int]: ...


def rows_within(frame: DataFrame, level: Level, parent_shift: int | None) -> DataFrame:
    """The hashed rows (`x`, …) of a level's segments, of the segments of the level above (`parent_shift`)."""
    if level.within is None:
        return frame
    lo = min(a for a, _ in level.within)
    hi = max(b for _, b in level.within)
    frame = frame.where(F.col("x").between(lo, hi))
    if parent_shift is None:
        return frame
    parents = sorted({j for a, b in level.within for j in range(a >> parent_shift, (b >> parent_shift) + 1)})
    return frame.where(F.shiftright("x", parent_shift).isin(parents))
