"""The naming rule: what a source name may be, and how it is written wherever it goes (docs/CONTRACTS.md,
"Names"). Every identifier, string literal, property, path and S3 key the jobs build from a name goes
through this module; nothing else builds SQL text from a name or a value.

- A Spark SQL identifier: `quote` (backticks, a backtick doubled).
- A Spark SQL string literal (a property key or value, a comment, a location, a procedure argument):
  `sql_string` (single quotes; `\\` and `'` escaped, so no escape sequence such as `\\u002F` is decoded).
- A table property set in SQL: `properties_sql`; without SQL (DataFrameWriterV2, the Iceberg API) a
  property is passed as it is.
- A folder of the raw zone (S3 prefix or local path): `table_folder` (`<raw>/<schema>/<table>/`, the
  trailing `/` so that `orders` never lists `orders2/`); an S3 URI is split without URL parsing
  (`s3_bucket_and_key`: `?`, `#` and `%` are part of a key).
- Files handed to Spark: `LITERAL_PATHS`, the reader option that makes Spark take each path literally
  (no glob: `*`, `?`, `[x]`, `{a,b}` and `\\` are a name's characters).
- A list of tables as a job argument (a reload request): `tables_argument` writes a JSON array,
  `parse_tables_argument` reads it (or the older comma list).

The clean-zone table of `schema.table` is `table_name` (lower case, [a-z0-9_]); the source's own name
travels unchanged in properties, comments, ledger, tombstone and quarantine rows and reports. Its row
history (lakehouse.apply.history) has the same name in its own namespace, `history_database`; the
pipeline's own records (ledger, tombstones, quarantine, freshness, consistent points, divergence) live in
theirs, `records_database`, where no source table's name can reach.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

# Columns the jobs add while processing a batch; no source column may start with it.
INTERNAL_PREFIX = "_dms_"
# Columns every clean-zone table carries besides the source's own.
COMMIT_TS_COLUMN = "dms_commit_ts"
CHANGE_SEQ_COLUMN = "dms_change_seq"
OP = "_dms_op"  # the column a typed change carries its DMS Op (I, U, D) in, up to the MERGE
RESERVED_COLUMNS = (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)
# The row histories' namespace is the clean one's name with this suffix (history_database).
HISTORY_DATABASE_SUFFIX = "_history"
# The pipeline's own records' namespace is the clean one's name with this suffix (records_database).
RECORDS_DATABASE_SUFFIX = "_records"
# Glue's longest table name, and the longest file name of a local disk (the Hadoop catalog's folders).
MAX_CLEAN_NAME = 255
# A schema or table name is one folder of an S3 key (at most 1024 bytes in all) and of a local path.
MAX_FOLDER_BYTES = 255
# Spark's reader option that turns path globbing off (DataSource.GLOB_PATHS_KEY, Spark 3.1+).
LITERAL_PATHS = {"__globPaths__": "false"}

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_TABLE_NAME = re.compile(r"[^a-z0-9_]")


class InvalidNameError(ValueError):
    """A source name the lake can't hold as it is."""


def quote(name: str) -> str:
    """A Spark SQL identifier: backticks around it, backticks inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal holding exactly `text`: `\\` and `'` escaped with `\\` (Spark decodes
    escape sequences in literals unless spark.sql.parser.escapedStringLiterals is set; the jobs never
    set it)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def properties_sql(properties: dict[str, str]) -> str:
    """`'key'='value', …` for TBLPROPERTIES / SET TBLPROPERTIES, every key and value a literal."""
    return ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in properties.items())


def qualified(source_schema: str, table: str) -> str:
    """`schema.table` as the schema file, reports, properties and state rows name a source table."""
    return f"{source_schema}.{table}"


def table_folder(raw_path: str, source_schema: str, table: str) -> str:
    """The folder DMS writes a table's files to: `<raw>/<schema>/<table>/` (S3 prefix or local path),
    names as they are (DMS does not escape them), ending in `/`."""
    return f"{raw_path.rstrip('/')}/{source_schema}/{table}/"


def s3_bucket_and_key(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` split as S3 reads it: everything after the bucket is the key (no URL parsing:
    `?`, `#`, `%` and spaces are a key's own characters)."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def table_name(source_schema: str, table: str) -> str:
    """The clean-zone table of `schema.table`: lower case, letters, digits and `_` only (what the Glue
    Data Catalog and Athena accept); any other character becomes `_`."""
    return _NOT_TABLE_NAME.sub("_", f"{source_schema}_{table}".lower())


def history_database(clean_database: str) -> str:
    """The namespace of the clean tables' row histories, `<clean database>_history`; the history of a clean
    table has the table's own name there. Not the clean namespace: every [a-z0-9_] name with a `_` inside
    is some source table's clean name (`table_name`), so a history named `<table>_history` (or any other
    affix) beside the clean tables would be another source table's clean table."""
    return f"{clean_database}{HISTORY_DATABASE_SUFFIX}"


