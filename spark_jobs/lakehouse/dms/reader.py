"""Read DMS files (CSV or Parquet) into one DataFrame, in file then record order.

CSV files are read by Spark's own CSV reader as text (quotes, commas and newlines inside values; one file
is never split, so records keep their order). Parquet files keep their types, and each record its row
index in its file. Files of one table may carry different columns (a column added or dropped on the
source mid-stream) or, in Parquet, different types (a column widened), so files are grouped by format,
columns and types, their columns named in lower case, and the groups unioned by name (Spark widens a
column's type across groups, or makes it text when one group is text). Each record keeps the id of its
group (`_dms_header`): a column its file lacks is absent for it (null), never an empty value.
"""

from __future__ import annotations

import csv
import json
import logging
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import reduce

from lake_contracts.dms_files import DmsFile
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.base.names import LITERAL_PATHS, quote
from lakehouse.io.storage import (
    StorageError,
    is_missing,
    is_storage_failure,
    read_first_line,
    read_parquet_schema,
)

log = logging.getLogger(__name__)

FILE_URI = "_dms_file_uri"  # a typed change's file (lakehouse.dms.changes): rejected records only
FILE_ORDER = "_dms_file_order"
UNMATCHED = "_dms_unmatched_path"  # Spark's path of a record matched to no file of the batch (else null)
HEADER = "_dms_header"
RECORD = "_dms_record"
POSITION = "_dms_pos"
NEVER_NULL = "\u0000never-null\u0000"
CORRUPT = "_dms_corrupt_record"
SPARK_PATH = "_dms_spark_path"
MISSING = "the object does not exist"
# The files named, exactly: never a glob (`[x]`, `*`, `{a,b}`, `\\` in a table name), never a partition
# column read from a folder's name (`k=v` in a table name); `_each_file_once` does the rest.
EXACT_FILES = LITERAL_PATHS | {"recursiveFileLookup": "true"}


@dataclass(frozen=True)
class ReaderOptions:
    """How DMS was told to write (S3 target settings), so we read it back faithfully."""

    csv_null_value: str | None = None
    delimiter: str = ","


@dataclass(frozen=True)
class FileRejection:
    """A whole file that could not be read (quarantined with its reason), or that does not exist."""

    file: DmsFile
    reason: str
    missing: bool = False


@dataclass(frozen=True)
class FileHeader:
    """A file's columns as written, and, for Parquet, their types (a group's files share both)."""

    names: tuple[str, ...]
    parquet_types: tuple[str, ...] | None = None  # None: a CSV file

    @property
    def is_parquet(self) -> bool:
        return self.parquet_types is not None


@dataclass
class RawRead:
    rows: DataFrame | None
    rejected: list[FileRejection]
    headers: dict[str, list[str]]  # file URI → its columns, as written
    groups: list[tuple[str, ...]] = field(default_factory=list)  # `_dms_header` id → its columns, lower case
    csv_groups: list[int] = field(default_factory=list)  # the groups read from CSV (text, CsvNullValue)
    files: tuple[DmsFile, ...] = ()  # the batch's files: a record's `_dms_file_order` is its file's index

    def file_uri(self) -> Column:
        """Each record's file URI, from its file's index (Spark's own path for a record matched to no file).
        Records carry the index only: the URI is looked up where it is needed (quarantine, messages)."""
        uris = _constant_array([file.uri for file in self.files], "string")
        return F.coalesce(F.try_element_at(uris, F.col(FILE_ORDER) + 1), F.col(UNMATCHED))

    def sequence_base(self) -> Column:
        """Each record's file's synthesized change sequence (DmsFile.sequence_base; null for LOAD files)."""
        bases = [file.sequence_base for file in self.files]
        if all(base is None for base in bases):
            return F.lit(None).cast(SEQUENCE_BASE_TYPE)
        return F.try_element_at(_constant_array(bases, SEQUENCE_BASE_TYPE), F.col(FILE_ORDER) + 1)

    def found_rows(self) -> DataFrame:
        """`rows`, of a read that found some: a read of none is handled before its rows are used."""
        assert self.rows is not None, "a read of no rows is handled before its rows are used"
        return self.rows

    def groups_with(self, column: str) -> list[int] | None:
        """The header groups whose files have `column` (lower case); None when every file has it."""
        having = [i for i, header in enumerate(self.groups) if column in header]
        return None if len(having) == len(self.groups) else having


