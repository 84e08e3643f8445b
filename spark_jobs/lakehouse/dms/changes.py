"""Pure DataFrame → DataFrame steps from raw DMS records to one change per key.

raw text  →  typed_changes (types, Op, sequence; every problem is named: `_dms_reason` for a malformed
             record, `_dms_mismatch` for a value its column's type cannot hold, `_dms_widen` for a
             value that a wider type of the same family holds)
          →  expand_key_changes (a primary-key update becomes a delete of the old key + the new row)
          →  last_change_per_key (MERGE must never see two source rows for one key)

Typing never loses a value silently: Spark's casts truncate `1.5` to the int 1 and round `1.2345` to
the decimal(10,2) 1.23; here such values are mismatches (or widenings), never quietly changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

from lake_contracts.dms_files import CHANGE_SEQ_COLUMN, DEFAULT_TIMESTAMP_COLUMN, OP_COLUMN, VALID_OPS
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import INTERNAL_PREFIX, OP, quote
from lakehouse.base.schema import TableSpec
from lakehouse.dms.reader import CORRUPT, FILE_ORDER, FILE_URI, HEADER, POSITION, UNMATCHED, RawRead

SEQ = "_dms_seq"
COMMIT_TS = "_dms_commit_ts"
REASON = "_dms_reason"  # a malformed record: quarantined
MISMATCH = "_dms_mismatch"  # a value its column's type can't hold: the table stops (or quarantine, if asked)
WIDEN = "_dms_widen"  # `column<2>type` entries a wider type would hold: the table is widened and retyped
WIDEN_SEPARATOR = "\u0001"  # between entries (names may hold any printable character)
WIDEN_TYPE_SEPARATOR = "\u0002"  # between a column and the type it needs
RAW = "_dms_raw"
BEFORE_IMAGE = "_dms_bi_"
STAGED_PREFIX = "_dms_text_"  # a record's texts and its parsed sequence, computed once before they are typed
SEQ_TYPE = T.DecimalType(38, 0)
MAX_DECIMAL_PRECISION = 38
_RECORD_MASK = (1 << 33) - 1  # monotonically_increasing_id: the record's index within its partition


@dataclass(frozen=True)
class ChangeColumns:
    """Names of the columns DMS adds (S3 target settings and table-mapping rules)."""

    op: str = OP_COLUMN
    change_seq: str = CHANGE_SEQ_COLUMN
    timestamp: str = DEFAULT_TIMESTAMP_COLUMN
    before_image_prefix: str = "BI_"


@dataclass(frozen=True)
class HeaderLayout:
    """How the batch's header columns (lower case) map to the table: data and before-image columns."""

    data_columns: tuple[str, ...]
    before_image: dict[str, str]  # primary-key column → its before-image column


def header_layout(
    headers: Sequence[Sequence[str]], spec: TableSpec, names: ChangeColumns = ChangeColumns()
) -> HeaderLayout:
    special = {names.op.lower(), names.change_seq.lower(), names.timestamp.lower()}
    keys = {k.lower() for k in spec.primary_key}
    prefix = names.before_image_prefix.lower()
    data: dict[str, None] = {}
    before: dict[str, str] = {}
    for header in headers:
        for column in (c.lower() for c in header):
            if column in special:
                continue
            if prefix and column.startswith(prefix) and column[len(prefix) :] in keys:
                before[column[len(prefix) :]] = column
                continue
            data[column] = None
    return HeaderLayout(tuple(data), before)


