"""The reconcile's MySQL/MariaDB source side: Spark's JDBC source (MariaDB's driver), with the canonical text,
row hashes and segment sums computed in the database, byte for byte what the lake side computes
(`reconcile_plan.lake_text`, `lake_row_hash`) and what the PostgreSQL side computes in its SQL.

MySQL spells a few things its own way, each mapped to the lake's canonical text: BIT and TINYINT(1) as their
integer (`c + 0`), DATE as days and DATETIME/TIMESTAMP as microseconds since 1970-01-01 (the session in UTC, so a
TIMESTAMP is its instant), zero dates NULL (as the lake holds them), BINARY/BLOB as lower-case hex, anything the
lake keeps as text (ENUM, SET, JSON, TIME, YEAR, DECIMAL beyond 38 digits) as `CAST(… AS CHAR)` (a CHAR(n) without
its trailing spaces, as MySQL returns it and DMS writes it), FLOAT/DOUBLE as Java's `doubleToLongBits` of the
value as a double, built from its sign, exponent and fraction with exact double arithmetic (`my_double_bits`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lakehouse.reconcile.plan import (
    HASH_BITS,
    INTEGER_TYPES,
    NULL_TEXT,
    SourceStatistics,
    TablePlan,
    aligned_segments,
)
from lakehouse.reconcile.sources import JdbcSqlSource

# The JDBC drivers that read MySQL, the first one the JVM has: MariaDB's (Debian's libmariadb-java, `make mariadb`:
# local runs and tests) or MySQL Connector/J (AWS Glue 5.x has 8.0.33 on its classpath). Both take a
# `jdbc:mysql:` URL; every value the reconcile reads is computed in the server's SQL.
DRIVERS = ("org.mariadb.jdbc.Driver", "com.mysql.cj.jdbc.Driver")
UTC_SESSION = "SET time_zone = '+00:00'"
SEP = "CHAR(31 USING utf8mb4)"


def my_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


SIGN_BIT = "(-9223372036854775807 - 1)"  # -2^63 as a BIGINT (the literal 9223372036854775808 is a DECIMAL)
FRACTION_UNIT = 4503599627370496  # 2^52
SMALLEST_NORMAL = "2.2250738585072014e-308"  # 2^-1022, a DOUBLE literal


def my_double_bits(value: str) -> str:
    """MySQL SQL: Java's `Double.doubleToLongBits` of a DOUBLE (or FLOAT, widened exactly) expression, as a
    signed BIGINT; NULL stays NULL. MySQL has no bit cast, so the bits are built from the value: the exponent
    e = FLOOR(LOG2(|v|)), corrected by one either way where LOG2 rounds (LOG2 of the largest double is 1024.0),
    the fraction (|v| / 2^e - 1) * 2^52 (a division by a power of two and a subtraction from a number in
    [1, 2): exact), a subnormal's fraction |v| / 2^-1074; the sign bit from `v < 0`, and for a zero from
    ATAN2(v, -1) < 0 (-0.0, which MySQL 8 may store; MariaDB stores +0). MySQL holds no NaN or infinity."""
    a = f"ABS({value})"
    e0 = f"LEAST(FLOOR(LOG2({a})), 1023)"
    e = f"({e0} - (POW(2, {e0}) > {a}) + ({e0} < 1023 AND POW(2, LEAST({e0} + 1, 1023)) <= {a}))"
    normal = (
        f"CAST({e} + 1023 AS SIGNED) * {FRACTION_UNIT}"
        f" + CAST(({a} / POW(2, {e}) - 1) * {FRACTION_UNIT} AS SIGNED)"
    )
    magnitude = f"IF({a} < {SMALLEST_NORMAL}, CAST({a} / POW(2, -1074) AS SIGNED), {normal})"
    return (
        f"CASE WHEN {value} IS NULL THEN NULL"
        f" WHEN {value} = 0 THEN IF(ATAN2({value}, -1) < 0, {SIGN_BIT}, 0)"
        f" WHEN {value} < 0 THEN {magnitude} + {SIGN_BIT}"
        f" ELSE {magnitude} END"
    )


def my_text(column: str, data_type: T.DataType, source_type: str) -> str:
    """MySQL SQL: the column as canonical text (NULL stays NULL), byte for byte `lake_text`'s."""
    c = my_ident(column)
    source = source_type.strip().lower()
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return f"CAST({my_double_bits(c)} AS CHAR)"
    if isinstance(data_type, T.BooleanType) or (
        isinstance(data_type, INTEGER_TYPES) and source.startswith("bit")
    ):
        return f"CAST({c} + 0 AS CHAR)"
    if isinstance(data_type, INTEGER_TYPES):
        return f"CAST({c} AS CHAR)"
    if isinstance(data_type, T.DecimalType):
        return f"CAST(CAST({c} AS DECIMAL({data_type.precision},{data_type.scale})) AS CHAR)"
    if isinstance(data_type, T.DateType):
        return f"CAST(DATEDIFF({c}, DATE '1970-01-01') AS CHAR)"
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return f"CAST(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP '1970-01-01 00:00:00', {c}) AS CHAR)"
    if isinstance(data_type, T.BinaryType):
        return f"LOWER(HEX({c}))"
    return f"CAST({c} AS CHAR)"


def my_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def my_field(text_sql: str, nullable: bool = True) -> str:
    return f"COALESCE(CONCAT('=', {text_sql}), '{NULL_TEXT}')" if nullable else f"CONCAT('=', {text_sql})"


def my_row_hash(fields: Sequence[str]) -> str:
    """MySQL: the row hash (signed 64 bits of the row text's MD5) of canonical fields."""
    text = f"CONCAT_WS({SEP}, " + ", ".join(fields) + ")"
    return f"CAST(CONV(SUBSTR(MD5({text}), 1, 16), 16, -10) AS SIGNED)"