def parse_header(line: str, delimiter: str = ",") -> list[str]:
    return next(csv.reader([line], delimiter=delimiter)) if line else []


def _normalise(path: str) -> str:
    """A path as given to Spark (never escaped), without its `file:` scheme."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _spellings(path: str) -> set[str]:
    """How Spark may spell a plain path in `_metadata.file_path` (local files gain `file:`). None for
    a path holding '%': Spark's spelling of another path (escaped) could equal it."""
    if "%" in path:
        return set()
    if path.startswith("file:"):  # `file:///x` is `file:/x` to Spark: a miss decoded every record again
        return {path, f"file:{_normalise(path)}"}
    if "://" in path:
        return {path}
    return {path, f"file:{path}", f"file://{path}"}


def read_headers(
    files: Sequence[DmsFile],
    spark_paths: dict[str, str],
    options: ReaderOptions,
    required_columns: Sequence[str] = (),
) -> tuple[dict[str, FileHeader], list[FileRejection]]:
    """The columns of each file, read in parallel: a CSV file's header row (AddColumnName=true), a
    Parquet file's schema (its footer). Unreadable files are rejected with the reason."""

    wanted = {c.lower() for c in required_columns}

    def probe(file: DmsFile) -> tuple[DmsFile, FileHeader | None, str | None]:
        if file.uri not in spark_paths:
            return file, None, MISSING
        try:
            if file.is_parquet:
                schema = read_parquet_schema(spark_paths[file.uri])
                header = FileHeader(tuple(schema.names), tuple(str(t) for t in schema.types))
                line = None
            else:
                line = read_first_line(spark_paths[file.uri])
                header = FileHeader(tuple(parse_header(line, options.delimiter)))
        except Exception as error:  # what the file holds can't be read: this file only
            if is_missing(error):
                return file, None, MISSING
            if is_storage_failure(error):  # not the file's fault: the table waits, the batch stays pending
                raise StorageError(
                    f"{file.uri} could not be read ({type(error).__name__}: {error}); the batch stays "
                    "pending and is retried (check the job role's access to the raw bucket and its key)"
                ) from error
            return file, None, f"unreadable file: {type(error).__name__}: {error}"
        names = header.names
        if not names or any(not name.strip() for name in names):
            return file, None, "missing or blank header row (DMS AddColumnName=true is required)"
        if line is not None and (line.count('"') % 2 or any(ord(ch) < 32 and ch != "\t" for ch in line)):
            return file, None, f"malformed header row: {line[:200]!r}"
        if len({name.lower() for name in names}) != len(names):
            return file, None, f"duplicate column names in header: {list(names)}"
        missing = sorted(wanted - {name.lower() for name in names})
        if missing:
            return file, None, f"header lacks the primary key column(s) {missing}: {list(names[:20])}"
        return file, header, None

    headers: dict[str, FileHeader] = {}
    rejected: list[FileRejection] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        for file, header, problem in pool.map(probe, files):
            if header is None:
                rejected.append(FileRejection(file, problem or "unreadable", missing=problem == MISSING))
            else:
                headers[file.uri] = header
    return headers, rejected