def typed_changes(
    raw: RawRead,
    spec: TableSpec,
    layout: HeaderLayout,
    types: dict[str, T.DataType],
    names: ChangeColumns = ChangeColumns(),
    null_marker: str | None = None,
) -> DataFrame:
    """Typed change rows. Columns: the data columns (lower case), before images (`_dms_bi_<key>`),
    `_dms_op`, `_dms_seq` (AR_H_CHANGE_SEQ, or for a CDC record without one the file's time and the
    record's position), `_dms_commit_ts`, `_dms_file_order`, `_dms_pos`, and for a rejected record only
    (a reason or a mismatch) `_dms_file_uri` and `_dms_raw`; the problems `_dms_reason`, `_dms_mismatch`,
    `_dms_widen` (each null when there is none)."""
    rows = raw.found_rows()
    sources = {f.name: f.dataType for f in rows.schema.fields}
    keys = [k.lower() for k in spec.primary_key]
    all_csv = len(raw.csv_groups) == len(raw.groups)

    def text(name: str | None) -> Column:
        if not name or name not in sources:
            return F.lit(None).cast("string")
        value = F.col(quote(name))
        if null_marker is not None and raw.csv_groups and isinstance(sources[name], T.StringType):
            # CsvNullValue set: the marker is null, and any empty field is an empty string (CSV only:
            # a Parquet file has real nulls, and its text is what it is).
            marked = F.when(value == null_marker, F.lit(None)).otherwise(F.coalesce(value, F.lit("")))
            value = marked if all_csv else F.when(F.col(HEADER).isin(raw.csv_groups), marked).otherwise(value)
        groups = raw.groups_with(name)
        # A column its file's header lacks (added or dropped on the source) is null for that file.
        return value if groups is None else F.when(F.col(HEADER).isin(groups), value)

    op_name = names.op.lower() if names.op.lower() in sources else None
    seq_name = names.change_seq.lower() if names.change_seq.lower() in sources else None
    ts_name = names.timestamp.lower() if names.timestamp.lower() in sources else None

    # Each text is computed once, in a projection of its own, and the typing refers to it by name. Typing
    # reads a column's text up to ten times: inlined each time, the first pass of a wide table (web_sales:
    # 27 columns, 17 of them decimal) generated a method over 64 KB, which Spark compiles, throws away and
    # runs interpreted. bench/tpcds_apply.py, "A wide table's first pass" in bench/RESULTS.md.
    staged: dict[str, Column] = {}

    def staged_text(expression: Column) -> Column:
        name = f"{STAGED_PREFIX}{len(staged)}"
        staged[name] = expression
        return F.col(name)

    op = staged_text(F.upper(F.trim(text(op_name)))) if op_name else F.lit("I")  # IncludeOpForFullLoad=false
    seq_trimmed = F.trim(text(seq_name))
    seq_text = staged_text(seq_trimmed)
    # Parsed once, beside the texts: the sequence, its check and the rejected record's columns each read it,
    # and inlined in each (conditional branches Spark does not share) a 35-digit AR_H_CHANGE_SEQ went through
    # BigDecimal two to three times a record (bench/RESULTS.md, "The change sequence parsed once").
    written_seq = staged_text(F.when(seq_trimmed == "", None).otherwise(seq_trimmed).cast(SEQ_TYPE))
    record_seq = raw.sequence_base().cast(SEQ_TYPE) + F.col(POSITION).bitwiseAND(_RECORD_MASK).cast(SEQ_TYPE)
    is_delete = op == "D"

    reasons = [
        Problem(F.col(CORRUPT).isNotNull(), F.lit("malformed CSV record (field count differs from header)")),
        Problem(
            F.col(FILE_ORDER).isNull(),
            F.concat(
                F.lit("record not matched to a file of the batch: Spark read it from "), F.col(UNMATCHED)
            ),
        ),
        Problem(
            ~op.isin(*VALID_OPS) | op.isNull(), F.concat(F.lit("invalid Op "), F.coalesce(op, F.lit("null")))
        ),
        Problem(
            seq_text.isNotNull() & (seq_text != "") & written_seq.isNull(),
            F.concat(F.lit(f"{names.change_seq} is not a number: "), seq_text),
        ),
    ]
    mismatches: list[Problem] = []
    widenings: list[Problem] = []
    typed: dict[str, Column] = {}
    texts: dict[str, Column] = {}
    for column in layout.data_columns:
        texts[column] = staged_text(text(column))
        value = _typed(texts[column], types[column], column, sources.get(column, TEXT))
        typed[column] = value.value
        # A delete needs its key only: the rest of its before image may not fit the type, it goes nowhere.
        matters = None if column in keys else ~is_delete
        mismatches += [p.where(matters) for p in value.mismatch]
        widenings += [p.where(matters) for p in value.widen]
    for key in keys:
        if key not in typed:
            typed[key] = F.lit(None).cast(spec.spark_type_of(key) or T.StringType())
            texts[key] = F.lit(None).cast("string")
        # a key that is there but fits no type is a mismatch (above), not a missing key
        reasons.append(Problem(texts[key].isNull(), F.lit(f"primary key column {key} is null or missing")))
    before: dict[str, Column] = {}
    for key, column in layout.before_image.items():
        target = types.get(key) or spec.spark_type_of(key) or T.StringType()
        value = _typed(staged_text(text(column)), target, column, sources.get(column, TEXT))
        before[f"{BEFORE_IMAGE}{key}"] = value.value
        mismatches += value.mismatch
        widenings += value.widen

    reason = _joined(reasons)  # a cheap test of each record; the text only where there is a problem
    raw_record = F.coalesce(
        F.col(CORRUPT),
        F.to_json(F.struct(*[F.col(quote(c)) for c in rows.columns if not c.startswith(INTERNAL_PREFIX)])),
    )
    mismatch = _joined(mismatches)
    rejected = _any(reasons + mismatches)
    return rows.select("*", *[value.alias(name) for name, value in staged.items()]).select(
        *[value.alias(name) for name, value in typed.items()],
        *[value.alias(name) for name, value in before.items()],
        op.alias(OP),
        F.coalesce(written_seq, record_seq).alias(SEQ),
        F.expr(f"try_cast({quote(ts_name)} as timestamp)").alias(COMMIT_TS)
        if ts_name
        else F.lit(None).cast("timestamp").alias(COMMIT_TS),
        F.col(FILE_ORDER),
        F.col(POSITION),
        # the file's URI and the raw record are kept for rejected rows only (bench: -13% time)
        F.when(rejected, raw.file_uri()).alias(FILE_URI),
        F.when(rejected, raw_record).alias(RAW),
        reason.alias(REASON),
        mismatch.alias(MISMATCH),
        _joined(widenings, WIDEN_SEPARATOR).alias(WIDEN),
    )