def pick_driver(loadable: Callable[[str], bool]) -> str:
    """The first of DRIVERS the JVM can load; none: an error saying how to add one."""
    for driver in DRIVERS:
        if loadable(driver):
            return driver
    raise RuntimeError(
        f"no MySQL JDBC driver on the Spark classpath (tried {', '.join(DRIVERS)}): add MariaDB's or MySQL"
        " Connector/J's jar (Glue: --extra-jars; EMR Serverless and spark-submit: --jars)"
    )


def jvm_has_class(spark: SparkSession, name: str) -> bool:
    """Can Spark's class loader (the one its JDBC source uses, jars added with --jars included) load `name`?"""
    try:
        spark.sparkContext._jvm.org.apache.spark.util.Utils.classForName(name, False, False)  # type: ignore[union-attr]
    except Exception:  # py4j's Py4JJavaError: ClassNotFoundException
        return False
    return True


class MysqlJdbcSource(JdbcSqlSource):
    """A MySQL or MariaDB source through Spark's JDBC data source (see the module docstring); key ranges go to
    `parallelism` concurrent queries."""

    def __init__(
        self, spark: SparkSession, url: str, properties: dict[str, str], parallelism: int = 4
    ) -> None:
        super().__init__(spark, parallelism)
        # Spark picks its MySQL dialect (backtick-quoted column names) by a `jdbc:mysql:` URL; under any other
        # prefix it quotes them with `"`, which MySQL reads as strings. MariaDB's driver (2.x) takes both.
        self.url = (
            "jdbc:mysql:" + url.removeprefix("jdbc:mariadb:") if url.startswith("jdbc:mariadb:") else url
        )
        driver = properties.get("driver") or pick_driver(lambda name: jvm_has_class(spark, name))
        self.properties = {"sessionInitStatement": UTC_SESSION, **properties, "driver": driver}

    def _table(self, plan: TablePlan) -> str:
        return f"{my_ident(plan.spec.source_schema)}.{my_ident(plan.spec.name)}"

    def _key_texts(self, plan: TablePlan) -> list[str]:
        return [my_text(k.name, k.data_type, k.source_type) for k in plan.keys]

    def _x(self, plan: TablePlan, lo: int) -> str:
        if plan.integer_key:
            return f"(CAST({my_ident(plan.keys[0].name)} AS SIGNED) - ({lo}))"
        text = f"CONCAT_WS({SEP}, " + ", ".join(self._key_texts(plan)) + ")"
        return f"CAST(CONV(SUBSTR(MD5({text}), 1, {HASH_BITS // 4}), 16, 10) AS SIGNED)"

    def _row_hash(self, plan: TablePlan) -> str:
        fields = [
            my_field(my_text(c.name, c.data_type, c.source_type), c not in plan.keys) for c in plan.columns
        ]
        return my_row_hash(fields)

    def _from_where(self, plan: TablePlan, lo: int, ranges: Sequence[tuple[int, int]] | None) -> str:
        """FROM … WHERE x in the ranges: an integer key's ranges as BETWEENs on the key (MySQL's range
        optimizer reads each by the primary key); a hash key's segments looked up per row (one scan)."""
        table = self._table(plan)
        if ranges is None:
            return f"FROM {table} t"
        if plan.integer_key:
            key = f"t.{my_ident(plan.keys[0].name)}"
            return f"FROM {table} t WHERE " + " OR ".join(
                f"{key} BETWEEN {lo + a} AND {lo + b}" for a, b in ranges
            )
        shift, segments = aligned_segments(ranges)
        return f"FROM {table} t WHERE ({self._x(plan, lo)} >> {shift}) IN ({','.join(map(str, segments))})"

    def _bounds_sql(self, plan: TablePlan) -> str:
        key = my_ident(plan.keys[0].name)
        return f"SELECT CAST(MIN({key}) AS SIGNED) AS lo, CAST(MAX({key}) AS SIGNED) AS hi FROM {self._table(plan)}"

    def _segment_sums_sql(self, rows_sql: str, shift: int) -> str:
        return (
            f"SELECT (x >> {shift}) AS seg, COUNT(*) AS n, CAST(SUM(h) AS DECIMAL(38,0)) AS h FROM ({rows_sql}) s "
            "GROUP BY seg"
        )

    def statistics(self, plan: TablePlan) -> SourceStatistics:
        """MySQL's own count of the table's rows, `information_schema.TABLES.TABLE_ROWS` (InnoDB: an estimate
        from sampled pages, often off by tens of percent; a TRUNCATE sets it to 0; MySQL 8 caches it for
        `information_schema_stats_expiry`, a day by default: 0 for the reconcile's user keeps it current). MySQL
        has no row-level security; a view in the table's place may filter rows."""
        rows = self._read(
            [
                "SELECT CAST(TABLE_ROWS AS SIGNED) AS estimate, TABLE_TYPE AS kind FROM information_schema.TABLES"
                f" WHERE TABLE_SCHEMA = {my_literal(plan.spec.source_schema)}"
                f" AND TABLE_NAME = {my_literal(plan.spec.name)}"
            ]
        )
        if not rows:
            return SourceStatistics(None, 0.5, None, "information_schema.TABLES.TABLE_ROWS")
        kind = str(rows[0]["kind"] or "")
        hidden = f"a {kind.lower()} in the table's place may filter rows" if kind.upper() == "VIEW" else None
        estimate = rows[0]["estimate"]
        return SourceStatistics(
            None if estimate is None else int(estimate), 0.5, hidden, "information_schema.TABLES.TABLE_ROWS"
        )