def read_dms_files(
    spark: SparkSession,
    files: Sequence[DmsFile],
    spark_paths: dict[str, str],
    options: ReaderOptions = ReaderOptions(),
    required_columns: Sequence[str] = (),
) -> RawRead:
    """All records of `files` as text (columns in lower case), plus `_file_order` (the position of the
    record's file in `files`: `RawRead.file_uri` and `RawRead.sequence_base` look up its facts),
    `_unmatched_path`, `_header` (the record's header group) and `_pos` (rises with the record's
    position in its file; see `with_record_numbers`)."""
    headers, rejected = read_headers(files, spark_paths, options, required_columns)
    groups: dict[FileHeader, list[DmsFile]] = defaultdict(list)
    for file in files:
        if file.uri in headers:
            groups[headers[file.uri]].append(file)
    as_written = {uri: list(header.names) for uri, header in headers.items()}
    if not groups:
        return RawRead(None, rejected, as_written)

    frames = []
    for number, (header, group) in enumerate(groups.items()):
        paths = [spark_paths[f.uri] for f in group]
        read = _read_parquet_group if header.is_parquet else _read_group
        frames.append(read(spark, list(header.names), paths, options).withColumn(HEADER, F.lit(number)))
    raw = _union(frames)
    names = [tuple(name.lower() for name in header.names) for header in groups]
    csv_groups = [number for number, header in enumerate(groups) if not header.is_parquet]
    rows = _with_file_order(raw, files, spark_paths)
    return RawRead(rows, rejected, as_written, names, csv_groups, tuple(files))


def _with_file_order(raw: DataFrame, files: Sequence[DmsFile], spark_paths: dict[str, str]) -> DataFrame:
    """Each record's file position in `files`, from the path Spark read it from: a small integer, the only
    fact of its file a record carries through the first pass (its URI and sequence base are looked up from
    it where needed: a full load's first pass kept the URI's text in every cached row, bench/RESULTS.md,
    "Each record carries its file's position"). First by Spark's exact path string (decoding it on every
    record cost ~1 s per million records); a path Spark spells otherwise (escaped characters) is decoded
    and matched again; a record matched by neither keeps Spark's path (`_dms_unmatched_path`) and no
    position, and typed_changes rejects it: nothing is dropped. The lookups are constant maps in the plan, not joins: a join of the
    batch's file names was a broadcast, two Spark jobs more for every table of every run (bench/RESULTS.md,
    "The fixed cost of a small apply"); the plan goes once to each executor."""
    readable = [(position, file) for position, file in enumerate(files) if file.uri in spark_paths]
    exact = {
        spelling: position for position, file in readable for spelling in _spellings(spark_paths[file.uri])
    }
    decoded = {_normalise(spark_paths[file.uri]): position for position, file in readable}
    path = F.col(SPARK_PATH)
    # `coalesce` evaluates its second lookup, and the decoding, only for a path the first did not find
    found = F.coalesce(_position_of(exact, path), _position_of(decoded, _normalise_column(path)))
    return (
        raw.withColumn(FILE_ORDER, found)
        .withColumn(UNMATCHED, F.when(F.col(FILE_ORDER).isNull(), path))
        .drop(SPARK_PATH)
    )


SEQUENCE_BASE_TYPE = "decimal(38,0)"


def _constant_array(values: Sequence[object], element_type: str) -> Column:
    """`values` as one constant of the plan: a JSON literal the optimizer folds (a literal per value would
    cost a py4j call each)."""
    return F.from_json(F.lit(json.dumps(list(values))), f"array<{element_type}>")


def _position_of(positions: dict[str, int], path: Column) -> Column:
    """The position of the file read from `path` (None: not in `positions`), from constants in the plan, at
    a cost per record that does not grow with the batch's files. Spark searches a map key by key, and the
    paths share their prefix: one map of a 200-file batch's 600 spellings cost 2-3 CPU-s per million records
    (bench/RESULTS.md, "The CDC apply got slower"). So the paths are spread over as many small maps as there
    are paths, by their CRC-32 (Spark's crc32 of the path's UTF-8 bytes is zlib's), and a record looks in one."""
    buckets = max(1, len(positions))
    spread: list[dict[str, int]] = [{} for _ in range(buckets)]
    for spelling, position in positions.items():
        spread[zlib.crc32(spelling.encode("utf-8")) % buckets][spelling] = position
    maps = _constant_array(spread, "map<string,int>")
    bucket_of_path = (F.pmod(F.crc32(path.cast("binary")), F.lit(buckets)) + 1).cast("int")
    return F.try_element_at(F.element_at(maps, bucket_of_path), path)