@dataclass(frozen=True)
class Problem:
    """A problem a record may have: `found` tells (a boolean, cheap), `text` names it (built only where found)."""

    found: Column
    text: Column

    def where(self, condition: Column | None) -> Problem:
        """The problem, only where `condition` holds (None: always)."""
        return self if condition is None else Problem(condition & self.found, self.text)


def _any(problems: list[Problem]) -> Column:
    return reduce(lambda a, b: a | b, [p.found for p in problems]) if problems else F.lit(False)


def _joined(problems: list[Problem], separator: str = "; ") -> Column:
    """The texts of the problems found, joined, or null when there are none. The validity is the booleans
    alone: a filter of valid records (`reason IS NULL`, which Spark may push below the projection and
    evaluate there again) folds to them, and the texts are built for rejected records only."""
    if not problems:
        return F.lit(None).cast("string")
    return F.when(_any(problems), F.concat_ws(separator, *[F.when(p.found, p.text) for p in problems]))


@dataclass(frozen=True)
class TypedValue:
    value: Column  # the typed value (null when it does not fit)
    mismatch: tuple[Problem, ...] = ()  # why the value does not fit its type
    widen: tuple[Problem, ...] = ()  # `column<2>type` when a wider type of the same family holds it


_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_PLAIN_DECIMAL = r"^\s*[+-]?([0-9]*)(\.([0-9]*))?\s*$"
_ISO_DATE = r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}\s*$"
_MIDNIGHT = r"^\s*([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]00:00(:00(\.0*)?)?\s*$"
_NON_FINITE_TEXT = r"(?i)^\s*[+-]?(nan|inf|infinity)\s*$"
# MySQL's "zero" date, which no date type holds: null, as MySQL's own connectors read it.
_ZERO_DATE = r"^\s*0000-00-00([ T]00:00:00(\.0*)?)?\s*$"


TEXT = T.StringType()