def records_database(clean_database: str) -> str:
    """The namespace of the pipeline's own records (ledger, tombstones, quarantine, freshness, consistent
    points, divergence), `<clean database>_records`. Not the clean namespace, for the reason
    `history_database` gives: a source table `dms.applied_files` is the clean table `dms_applied_files`. A
    source table's rows only ever go to its clean name in the clean namespace, so none can reach a record."""
    return f"{clean_database}{RECORDS_DATABASE_SUFFIX}"


def lake_namespaces(clean_database: str, refined_database: str) -> dict[str, str]:
    """Every namespace the jobs write, by role (no two may be one: the job arguments refuse it)."""
    return {
        "clean": clean_database,
        "history": history_database(clean_database),
        "records": records_database(clean_database),
        "refined": refined_database,
    }


def tables_argument(tables: Sequence[str]) -> str:
    """The full-load job's `--tables` value for these `schema.table` names: a JSON array (a name may hold
    commas, quotes and spaces)."""
    return json.dumps(list(tables), ensure_ascii=False)


def parse_tables_argument(text: str) -> list[str]:
    """`--tables`: a JSON array of `schema.table` names (kept exactly, spaces included), or, when the value
    does not start with `[`, the older comma list (each item stripped; a name holding a comma or spaces at
    its ends needs the JSON form)."""
    if text.lstrip().startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--tables {text!r}: not a JSON array ({error})") from None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"--tables {text!r}: expected a JSON array of schema.table strings")
        return names
    return [t.strip() for t in text.split(",") if t.strip()]


def check_source_name(name: str, what: str, folder: bool | None = None) -> None:
    """A schema, table or column name as DMS writes it: not empty, no control characters, not one of the
    names the jobs use themselves; a schema or table name (`folder`; by default when `what` starts with
    "schema" or "table") is also a folder: no `/`, not `.` or `..`, at most 255 bytes."""
    if folder is None:
        folder = what.startswith(("schema", "table"))
    if not name or not name.strip():
        raise InvalidNameError(f"{what} {name!r}: the name is empty or blank")
    if _CONTROL.search(name):
        raise InvalidNameError(f"{what} {name!r}: control characters are not allowed in names")
    if folder:
        if "/" in name:
            raise InvalidNameError(f"{what} {name!r}: '/' can't be part of a DMS folder name")
        if name in (".", ".."):
            raise InvalidNameError(f"{what} {name!r}: '.' and '..' can't be folder names")
        if len(name.encode("utf-8")) > MAX_FOLDER_BYTES:
            raise InvalidNameError(
                f"{what} {name[:40]!r}…: longer than {MAX_FOLDER_BYTES} bytes (a folder of the raw zone)"
            )
    if name.lower().startswith(INTERNAL_PREFIX):
        raise InvalidNameError(f"{what} {name!r}: names starting with {INTERNAL_PREFIX!r} are the jobs' own")


def check_table_name(source_schema: str, table: str) -> None:
    """A source table's schema and table names, and the clean name they make."""
    named = repr(qualified(source_schema, table))
    check_source_name(source_schema, f"table {named}: schema", folder=True)
    check_source_name(table, f"table {named}: table", folder=True)
    clean = table_name(source_schema, table)
    if len(clean) > MAX_CLEAN_NAME:
        raise InvalidNameError(
            f"table {qualified(source_schema, table)[:60]!r}…: its clean name would be {len(clean)} characters "
            f"(at most {MAX_CLEAN_NAME}: Glue and the warehouse's folders); exclude or rename it in the DMS task"
        )


def check_column_names(table: str, columns: list[str]) -> None:
    """Columns of one table: valid names, none twice (names are case-insensitive in the lake), none
    equal to the metadata columns every clean table carries."""
    seen: dict[str, str] = {}
    for column in columns:
        check_source_name(column, f"column of {table}")
        lowered = column.lower()
        if lowered in RESERVED_COLUMNS:
            raise InvalidNameError(
                f"{table}.{column}: every clean table has its own {lowered} column; rename the source "
                "column with a DMS table-mapping rule (rule-action rename)"
            )
        if lowered in seen:
            raise InvalidNameError(
                f"{table}: columns {seen[lowered]!r} and {column!r} differ only in case; the lake's names are "
                "case-insensitive"
            )
        seen[lowered] = column