def _read_group(
    spark: SparkSession, header: list[str], paths: list[str], options: ReaderOptions
) -> DataFrame:
    schema = T.StructType(
        [T.StructField(name, T.StringType()) for name in header] + [T.StructField(CORRUPT, T.StringType())]
    )
    # With a CsvNullValue marker, Spark must not turn empty fields into nulls: they are empty strings
    # (see changes.typed_changes). Spark can't tell an unquoted empty field from null, so we read
    # with a value that never occurs and map the marker ourselves.
    null_value = NEVER_NULL if options.csv_null_value is not None else ""
    reader = (
        spark.read.format("csv")
        .schema(schema)
        .options(
            header="true",
            multiLine="true",
            escape='"',
            quote='"',
            sep=options.delimiter,
            nullValue=null_value,
            emptyValue="",
            mode="PERMISSIVE",
            columnNameOfCorruptRecord=CORRUPT,
            enforceSchema="true",
            ignoreLeadingWhiteSpace="false",
            ignoreTrailingWhiteSpace="false",
            encoding="UTF-8",
            **EXACT_FILES,
        )
    )

    def load(some: list[str]) -> DataFrame:
        return reader.load(some).select(
            *[F.col(quote(name)).alias(name.lower()) for name in header],
            F.col(CORRUPT),
            F.expr("_metadata.file_path").alias(SPARK_PATH),
        )

    # A file is never split and its records are read in order: ids rise within a file.
    return _each_file_once(paths, load).withColumn(POSITION, F.monotonically_increasing_id())


def _looks_like_glob(path: str) -> bool:
    """Whether Spark takes `path` for a glob pattern (SparkHadoopUtil.isGlobPath), globbing off or not."""
    return any(character in _GLOB_CHARACTERS for character in path)


_GLOB_CHARACTERS = frozenset("{}[]*?\\")


def _each_file_once(paths: list[str], load: Callable[[list[str]], DataFrame]) -> DataFrame:
    """`load` of every path, each file read once. With globbing off, Spark 3.5 still expands every path
    that looks like a glob (`*?[]{}` or `\\` in a table's name) into ALL the paths of the read: k such
    files were read k times each. Those are read one a load (Spark then has only that path to give back)
    and the loads unioned; the other paths share one load."""
    literal = [path for path in paths if not _looks_like_glob(path)]
    frames = [load(literal)] if literal else []
    frames += [load([path]) for path in paths if _looks_like_glob(path)]
    return reduce(DataFrame.unionByName, frames)


def _union(frames: list[DataFrame]) -> DataFrame:
    """The groups' records in one frame. A column whose type differs between groups (CSV text and a
    Parquet type, or two Parquet types) becomes text in all of them: typing it is the next step's job."""
    kinds: dict[str, set[T.DataType]] = defaultdict(set)
    for frame in frames:
        for column in frame.schema.fields:
            kinds[column.name].add(column.dataType)
    mixed = {name for name, types in kinds.items() if len(types) > 1}

    def as_text(frame: DataFrame) -> DataFrame:
        return frame.select(
            *[
                (
                    F.hex(F.col(quote(f.name)))
                    if isinstance(f.dataType, T.BinaryType)
                    else F.col(quote(f.name))
                )
                .cast("string")
                .alias(f.name)
                if f.name in mixed
                else F.col(quote(f.name))
                for f in frame.schema.fields
            ]
        )

    united = as_text(frames[0])
    for frame in frames[1:]:
        united = united.unionByName(as_text(frame), allowMissingColumns=True)
    return united


def _read_parquet_group(
    spark: SparkSession, header: list[str], paths: list[str], options: ReaderOptions
) -> DataFrame:
    """Parquet files of one schema, their types kept; a record's position is its row index in its file."""

    def load(some: list[str]) -> DataFrame:
        return (
            spark.read.options(**EXACT_FILES)
            .parquet(*some)
            .select(
                *[F.col(quote(name)).alias(name.lower()) for name in header],
                F.lit(None).cast("string").alias(CORRUPT),
                F.col("_metadata.row_index").alias(POSITION),
                F.col("_metadata.file_path").alias(SPARK_PATH),
            )
        )

    return _each_file_once(paths, load)