def _typed(value: Column, data_type: T.DataType, column: str, source: T.DataType = TEXT) -> TypedValue:
    """The value in its column's type, exactly, or a named mismatch, or the wider type that holds it.
    A typed value (Parquet) whose type converts exactly is cast; any other goes through its text."""
    if not isinstance(source, T.StringType):
        if converts_exactly(source, data_type):
            return TypedValue(value.cast(data_type))
        value = F.hex(value) if isinstance(source, T.BinaryType) else value.cast("string")
    if isinstance(data_type, T.StringType):
        return TypedValue(value)
    if not isinstance(data_type, T.BinaryType):
        value = F.when(F.trim(value) != "", value)  # only text and bytes can be empty: else it is null
    if isinstance(data_type, T.IntegerType | T.LongType):
        return _integer(value, data_type, column)
    if isinstance(data_type, T.DecimalType):
        return _decimal(value, data_type, column)
    if isinstance(data_type, T.FloatType | T.DoubleType):
        cast = value.cast(data_type)
        overflow = cast.isNotNull() & ~F.isnan(cast) & (F.abs(cast) == float("inf"))
        overflow = overflow & ~value.rlike(_NON_FINITE_TEXT)
        if isinstance(data_type, T.FloatType):
            return TypedValue(
                F.when(~overflow, cast),
                _not_valid(value, cast.isNull(), column, data_type),
                (Problem(value.isNotNull() & overflow, F.lit(f"{column}{WIDEN_TYPE_SEPARATOR}double")),),
            )
        return TypedValue(
            F.when(~overflow, cast), _not_valid(value, cast.isNull() | overflow, column, data_type)
        )
    if isinstance(data_type, T.DateType | T.TimestampType | T.TimestampNTZType):
        value = F.when(~value.rlike(_ZERO_DATE), value)
    if isinstance(data_type, T.DateType):
        midnight = F.regexp_extract(value, _MIDNIGHT, 1)
        text = F.when(value.rlike(_ISO_DATE), F.trim(value)).when(midnight != "", midnight)
        cast = text.cast(data_type)
        return TypedValue(cast, _not_valid(value, cast.isNull(), column, data_type))
    if isinstance(data_type, T.BinaryType):
        cast = F.unhex(value)
    elif isinstance(data_type, T.BooleanType):
        lowered = F.lower(F.trim(value))
        cast = F.when(lowered.isin("1", "true", "t", "y", "yes"), True).when(
            lowered.isin("0", "false", "f", "n", "no"), False
        )
    else:
        cast = value.cast(data_type)
    return TypedValue(cast, _not_valid(value, cast.isNull(), column, data_type))


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_TIMESTAMPS = (T.TimestampType, T.TimestampNTZType)


def converts_exactly(source: T.DataType, target: T.DataType) -> bool:
    """Every value of `source` is a value of `target` (a cast loses nothing)."""
    if source == target:
        return True
    if isinstance(source, _INTEGRAL) and isinstance(target, _INTEGRAL):
        return _INTEGRAL.index(type(source)) <= _INTEGRAL.index(type(target))
    if isinstance(source, T.FloatType) and isinstance(target, T.DoubleType):
        return True
    if isinstance(source, T.DecimalType) and isinstance(target, T.DecimalType):
        return (
            target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    if isinstance(source, _INTEGRAL) and isinstance(target, T.DecimalType):
        digits = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}[type(source)]
        return target.precision - target.scale >= digits
    return isinstance(source, _TIMESTAMPS) and isinstance(target, _TIMESTAMPS)


def _not_valid(value: Column, failed: Column, column: str, data_type: T.DataType) -> tuple[Problem, ...]:
    return (Problem(value.isNotNull() & failed, _not_valid_text(value, column, data_type)),)


def _not_valid_text(value: Column, column: str, data_type: T.DataType) -> Column:
    return F.concat(
        F.lit(f"{column}: "), F.substring(value, 1, 80), F.lit(f" is not a valid {data_type.simpleString()}")
    )


