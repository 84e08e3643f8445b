"""Source database types → Spark types (which Iceberg stores as its own: int, long, decimal, …).

The mapping follows what DMS writes to CSV for each source type. Types that Iceberg or Spark can't
hold natively (time of day, intervals, geometry) are kept as their text, never lost.
"""

from __future__ import annotations

import re

from pyspark.sql import types as T

DIALECTS = ("mysql", "mssql", "postgresql", "sqlite")

_NAME_AND_ARGS = re.compile(
    r"^\s*([a-z_][a-z0-9_ ]*?)\s*(?:\(([^)]*)\))?\s*(unsigned|signed|zerofill)?\s*(?:zerofill)?\s*"
    r"(with(?:out)? time zone)?\s*$"
)
# PostgreSQL's numeric without a precision holds any number; DMS maps it to NUMERIC(28,6) (rounding to six
# decimals), so six decimals with the widest precision hold every value DMS writes.
POSTGRES_UNCONSTRAINED_NUMERIC = T.DecimalType(38, 6)

_INTEGERS: dict[str, T.DataType] = {
    "tinyint": T.IntegerType(),
    "smallint": T.IntegerType(),
    "int2": T.IntegerType(),
    "smallserial": T.IntegerType(),
    "mediumint": T.IntegerType(),
    "int": T.IntegerType(),
    "integer": T.IntegerType(),
    "int4": T.IntegerType(),
    "serial": T.IntegerType(),
    "bigint": T.LongType(),
    "int8": T.LongType(),
    "bigserial": T.LongType(),
}
_FLOATS: dict[str, T.DataType] = {
    "real": T.FloatType(),
    "float4": T.FloatType(),
    "double": T.DoubleType(),
    "double precision": T.DoubleType(),
    "float8": T.DoubleType(),
    "smallmoney": T.DecimalType(10, 4),
    "money": T.DecimalType(19, 4),
}
_STRINGS = {
    "char",
    "varchar",
    "nchar",
    "nvarchar",
    "character",
    "character varying",
    "bpchar",
    "text",
    "tinytext",
    "mediumtext",
    "longtext",
    "ntext",
    "clob",
    "string",
    "enum",
    "set",
    "citext",
    "json",
    "jsonb",
    "xml",
    "uuid",
    "uniqueidentifier",
    "time",
    "time without time zone",
    "time with time zone",
    "timetz",
    "interval",
    "year",
    "inet",
    "cidr",
    "macaddr",
    "hierarchyid",
    "sql_variant",
    "geometry",
    "geography",
    "point",
    "line",
    "lseg",
    "box",
    "path",
    "polygon",
    "circle",
    "tsvector",
    "tsquery",
    "hstore",
    "ltree",
    "macaddr8",
    "bit varying",
    "varbit",
    "pg_lsn",
    "int4range",
    "int8range",
    "numrange",
    "tsrange",
    "tstzrange",
    "daterange",
}
_BINARIES = {
    "binary",
    "varbinary",
    "blob",
    "tinyblob",
    "mediumblob",
    "longblob",
    "bytea",
    "image",
    "rowversion",
    "timestamp_mssql",
}
_BOOLEANS = {"bit", "boolean", "bool"}
_DATES = {"date"}
_TIMESTAMPS_LOCAL = {"datetime", "datetime2", "smalldatetime", "timestamp", "timestamp without time zone"}
_TIMESTAMPS_UTC = {"timestamptz", "timestamp with time zone", "datetimeoffset"}

MAX_DECIMAL_PRECISION = 38


class UnsupportedTypeError(ValueError):
    """A source type this pipeline can't map: fix the schema file or extend the mapping."""