def _normalise_column(path: Column) -> Column:
    """`_normalise` of Spark's spelling of a path: a URI, escaped where needed ('+' is literal)."""
    decoded = F.call_function("url_decode", F.replace(path, F.lit("+"), F.lit("%2B")))
    return F.regexp_replace(F.when(path.contains("%"), decoded).otherwise(path), r"^file:(//)?", "")


def with_record_numbers(rows: DataFrame, read: RawRead) -> DataFrame:
    """Add `_record` (1-based record number in its file, header excluded), `_file_records` (how many
    records its file has) and `_file_uri` to `rows`, typed changes of `read`'s records. It costs one more
    pass over the files, so it is done only for quarantined rows. A read narrowed by `only_records` keeps
    its files' own figures."""
    everything = read.found_rows()
    if FIRST_POSITION in everything.columns:
        facts = everything.groupBy(*_FILE).agg(
            F.min(FIRST_POSITION).alias(_FIRST), F.min(FILE_RECORDS).alias(_COUNT)
        )
    else:
        facts = everything.groupBy(*_FILE).agg(F.min(POSITION).alias(_FIRST), F.count("*").alias(_COUNT))
    # a typed change names the path of a record matched to no file in its `_file_uri` (lakehouse.dms.changes)
    own = rows.withColumn(UNMATCHED, F.when(F.col(FILE_ORDER).isNull(), F.col(FILE_URI)))
    return (
        _with_file_figures(own, facts)
        .withColumn(RECORD, (F.col(POSITION) - F.col(_FIRST) + 1).cast("long"))
        .withColumn(FILE_RECORDS, F.col(_COUNT).cast("long"))
        .withColumn(FILE_URI, read.file_uri())
        .drop(_FIRST, _COUNT, UNMATCHED)
    )


FILE_RECORDS = "_dms_file_records"
FIRST_POSITION = "_dms_first_position"
_FIRST, _COUNT = "_dms_first", "_dms_count"
_FILE = (
    FILE_ORDER,
    UNMATCHED,
)  # a record's file: its position in the batch, or Spark's path when matched to none
_THEIR_ORDER, _THEIR_PATH = "_dms_their_order", "_dms_their_path"


def _with_file_figures(rows: DataFrame, facts: DataFrame) -> DataFrame:
    """`rows` with the figures `facts` holds of their file (one row per file, keyed by `_FILE`)."""
    theirs = facts.withColumnRenamed(FILE_ORDER, _THEIR_ORDER).withColumnRenamed(UNMATCHED, _THEIR_PATH)
    same_file = F.col(FILE_ORDER).eqNullSafe(F.col(_THEIR_ORDER)) & F.col(UNMATCHED).eqNullSafe(
        F.col(_THEIR_PATH)
    )
    return rows.join(F.broadcast(theirs), same_file).drop(_THEIR_ORDER, _THEIR_PATH)


def only_records(read: RawRead, wanted: Mapping[str, frozenset[int]]) -> RawRead:
    """`read` with only the records `wanted` (file URI → record numbers, as `with_record_numbers` counts
    them) of the files it names; the other files' records all stay. Each record keeps its file's first
    position and record count, so what is quarantined of it is numbered as in the whole file."""
    if read.rows is None or not wanted:
        return read
    numbered = _with_file_figures(
        read.rows,
        read.rows.groupBy(*_FILE).agg(
            F.min(POSITION).alias(FIRST_POSITION), F.count("*").alias(FILE_RECORDS)
        ),
    )
    record = F.col(POSITION) - F.col(FIRST_POSITION) + 1
    positions = {uri: [n for n, file in enumerate(read.files) if file.uri == uri] for uri in sorted(wanted)}
    named = [n for found in positions.values() for n in found]
    keep = F.col(FILE_ORDER).isNull() | ~F.col(FILE_ORDER).isin(named)
    for uri, found in positions.items():
        keep = keep | (F.col(FILE_ORDER).isin(found) & record.isin(sorted(wanted[uri])))
    return replace(read, rows=numbered.where(keep))