def _integer(value: Column, data_type: T.DataType, column: str) -> TypedValue:
    """Whole numbers only (`1.5` is not an int, whatever Spark's cast says); an int column holding a
    value beyond int but within bigint is widened to bigint (Iceberg promotes int to long). The details
    are computed only for values that don't fit (a CASE branch Spark evaluates lazily)."""
    whole = value.rlike(_INTEGER)
    cast = F.when(whole, value.cast(data_type))
    fits = cast.isNotNull()
    if isinstance(data_type, T.IntegerType):
        wider = whole & value.cast(T.LongType()).isNotNull()
        return TypedValue(
            cast,
            (Problem(value.isNotNull() & ~fits & ~wider, _not_valid_text(value, column, data_type)),),
            (Problem(value.isNotNull() & ~fits & wider, F.lit(f"{column}{WIDEN_TYPE_SEPARATOR}bigint")),),
        )
    return TypedValue(cast, _not_valid(value, ~fits, column, data_type))


def _decimal(value: Column, data_type: T.DecimalType, column: str) -> TypedValue:
    """Plain decimal text only. More decimal places than the scale is a mismatch (Iceberg can't change
    a decimal's scale; Spark's cast would round); more integer digits than the precision allows widens
    the precision (Iceberg promotes decimal(P,S) to decimal(P',S)) up to 38. One regular expression
    decides whether a value fits; the details are computed only for values that don't."""
    scale, room = data_type.scale, data_type.precision - data_type.scale
    fits = value.rlike(rf"^\s*[+-]?(?=\.?[0-9])0*[0-9]{{0,{room}}}(\.[0-9]{{0,{scale}}}0*)?\s*$")
    plain = value.rlike(_PLAIN_DECIMAL) & value.rlike("[0-9]")
    integer_digits = F.length(F.regexp_replace(F.regexp_extract(value, _PLAIN_DECIMAL, 1), "^0+", ""))
    places = F.length(F.regexp_replace(F.regexp_extract(value, _PLAIN_DECIMAL, 3), "0+$", ""))
    needed = integer_digits + scale
    widen = plain & (places <= scale) & (needed <= MAX_DECIMAL_PRECISION)
    misfit = value.isNotNull() & ~fits
    return TypedValue(
        F.when(fits, value.cast(data_type)),
        (
            Problem(
                misfit & ~widen,
                F.concat(
                    _not_valid_text(value, column, data_type),
                    F.when(plain & (places > scale), F.lit(f" (more than {scale} decimal places)")).otherwise(
                        F.lit("")
                    ),
                ),
            ),
        ),
        (
            Problem(
                misfit & widen,
                F.concat(
                    F.lit(f"{column}{WIDEN_TYPE_SEPARATOR}decimal("),
                    needed.cast("string"),
                    F.lit(f",{scale})"),
                ),
            ),
        ),
    )


