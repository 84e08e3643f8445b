"""Pure DataFrame → DataFrame steps from raw DMS records to one change per key.

raw text  →  typed_changes (types, Op, sequence; every problem becomes a `_reason`)
          →  split by `_reason`: good rows go on, bad rows to quarantine
          →  above_watermark (exactly once: drop what a previous commit applied)
          →  expand_key_changes (a primary-key update becomes a delete of the old key + the new row)
          →  last_change_per_key (MERGE must never see two source rows for one key)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dms_files import CHANGE_SEQ_COLUMN, DEFAULT_TIMESTAMP_COLUMN, OP_COLUMN
from lakehouse.dms_reader import CORRUPT, FILE_ORDER, FILE_URI, POSITION
from lakehouse.schema import TableSpec

OP = "_op"
SEQ = "_seq"
COMMIT_TS = "_commit_ts"
REASON = "_reason"
RAW = "_raw"
SEQ_TYPE = T.DecimalType(38, 0)
VALID_OPS = ("I", "U", "D")


@dataclass(frozen=True)
class ChangeColumns:
    """Names of the columns DMS adds (S3 target settings and table-mapping rules)."""

    op: str = OP_COLUMN
    change_seq: str = CHANGE_SEQ_COLUMN
    timestamp: str = DEFAULT_TIMESTAMP_COLUMN
    before_image_prefix: str = "BI_"


@dataclass(frozen=True)
class Watermark:
    """The highest change applied to a table: its change sequence and its CDC file name."""

    change_seq: Decimal | None = None
    cdc_file: str | None = None

    def advanced_to(self, other: Watermark) -> Watermark:
        """Never backwards: each part is the larger of the two."""
        return Watermark(_larger(self.change_seq, other.change_seq), _larger(self.cdc_file, other.cdc_file))


def _larger(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


@dataclass(frozen=True)
class HeaderLayout:
    """How one header's columns map to the table: data columns and before-image columns."""

    data_columns: dict[str, str]  # target name (lower case) → header name
    before_image: dict[str, str]  # primary-key column (lower case) → header name of its before image


def header_layout(header: Sequence[str], spec: TableSpec, names: ChangeColumns) -> HeaderLayout:
    special = {names.op.lower(), names.change_seq.lower(), names.timestamp.lower()}
    keys = {k.lower() for k in spec.primary_key}
    prefix = names.before_image_prefix.lower()
    data: dict[str, str] = {}
    before: dict[str, str] = {}
    for column in header:
        lowered = column.lower()
        if lowered in special:
            continue
        if prefix and lowered.startswith(prefix) and lowered[len(prefix) :] in keys:
            before[lowered[len(prefix) :]] = column
            continue
        data[lowered] = column
    return HeaderLayout(data, before)


def union_layout(headers: Sequence[Sequence[str]], spec: TableSpec, names: ChangeColumns) -> HeaderLayout:
    data: dict[str, str] = {}
    before: dict[str, str] = {}
    for header in headers:
        layout = header_layout(header, spec, names)
        data.update(layout.data_columns)
        before.update(layout.before_image)
    return HeaderLayout(data, before)


def column_types(layout: HeaderLayout, spec: TableSpec) -> dict[str, T.DataType]:
    """Each data column's type from the schema file; a column the schema file doesn't know yet is text."""
    return {name: spec.spark_type_of(name) or T.StringType() for name in layout.data_columns}


def typed_changes(
    raw: DataFrame,
    spec: TableSpec,
    layout: HeaderLayout,
    types: dict[str, T.DataType],
    names: ChangeColumns = ChangeColumns(),
    null_marker: str | None = None,
) -> DataFrame:
    """Typed change rows. Columns: the data columns (lower case) and `bi_<key>` before images, `_op`,
    `_seq`, `_commit_ts`, `_file_uri`, `_file_order`, `_pos`, `_raw` and `_reason` (null when valid)."""
    present = set(raw.columns)
    reasons: list[Column] = []

    def text(name: str | None) -> Column:
        if not name or name not in present:
            return F.lit(None).cast("string")
        value = F.col(f"`{name}`")
        if null_marker is None:
            return value
        # CsvNullValue set: the marker is null, and any empty field is an empty string.
        return F.when(value == null_marker, F.lit(None)).otherwise(F.coalesce(value, F.lit("")))

    op_name = next((c for c in raw.columns if c.lower() == names.op.lower()), None)
    seq_name = next((c for c in raw.columns if c.lower() == names.change_seq.lower()), None)
    ts_name = next((c for c in raw.columns if c.lower() == names.timestamp.lower()), None)

    op = F.upper(F.trim(text(op_name))) if op_name else F.lit("I")  # IncludeOpForFullLoad=false
    seq_text = F.trim(text(seq_name))
    seq = F.when(seq_text == "", None).otherwise(seq_text).cast(SEQ_TYPE)

    reasons.append(
        F.when(F.col(CORRUPT).isNotNull(), F.lit("malformed CSV record (field count differs from header)"))
    )
    reasons.append(
        F.when(
            F.col(FILE_ORDER).isNull(),
            F.concat(
                F.lit("record not matched to a file of the batch: Spark read it from "), F.col(FILE_URI)
            ),
        )
    )
    reasons.append(
        F.when(
            ~op.isin(*VALID_OPS) | op.isNull(), F.concat(F.lit("invalid Op "), F.coalesce(op, F.lit("null")))
        )
    )
    reasons.append(
        F.when(
            seq_text.isNotNull() & (seq_text != "") & seq.isNull(),
            F.concat(F.lit(f"{names.change_seq} is not a number: "), seq_text),
        )
    )

    typed: dict[str, Column] = {}
    for target, source in layout.data_columns.items():
        value, problem = _typed(text(source), types[target], target)
        typed[target] = value
        reasons.append(problem)
    for key in (k.lower() for k in spec.primary_key):
        if key not in typed:
            typed[key] = F.lit(None).cast(spec.spark_type_of(key) or T.StringType())
        reasons.append(F.when(typed[key].isNull(), F.lit(f"primary key column {key} is null or missing")))
    before: dict[str, Column] = {}
    for key, source in layout.before_image.items():
        value, problem = _typed(
            text(source),
            types.get(key) or spec.spark_type_of(key) or T.StringType(),
            f"before image of {key}",
        )
        before[f"bi_{key}"] = value
        reasons.append(problem)

    reason = F.concat_ws("; ", *reasons)
    raw_record = F.coalesce(
        F.col(CORRUPT), F.to_json(F.struct(*[F.col(f"`{c}`") for c in raw.columns if not c.startswith("_")]))
    )
    return raw.select(
        *[value.alias(name) for name, value in typed.items()],
        *[value.alias(name) for name, value in before.items()],
        op.alias(OP),
        seq.alias(SEQ),
        F.expr(f"try_cast({_quoted(ts_name)} as timestamp)").alias(COMMIT_TS)
        if ts_name
        else F.lit(None).cast("timestamp").alias(COMMIT_TS),
        F.col(FILE_URI),
        F.col(FILE_ORDER),
        F.col(POSITION),
        F.when(reason != "", raw_record).alias(RAW),  # kept for rejected rows only (bench: -13% time)
        F.when(reason == "", None).otherwise(reason).alias(REASON),
    )