def spark_type(source_type: str, dialect: str = "mysql") -> T.DataType:
    """Map a source column type (as the source catalog spells it) to a Spark type."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")
    text = source_type.strip().lower()
    if text.endswith("[]"):
        return T.StringType()
    match = _NAME_AND_ARGS.match(text)
    if not match:
        raise UnsupportedTypeError(f"can't read source type {source_type!r}")
    name, args, sign = match.group(1).strip(), match.group(2), match.group(3)
    if match.group(4):  # PostgreSQL's `timestamp(3) with time zone`, `time(6) without time zone`
        name = f"{name} {match.group(4)}"
    params = [p.strip() for p in args.split(",")] if args else []

    if dialect == "mssql" and name == "timestamp":
        name = "timestamp_mssql"  # SQL Server's timestamp is a row version, not a time
    if dialect == "mysql" and name == "tinyint" and params == ["1"]:
        return T.BooleanType()
    if dialect == "sqlite" and (name in _INTEGERS or name in ("real", "double", "float")):
        return T.LongType() if name in _INTEGERS else T.DoubleType()  # SQLite stores 8-byte ints and reals
    if name in _INTEGERS:
        return _integer(name, unsigned=sign == "unsigned")
    if name in ("decimal", "numeric", "number", "dec"):
        if dialect == "postgresql" and not params:
            return POSTGRES_UNCONSTRAINED_NUMERIC
        return _decimal(params)
    if name == "float":
        return _float(params, dialect)
    if name in _FLOATS:
        return _FLOATS[name]
    if name in _BOOLEANS:
        if name == "bit" and dialect == "mysql" and params and params != ["1"]:
            return T.LongType()  # MySQL BIT(n>1) is a bit field, not a flag
        if name == "bit" and dialect == "postgresql" and params and params != ["1"]:
            return T.StringType()  # PostgreSQL bit(n>1) is a bit string: its text, '0101…', kept
        return T.BooleanType()
    if name in _DATES:
        return T.DateType()
    if name in _TIMESTAMPS_UTC:
        return T.TimestampType()
    if name in _TIMESTAMPS_LOCAL:
        if dialect == "mysql" and name == "timestamp":
            return T.TimestampType()  # MySQL TIMESTAMP is stored in UTC
        return T.TimestampNTZType()
    if name in _BINARIES:
        return T.BinaryType()
    if name in _STRINGS or name.startswith(("varchar", "char", "nvarchar", "nchar")):
        return T.StringType()
    if dialect == "sqlite":
        return _sqlite_affinity(name)
    raise UnsupportedTypeError(f"no mapping for {dialect} type {source_type!r}")


def _integer(name: str, unsigned: bool) -> T.DataType:
    base = _INTEGERS[name]
    if not unsigned:
        return base
    if name == "bigint":
        return T.DecimalType(20, 0)
    if name in ("int", "integer"):
        return T.LongType()
    return T.IntegerType()


def _decimal(params: list[str]) -> T.DataType:
    precision = int(params[0]) if params and params[0] not in ("", "*") else MAX_DECIMAL_PRECISION
    scale = int(params[1]) if len(params) > 1 else 0
    if precision > MAX_DECIMAL_PRECISION:
        return T.StringType()  # beyond Iceberg's decimal: keep the exact text
    return T.DecimalType(precision, scale)


def _float(params: list[str], dialect: str) -> T.DataType:
    if params and params[0]:
        bits = int(params[0])
        return T.FloatType() if bits <= 24 else T.DoubleType()
    return T.FloatType() if dialect == "mysql" else T.DoubleType()


def _sqlite_affinity(name: str) -> T.DataType:
    """SQLite's type affinity rules (section 3.1 of its datatype documentation)."""
    if "int" in name:
        return T.LongType()
    if any(token in name for token in ("char", "clob", "text")):
        return T.StringType()
    if "blob" in name or not name:
        return T.BinaryType()
    if any(token in name for token in ("real", "floa", "doub")):
        return T.DoubleType()
    return T.DecimalType(MAX_DECIMAL_PRECISION, 10)


def can_widen(current: T.DataType, wanted: T.DataType) -> bool:
    """Iceberg's allowed type promotions: int→long, float→double, decimal(P,S)→decimal(P',S), P'>P."""
    if current == wanted:
        return False
    if isinstance(current, T.IntegerType) and isinstance(wanted, T.LongType):
        return True
    if isinstance(current, T.FloatType) and isinstance(wanted, T.DoubleType):
        return True
    return (
        isinstance(current, T.DecimalType)
        and isinstance(wanted, T.DecimalType)
        and wanted.scale == current.scale
        and wanted.precision > current.precision
    )