def expand_key_changes(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """A `U` whose before image names another key moved the row: delete the old key, then upsert
    the new one (both at the update's sequence, so later changes to either key still win)."""
    before = [f"{BEFORE_IMAGE}{k}" for k in key]
    images = [c for c in changes.columns if c.startswith(BEFORE_IMAGE)]
    if not key or not all(b in changes.columns for b in before):
        return changes.drop(*images)
    moved = (
        (F.col(OP) == "U")
        & reduce(lambda a, b: a | b, [F.col(b).isNotNull() for b in before])
        & ~reduce(
            lambda a, b: a & b, [F.col(b).eqNullSafe(F.col(k)) for b, k in zip(before, key, strict=True)]
        )
    )
    data_columns = [c for c in changes.columns if c not in images]
    old_key_deletes = changes.where(moved).select(
        *[
            F.col(f"{BEFORE_IMAGE}{c}").alias(c)
            if c in key
            else (
                F.lit("D").alias(OP)
                if c == OP
                else (
                    F.col(c)
                    if c.startswith(INTERNAL_PREFIX)
                    else F.lit(None).cast(changes.schema[c].dataType).alias(c)
                )
            )
            for c in data_columns
        ]
    )
    return changes.select(*data_columns).unionByName(old_key_deletes)


def last_change_per_key(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """One row per key: the last change by change sequence, then file order, then record order
    (the tie rule: for an equal sequence the later file wins, then the later record, then an upsert
    over a delete). The changes are shuffled by the key first, so both steps of the aggregate run after the
    shuffle over one sort: planned as Spark does, a partial aggregate sorted the whole batch and built a struct
    per record before the shuffle, and reduced it little (a batch's keys are mostly distinct; bench/RESULTS.md,
    "The last change per key sorted once")."""
    changes = changes.repartition(*[F.col(quote(k)) for k in key])
    ordering = [
        F.coalesce(F.col(SEQ), F.lit(0).cast(SEQ_TYPE)).alias("__seq"),
        F.col(FILE_ORDER).alias("__file"),
        F.col(POSITION).alias("__pos"),
        F.when(F.col(OP) == "D", 0).otherwise(1).alias("__op_rank"),
    ]
    payload = [c for c in changes.columns if c not in key]
    latest = changes.groupBy(*[F.col(quote(k)) for k in key]).agg(
        F.max(F.struct(*ordering, *[F.col(quote(c)) for c in payload])).alias("__last")
    )
    return latest.select(
        *[F.col(quote(k)) for k in key], *[F.col(f"__last.{quote(c)}").alias(c) for c in payload]
    )


def type_named(text: str) -> T.DataType:
    """The type a widening entry names: `bigint`, `double` or `decimal(P,S)`."""
    simple = {"bigint": T.LongType(), "double": T.DoubleType()}
    if text in simple:
        return simple[text]
    match = re.fullmatch(r"decimal\((\d+),(\d+)\)", text)
    if not match:
        raise ValueError(f"not a widening type: {text!r}")
    return T.DecimalType(int(match.group(1)), int(match.group(2)))


# Timestamps in a key at the full precision Spark holds (microseconds), in UTC whatever the session's zone.
# F.to_json's default (`yyyy-MM-dd'T'HH:mm:ss.SSSXXX`) cuts them to milliseconds: two keys a few
# microseconds apart would share one tombstone, and the delete of one would bury a late insert of the other.
KEY_JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "timeZone": "UTC",
}


def _key_struct(key: Sequence[str], columns: Mapping[str, Column] | None) -> Column:
    return F.struct(*[(columns[k] if columns is not None else F.col(quote(k))).alias(k) for k in key])


KEY_HASH = "_dms_key_hash"


def key_hash(key_text: Column) -> Column:
    """A key's text (`key_json`) hashed to a long, grouped, sorted and joined by together with the text. The
    texts of one table's keys share their first bytes (`{"order_id":`), the prefix Spark's sort compares first,
    so a sort by the text alone compared whole strings: a sixth of a CDC batch's first pass (bench/RESULTS.md,
    "The batch sorted by its keys' hash"). Equal texts have equal hashes: (hash, text) matches what the text does."""
    return F.xxhash64(key_text)


def key_json(key: Sequence[str], columns: Mapping[str, Column] | None = None) -> Column:
    """A key as canonical text (its columns, lower case, as JSON): how tombstones name a deleted key.
    Timestamps keep their microseconds; doubles print as the shortest text that reads back to the same
    value. Stays the same when a key column is widened (int → bigint keeps its digits). `columns` gives
    the key's values when they are not the columns of that name."""
    return F.to_json(_key_struct(key, columns), KEY_JSON_OPTIONS)


def legacy_key_json(
    key: Sequence[str], types: Mapping[str, T.DataType], columns: Mapping[str, Column] | None = None
) -> Column | None:
    """How tombstones written before key_json kept microseconds name the key (timestamps to the
    millisecond, in the session's zone, which the jobs pin to UTC), or None when that text is the same as
    key_json's (no timestamp in the key). Such a tombstone names every key of its millisecond: it buries
    them all, as it did when it was written, until maintenance expires it (tombstone retention)."""
    if not any(isinstance(types.get(k), (T.TimestampType, T.TimestampNTZType)) for k in key):
        return None
    return F.to_json(_key_struct(key, columns))
