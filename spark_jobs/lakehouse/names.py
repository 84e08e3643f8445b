"""Names that go into SQL: quoting, and the rules a source name must follow to become a clean-zone name.

Source table and column names come from the schema file and from the DMS files' headers; every one is
quoted where it reaches SQL (`quote`), and the schema file is checked when it is loaded, so a name the
lake can't hold is a clear error there, not a failed statement later.
"""

from __future__ import annotations

import re

# Columns the jobs add while processing a batch; no source column may start with it.
INTERNAL_PREFIX = "_dms_"
# Columns every clean-zone table carries besides the source's own.
COMMIT_TS_COLUMN = "dms_commit_ts"
CHANGE_SEQ_COLUMN = "dms_change_seq"
RESERVED_COLUMNS = (COMMIT_TS_COLUMN, CHANGE_SEQ_COLUMN)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_TABLE_NAME = re.compile(r"[^a-z0-9_]")


class InvalidNameError(ValueError):
    """A source name the lake can't hold as it is."""


def quote(name: str) -> str:
    """A Spark SQL identifier: backticks around it, backticks inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def table_name(source_schema: str, table: str) -> str:
    """The clean-zone table of `schema.table`: lower case, letters, digits and `_` only (what the Glue
    Data Catalog and Athena accept); any other character becomes `_`."""
    return _NOT_TABLE_NAME.sub("_", f"{source_schema}_{table}".lower())


def check_source_name(name: str, what: str) -> None:
    """A schema, table or column name as DMS writes it: not empty, no control characters, no `/`
    (it names an S3 folder), not one of the names the jobs use themselves."""
    if not name or not name.strip():
        raise InvalidNameError(f"{what}: the name is empty")
    if _CONTROL.search(name):
        raise InvalidNameError(f"{what} {name!r}: control characters are not allowed in names")
    if what.startswith(("schema", "table")) and "/" in name:
        raise InvalidNameError(f"{what} {name!r}: '/' can't be part of a DMS folder name")
    if name.lower().startswith(INTERNAL_PREFIX):
        raise InvalidNameError(f"{what} {name!r}: names starting with {INTERNAL_PREFIX!r} are the jobs' own")


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