def _quoted(name: str | None) -> str:
    return f"`{name}`"


def _typed(value: Column, data_type: T.DataType, label: str) -> tuple[Column, Column]:
    """The value cast to its type, and a reason when a present value does not fit the type."""
    if isinstance(data_type, T.StringType):
        return value, F.lit(None)
    if isinstance(data_type, T.BinaryType):
        cast = F.unhex(value)
    elif isinstance(data_type, T.BooleanType):
        lowered = F.lower(F.trim(value))
        cast = F.when(lowered.isin("1", "true", "t", "y", "yes"), True).when(
            lowered.isin("0", "false", "f", "n", "no"), False
        )
    else:
        cast = value.cast(data_type)
    problem = F.when(
        value.isNotNull() & cast.isNull(),
        F.concat(
            F.lit(f"{label}: "),
            F.substring(value, 1, 80),
            F.lit(f" is not a valid {data_type.simpleString()}"),
        ),
    )
    return cast, problem


def file_name(column: str = FILE_URI) -> Column:
    return F.element_at(F.split(F.col(column), "/"), -1)


def is_above_watermark(watermark: Watermark) -> Column:
    """True for changes an earlier commit has not applied: above the change sequence, or, where DMS
    wrote no sequence, in files after the last applied CDC file."""
    by_seq = F.col(SEQ).isNotNull()
    if watermark.change_seq is not None:
        by_seq = by_seq & (F.col(SEQ) > F.lit(watermark.change_seq).cast(SEQ_TYPE))
    by_file = F.col(SEQ).isNull()
    if watermark.cdc_file is not None:
        by_file = by_file & (file_name() > F.lit(watermark.cdc_file))
    return by_seq | by_file


def above_watermark(changes: DataFrame, watermark: Watermark) -> DataFrame:
    """Drop what an earlier commit applied (exactly once)."""
    return changes.where(is_above_watermark(watermark))


def expand_key_changes(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """A `U` whose before image names another key moved the row: delete the old key, then upsert
    the new one (both at the update's sequence, so later changes to either key still win)."""
    before = [f"bi_{k}" for k in key]
    if not key or not all(b in changes.columns for b in before):
        return changes.drop(*[c for c in changes.columns if c.startswith("bi_")])
    moved = (
        (F.col(OP) == "U")
        & reduce(lambda a, b: a | b, [F.col(b).isNotNull() for b in before])
        & ~F.expr(" AND ".join(f"`{b}` <=> `{k}`" for b, k in zip(before, key, strict=True)))
    )
    data_columns = [c for c in changes.columns if not c.startswith("bi_")]
    old_key_deletes = changes.where(moved).select(
        *[
            F.col(f"bi_{c}").alias(c)
            if c in key
            else (
                F.lit("D").alias(OP)
                if c == OP
                else (
                    F.col(c) if c.startswith("_") else F.lit(None).cast(changes.schema[c].dataType).alias(c)
                )
            )
            for c in data_columns
        ]
    )
    return changes.select(*data_columns).unionByName(old_key_deletes)


def last_change_per_key(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """One row per key: the last change by change sequence, then file order, then record order
    (the tie rule: for an equal sequence the later file wins, then the later record)."""
    ordering = [
        F.coalesce(F.col(SEQ), F.lit(0).cast(SEQ_TYPE)).alias("__seq"),
        F.col(FILE_ORDER).alias("__file"),
        F.col(POSITION).alias("__pos"),
        F.when(F.col(OP) == "D", 0).otherwise(1).alias("__op_rank"),
    ]
    payload = [c for c in changes.columns if c not in key]
    latest = changes.groupBy(*key).agg(
        F.max(F.struct(*ordering, *[F.col(c) for c in payload])).alias("__last")
    )
    return latest.select(*key, *[F.col(f"__last.{c}").alias(c) for c in payload])
